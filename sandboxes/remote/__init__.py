"""Sandboxes on Docker engines of other machines, and on several engines at once.

- ``RemoteDockerBackend``: one engine reached through its API only (``tcp://HOST:PORT``, TLS):
  the agent's files come from a per-version volume, its channel is the container's attach stream.
- ``MultiHostDockerBackend``: a pool per engine (local or remote), sandboxes placed by free
  capacity; registered as the ``docker-hosts`` sandbox backend, configured by
  ``TOOLGYM_DOCKER_HOSTS=URL[=CAPACITY],...``.

See README.md in this folder and docs/scaling.md.
"""

from __future__ import annotations

from toolgym.sandboxes.remote.hosts import HOSTS_ENV, DockerHost, is_remote_url, parse_hosts

__all__ = [
    "HOSTS_ENV",
    "DockerHost",
    "MultiHostDockerBackend",
    "RemoteDockerBackend",
    "is_remote_url",
    "parse_hosts",
]


def __getattr__(name: str) -> object:  # the backends import the Docker SDK: only when asked for
    if name == "RemoteDockerBackend":
        from toolgym.sandboxes.remote.backend import RemoteDockerBackend

        return RemoteDockerBackend
    if name == "MultiHostDockerBackend":
        from toolgym.sandboxes.remote.multihost import MultiHostDockerBackend

        return MultiHostDockerBackend
    raise AttributeError(name)
