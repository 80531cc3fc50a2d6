"""Second Docker engines for the remote-sandbox tests: each its own dockerd (data root, exec root,
pid file, config file, no bridge, no iptables) listening on ``tcp://127.0.0.1:PORT`` (optionally
with TLS and client certificates, as a real remote engine should) and on a UNIX socket the fixture
itself uses. So the attach channel, the per-host sweep and placement are tested across real
engines on one machine. Loopback only: nothing is sent anywhere else.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path


def engine_problem() -> str | None:
    """Why a second engine cannot run here, or None."""
    from toolgym.sandboxes.docker import engine

    if not engine.engine_answers():
        return "the first Docker engine does not answer (bash scripts/ensure-docker.sh)"
    if shutil.which("dockerd") is None or shutil.which("docker") is None:
        return "dockerd or the docker CLI is not installed"
    if os.geteuid() != 0:
        return "starting a Docker engine needs root"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def make_certs(root: Path) -> Path:
    """A throw-away CA, a server certificate for 127.0.0.1 and a client certificate (openssl);
    returns the client directory (``ca.pem``, ``cert.pem``, ``key.pem``, as DOCKER_CERT_PATH wants)."""
    root.mkdir(parents=True)

    def ssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=root, check=True, capture_output=True)

    ssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca-key.pem",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=toolgym-test-ca",
    )
    for name, ext in (
        ("server", "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n"),
        ("client", "extendedKeyUsage=clientAuth\n"),
    ):
        (root / f"{name}.ext").write_text(ext)
        ssl(
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            f"{name}-key.pem",
            "-out",
            f"{name}.csr",
            "-subj",
            f"/CN={name}",
        )
        ssl(
            "x509",
            "-req",
            "-in",
            f"{name}.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca-key.pem",
            "-CAcreateserial",
            "-out",
            f"{name}-cert.pem",
            "-days",
            "2",
            "-extfile",
            f"{name}.ext",
        )
    client = root / "client"
    client.mkdir()
    for src, dst in (("ca.pem", "ca.pem"), ("client-cert.pem", "cert.pem"), ("client-key.pem", "key.pem")):
        shutil.copyfile(root / src, client / dst)
    return client


@dataclass
class SecondEngine:
    root: Path
    url: str
    local: str
    """``unix://`` socket of the same engine, for the fixture's own commands."""
    proc: subprocess.Popen[bytes]
    certs: Path | None = None
    """Client certificate directory when the TCP listener wants TLS."""
    bridge: str | None = None
    """The network bridge made for this engine (removed by ``stop``)."""

    @classmethod
    def start(cls, *, tls: bool = False, timeout_s: float = 60.0) -> SecondEngine:
        root = Path(
            tempfile.mkdtemp(prefix="tg-dk2-", dir="/tmp")
        )  # short: containerd's socket lives under it
        (root / "daemon.json").write_text("{}")
        port = _free_port()
        url, local = f"tcp://127.0.0.1:{port}", f"unix://{root}/d.sock"
        bridge = f"tgdk2-{port}"
        args = [
            "dockerd",
            "--config-file",
            str(root / "daemon.json"),
            "--data-root",
            str(root / "data"),
            "--exec-root",
            str(root / "exec"),
            "--pidfile",
            str(root / "dockerd.pid"),
            "-H",
            url,
            "-H",
            local,
            f"--bridge={bridge}",
            "--iptables=false",
            "--ip-masq=false",
            "--ip-forward=false",
            "--cgroup-parent=toolgym-test-dk2",
            "--shutdown-timeout=2",
            "--log-level=warn",
        ]
        certs = None
        if tls:
            certs = make_certs(root / "tls")
            args += [
                "--tlsverify",
                "--tlscacert",
                str(root / "tls/ca.pem"),
                "--tlscert",
                str(root / "tls/server-cert.pem"),
                "--tlskey",
                str(root / "tls/server-key.pem"),
            ]
        # A bridge of its own: with --bridge=none dockerd deletes the interface named docker0, which
        # belongs to the first engine here (same network namespace) and which its builds need.
        made = subprocess.run(["ip", "link", "add", bridge, "type", "bridge"], capture_output=True, text=True)
        if made.returncode != 0:
            raise RuntimeError(
                f"could not create bridge {bridge} for the second engine: {made.stderr.strip()}"
            )
        log = (root / "dockerd.log").open("wb")
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        engine = cls(root, url, local, proc, certs, bridge)
        deadline = time.monotonic() + timeout_s
        while engine.docker("version").returncode != 0:
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = (root / "dockerd.log").read_text(errors="replace")[-2000:]
                engine.stop()
                raise RuntimeError(f"the second dockerd did not answer on {local}: {tail}")
            time.sleep(0.3)
        return engine

    def docker(self, *args: str, **kw: object) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(["docker", "-H", self.local, *args], capture_output=True, **kw)  # type: ignore[call-overload,no-any-return]

    def load_image(self, image: str) -> None:
        """Copy ``image`` from the first engine (``docker save | docker load``)."""
        save = subprocess.Popen(
            ["docker", "save", image],
            stdout=subprocess.PIPE,
            env={k: v for k, v in os.environ.items() if k != "DOCKER_HOST"},
        )
        load = self.docker("load", "-q", stdin=save.stdout)
        assert save.stdout is not None
        save.stdout.close()
        if save.wait() != 0 or load.returncode != 0:
            raise RuntimeError(
                f"could not load {image} into {self.url}: {load.stderr.decode(errors='replace')}"
            )

    def stop(self) -> None:
        ids = self.docker("ps", "-aq").stdout.split()
        if ids:
            self.docker("rm", "-f", *[i.decode() for i in ids])
        if self.proc.poll() is None:
            self.proc.terminate()  # dockerd stops its own containerd
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)  # a containerd left behind
        subprocess.run(["umount", "-R", str(self.root / "exec")], capture_output=True)
        if self.bridge:
            subprocess.run(["ip", "link", "delete", self.bridge], capture_output=True)
        # the data root holds an unpacked image: thousands of files, seconds to delete; not our wait
        subprocess.Popen(
            ["rm", "-rf", str(self.root)],
            start_new_session=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
