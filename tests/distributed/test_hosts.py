"""Docker host lists: parsing, capacities, channel choice, TLS settings from the environment."""

from __future__ import annotations

from pathlib import Path

import pytest

from toolgym.core.errors import ConfigError
from toolgym.sandboxes.remote import DockerHost, is_remote_url, parse_hosts


def test_parse_urls_and_capacities() -> None:
    hosts = parse_hosts(
        "tcp://10.0.0.5:2376=32, unix:///var/run/docker.sock=8,tcp://10.0.0.6:2376", environ={}
    )
    assert [(h.url, h.capacity) for h in hosts] == [
        ("tcp://10.0.0.5:2376", 32),
        ("unix:///var/run/docker.sock", 8),
        ("tcp://10.0.0.6:2376", None),
    ]
    assert [h.attach for h in hosts] == [True, False, True]
    assert [h.name for h in hosts] == ["10.0.0.5:2376", "/var/run/docker.sock", "10.0.0.6:2376"]
    mixed = parse_hosts([DockerHost("tcp://a:1", capacity=2), {"url": "unix:///x.sock", "channel": "attach"}])
    assert mixed[1].attach and mixed[0].capacity == 2
    assert is_remote_url("tcp://a:1") and not is_remote_url("unix:///x") and not is_remote_url(None)


@pytest.mark.parametrize(
    "spec, message",
    [
        ("tcp://a:1=many", "whole number"),
        ("ssh://user@a", "ssh:// engines are not supported"),
        ("tcp://a:1=0", "at least 1"),
        ("tcp://a:1,tcp://a:1", "listed twice"),
        ("", "no Docker hosts"),
    ],
)
def test_bad_host_lists_say_what_to_write(spec: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_hosts(spec, environ={})


def test_tls_from_the_environment_with_per_host_directories(tmp_path: Path) -> None:
    for d in (tmp_path, tmp_path / "10.0.0.6"):
        d.mkdir(exist_ok=True)
        for name in ("ca.pem", "cert.pem", "key.pem"):
            (d / name).write_text("x")
    env = {"DOCKER_TLS_VERIFY": "1", "DOCKER_CERT_PATH": str(tmp_path)}
    a, b = parse_hosts("tcp://10.0.0.5:2376=4,tcp://10.0.0.6:2376=4", environ=env)
    assert a.tls_verify and a.cert_path == str(tmp_path) and b.cert_path == str(tmp_path / "10.0.0.6")
    plain = DockerHost.from_env("tcp://10.0.0.7:2375", environ={})
    assert not plain.uses_tls and plain.ssl_context() is None
    with pytest.raises(ConfigError, match="TLS files missing"):
        DockerHost("tcp://a:2376", tls_verify=True, cert_path=str(tmp_path / "nowhere")).ssl_context()
