"""The agent's files on an engine that does not share this machine's filesystem: a named Docker
volume per agent version, mounted read-only into every sandbox there.

On a local engine the agent's files are bind-mounted from a staged directory; a remote engine
cannot see that directory, and a read-only root file system refuses copies into the container.
So each host gets a volume ``toolgym-agent-<digest>`` (the digest of the agent's files) holding
them under ``a/``. It is filled by a short-lived helper container from the sandbox image (no
network, no capabilities, read-only root) that writes the files to a temporary directory in the
volume and renames it into place: the rename is atomic, so concurrent processes (Ray actors
starting together) never see a half-written agent, and the first writer wins.
"""

from __future__ import annotations

import base64
import calendar
import hashlib
import json
import threading
import time
import zlib
from typing import Any

from toolgym.core.errors import SandboxError
from toolgym.sandboxes import lifecycle
from toolgym.sandboxes.agent import AGENT_DIR, AGENT_FILES
from toolgym.sandboxes.docker import engine

VOLUME_PREFIX = "toolgym-agent-"
VOLUME_LABEL = "toolgym.agent"
MOUNT = "/opt/toolgym"
ENTRY = f"{MOUNT}/a/main.py"
"""The agent's entry point inside sandboxes on such hosts."""
KEEP_S = lifecycle.AGENT_KEEP_S
"""Volumes of other agent versions are removed once older than this and unused."""

_FILL = r"""
import base64, json, os, shutil, sys, zlib
files = json.loads(zlib.decompress(base64.b64decode(sys.argv[1])))
final = "/v/a"
if os.path.isfile(os.path.join(final, "main.py")):
    sys.exit(0)
tmp = "/v/.fill-%d-%s" % (os.getpid(), os.urandom(4).hex())
os.makedirs(os.path.join(tmp, "a"))
for name, text in files.items():
    with open(os.path.join(tmp, "a", name), "w", encoding="utf-8") as fh:
        fh.write(text)
    os.chmod(os.path.join(tmp, "a", name), 0o644)
os.chmod(os.path.join(tmp, "a"), 0o755)
try:
    os.rename(os.path.join(tmp, "a"), final)
except OSError:
    pass  # another process filled it first
shutil.rmtree(tmp, ignore_errors=True)
"""

_done: set[tuple[str, str]] = set()
_lock = threading.Lock()


def digest() -> str:
    """12 hex digits of the agent's files (same rule as the local staging directory)."""
    h = hashlib.sha256()
    for name in AGENT_FILES:
        h.update(name.encode() + b"\0" + (AGENT_DIR / name).read_bytes())
    return h.hexdigest()[:12]


def volume_name() -> str:
    return VOLUME_PREFIX + digest()


def _payload() -> str:
    files = {name: (AGENT_DIR / name).read_text(encoding="utf-8") for name in AGENT_FILES}
    return base64.b64encode(zlib.compress(json.dumps(files).encode(), 9)).decode("ascii")


def ensure(api: Any, image: str, *, python: str, key: str, timeout_s: float = 60.0) -> str:
    """Make sure the engine behind ``api`` has the agent volume (blocking; once per process and
    engine ``key``); returns its name. ``image`` runs the helper (it has ``python``)."""
    name = volume_name()
    with _lock:
        if (key, name) in _done:
            return name
    from docker.types import Mount

    api.create_volume(name=name, labels={VOLUME_LABEL: digest()})  # returns the existing one if there
    host_config = api.create_host_config(
        mounts=[Mount(target="/v", source=name, type="volume")],
        network_mode="none",
        read_only=True,
        cap_drop=["ALL"],
        security_opt=["no-new-privileges"],
        pids_limit=32,
        mem_limit=128 * 1024 * 1024,
    )
    labels = {
        engine.LABEL: "agent-fill",
        "toolgym.owner": lifecycle.owner_id(),
        "toolgym.expires": str(int(time.time() + 600)),
    }
    with engine.LIFECYCLE_GATE:
        helper = api.create_container(
            image,
            command=[python, "-E", "-s", "-S", "-c", _FILL, _payload()],
            user="0:0",
            labels=labels,
            host_config=host_config,
            network_disabled=True,
        )["Id"]
    try:
        api.start(helper)
        status = api.wait(helper, timeout=timeout_s)
        if status.get("StatusCode") != 0:
            logs = api.logs(helper, tail=20).decode("utf-8", "replace").strip()
            raise SandboxError(
                f"could not put the sandbox agent into volume {name} on the Docker engine "
                f"(helper exited {status.get('StatusCode')}): {logs or 'no output'}; is python3 in {image}?"
            )
    finally:
        engine.remove_container(api, helper)
    with _lock:
        _done.add((key, name))
    return name


def sweep(api: Any, *, now: float | None = None) -> int:
    """Remove agent volumes of other versions that are older than ``KEEP_S`` and unused; how many."""
    import docker

    current, now = volume_name(), now or time.time()
    removed = 0
    for vol in (api.volumes(filters={"label": VOLUME_LABEL}) or {}).get("Volumes") or []:
        if vol["Name"] == current:
            continue
        created = vol.get("CreatedAt", "")
        try:
            age = now - calendar.timegm(
                time.strptime(created[:19], "%Y-%m-%dT%H:%M:%S")
            )  # engines report UTC
        except ValueError:
            continue
        if age < KEEP_S:
            continue
        try:
            api.remove_volume(vol["Name"])
            removed += 1
        except docker.errors.APIError:  # in use by a sandbox of an older process: keep it
            continue
    return removed
