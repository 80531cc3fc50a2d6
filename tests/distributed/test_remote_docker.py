"""Sandboxes on a second Docker engine reached over TCP on loopback (as a remote host would be):
the attach channel, hardening and labels, the end of sandboxes with their orchestrator, the
per-host sweep, and placement across the two engines by free capacity."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import sys
import textwrap
import time
import uuid
from typing import Any

import pytest

from toolgym.core.errors import SandboxBrokenError, SandboxError
from toolgym.core.sandbox_profiles import MiB
from toolgym.sandboxes import SandboxProfile, lifecycle
from toolgym.sandboxes.docker import engine
from toolgym.sandboxes.docker.backend import DockerBackend
from toolgym.sandboxes.remote import DockerHost, agentvol
from toolgym.sandboxes.remote.backend import RemoteDockerBackend
from toolgym.sandboxes.remote.multihost import MultiHostDockerBackend

pytestmark = [pytest.mark.docker, pytest.mark.slow]
IMAGE = "toolgym/base:bookworm"
PROFILE = SandboxProfile(
    image=IMAGE,
    memory_bytes=256 * MiB,
    cpus=1.0,
    pids=64,
    workdir_bytes=32 * MiB,
    tmp_bytes=16 * MiB,
    home_bytes=8 * MiB,
    default_timeout_s=20.0,
    ttl_s=1800.0,
)
PROFILES = {"python": PROFILE}
LOCAL = "unix:///var/run/docker.sock"


def api2(url: str) -> Any:
    return DockerHost(url).client()


def test_sandbox_over_the_attach_channel(second_engine: str) -> None:
    async def main() -> None:
        backend = RemoteDockerBackend(host=second_engine, profiles=PROFILES, max_idle=1)
        try:
            sb = await backend.acquire("python", episode_id="ep-remote")
            r = await sb.run("echo hi; id -u; exit 3", timeout=10)
            assert (r.exit_code, r.stdout) == (3, "hi\n1000\n")
            py = await sb.python()
            await py.execute("x = 41")
            assert (await py.execute("x + 1")).value == "42"
            await sb.write_file("data/a.txt", "hello")
            assert await sb.read_file("data/a.txt") == b"hello"
            big = await sb.run(["python3", "-c", "print('y' * 3_000_000)"], timeout=20, max_output=4_000_000)
            assert len(big.stdout) == 3_000_001 and not big.truncated, "large replies cross the stream intact"
            # the agent's stdin/stdout are /dev/null for everything it starts (read from the host: the
            # agent is not dumpable, so code inside cannot look at its fds); its agent files are read-only
            agent = sb.handle["pids"]["agent"]
            assert [os.readlink(f"/proc/{agent}/fd/{n}") for n in (0, 1)] == ["/dev/null", "/dev/null"]
            fds = await sb.run(
                "awk '$2==\"/opt/toolgym\" {print substr($4, 1, 2)}' /proc/mounts; ls /sys/class/net",
                timeout=10,
            )
            assert fds.stdout.split() == ["ro", "lo"]

            info = api2(second_engine).inspect_container(sb.handle["container"])
            hc, labels = info["HostConfig"], info["Config"]["Labels"]
            assert (
                hc["ReadonlyRootfs"]
                and hc["CapDrop"] == ["ALL"]
                and hc["SecurityOpt"] == ["no-new-privileges"]
            )
            assert (
                hc["NetworkMode"] == "none"
                and not hc["Init"]
                and hc["AutoRemove"]
                and hc["LogConfig"]["Type"] == "none"
            )
            assert (
                hc["Memory"] == hc["MemorySwap"] == PROFILE.memory_bytes and hc["PidsLimit"] == PROFILE.pids
            )
            assert (
                info["Config"]["User"] == "1000:1000"
                and info["Config"]["OpenStdin"]
                and info["Config"]["StdinOnce"]
            )
            assert labels[engine.LABEL] == "python" and labels["toolgym.episode"] == "ep-remote"
            assert labels["toolgym.run"] == backend.run_id and labels["toolgym.owner"] == lifecycle.owner_id()
            assert labels["toolgym.id"] == sb.id and int(labels["toolgym.expires"]) > time.time()
            mounts = {m["Destination"]: m for m in info["Mounts"]}
            assert (
                mounts[agentvol.MOUNT]["Name"] == agentvol.volume_name() and not mounts[agentvol.MOUNT]["RW"]
            )
            assert not engine.api().containers(all=True, filters={"label": f"toolgym.id={sb.id}"}), (
                "not on the first engine"
            )

            await backend.release(sb)  # reset over the channel, then reused
            await backend.settle()
            again = await backend.acquire("python", episode_id="ep-2")
            assert again is sb and (await again.run("ls data 2>&1; echo $?")).stdout.strip().endswith("2")
            api2(second_engine).kill(sb.handle["container"])  # the sandbox dies: its channel says so
            with pytest.raises(SandboxBrokenError):
                await again.run("true", timeout=5)
            await backend.release(again)
        finally:
            await backend.aclose()

    asyncio.run(main())


ORCHESTRATOR = textwrap.dedent("""
    import asyncio, sys
    from toolgym.sandboxes import SandboxProfile
    from toolgym.sandboxes.remote.backend import RemoteDockerBackend
    async def main():
        b = RemoteDockerBackend(host=sys.argv[1], profiles={"python": SandboxProfile(image=sys.argv[2])})
        sb = await b.acquire("python")
        print(sb.handle["container"], flush=True)
        await asyncio.sleep(600)
    asyncio.run(main())
""")


def test_sandbox_ends_with_its_orchestrator(second_engine: str) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", ORCHESTRATOR, second_engine, IMAGE], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    container = proc.stdout.readline().strip()
    assert container, "the orchestrator made no sandbox"
    api = api2(second_engine)
    assert api.inspect_container(container)["State"]["Running"]
    proc.kill()  # SIGKILL: no clean-up runs; the engine closes the agent's stdin when the connection drops
    proc.wait()
    deadline = time.monotonic() + 20
    while api.containers(all=True, filters={"id": container}):
        assert time.monotonic() < deadline, "the sandbox outlived its orchestrator"
        time.sleep(0.2)


def test_sweep_removes_leftovers_on_that_host(second_engine: str) -> None:
    api = api2(second_engine)
    me = socket.gethostname()

    def leftover(owner: str, expires: float) -> str:
        labels = {
            engine.LABEL: "python",
            "toolgym.owner": owner,
            "toolgym.expires": str(int(expires)),
            "toolgym.run": "sweep-test",
        }
        cid = api.create_container(
            IMAGE,
            command=["sleep", "300"],
            labels=labels,
            network_disabled=True,
            host_config=api.create_host_config(network_mode="none"),
        )["Id"]
        api.start(cid)
        return str(cid)

    dead_owner = leftover(f"{me}:999999999:1", time.time() + 3600)  # a process of this machine that is gone
    expired = leftover("elsewhere:1:1", time.time() - 10)  # another machine's, past its TTL
    alive = leftover("elsewhere:1:1", time.time() + 3600)  # another machine's, within its TTL: kept
    try:
        swept = asyncio.run(RemoteDockerBackend(host=second_engine)._sweep())
        left = {c["Id"] for c in api.containers(all=True, filters={"label": "toolgym.run=sweep-test"})}
        assert swept >= 2 and dead_owner not in left and expired not in left and alive in left
    finally:
        engine.remove_container(api, alive)


def test_placement_by_free_capacity_across_two_engines(second_engine: str) -> None:
    async def main() -> None:
        # The first engine is the machine's own, shared with whatever else runs (another pytest worker's
        # sandboxes come and go): the backend counts other processes' sandboxes once (refresh_s covers
        # the test) and the local capacity is set 2 above that count, so the split cannot move under it.
        multi = MultiHostDockerBackend(
            [f"{LOCAL}=2", f"{second_engine}=3"],
            profiles=PROFILES,
            max_idle=4,
            acquire_timeout_s=60,
            refresh_s=3600,
        )
        await multi.start()
        await multi._refresh_others()
        multi.capacity[LOCAL] = 2 + multi.others[LOCAL]
        assert isinstance(multi.backends[LOCAL], DockerBackend) and not isinstance(
            multi.backends[LOCAL], RemoteDockerBackend
        )
        assert isinstance(multi.backends[second_engine], RemoteDockerBackend)
        try:
            held = [await multi.acquire("python", episode_id=f"ep{i}") for i in range(5)]
            assert {u: p["live"] for u, p in multi.placement().items()} == {LOCAL: 2, second_engine: 3}
            assert [(await sb.run("echo ok")).stdout for sb in held] == ["ok\n"] * 5
            sixth = asyncio.create_task(multi.acquire("python", episode_id="ep5"))
            await asyncio.sleep(1.0)
            assert not sixth.done(), "both hosts are full: the sixth waits"
            on_local = next(sb for sb in held if sb.handle.get("host") is None)
            await multi.release(on_local)
            sb6 = await asyncio.wait_for(sixth, 30)
            assert sb6 is on_local, "the freed (reset) sandbox is reused on its host"
            for sb in held:
                await multi.release(sb)
        finally:
            await multi.aclose()
        assert not api2(second_engine).containers(all=True, filters={"label": f"toolgym.run={multi.run_id}"})

    asyncio.run(main())


def test_other_processes_sandboxes_take_capacity(second_engine: str) -> None:
    api = api2(second_engine)
    labels = {
        engine.LABEL: "python",
        "toolgym.owner": "elsewhere:1:1",
        "toolgym.expires": str(int(time.time() + 3600)),
    }
    foreign = api.create_container(
        IMAGE,
        command=["sleep", "300"],
        labels=labels,
        network_disabled=True,
        host_config=api.create_host_config(network_mode="none"),
    )["Id"]
    api.start(foreign)

    async def main() -> None:
        multi = MultiHostDockerBackend(
            [f"{second_engine}=2"], profiles=PROFILES, acquire_timeout_s=2, refresh_s=0.1
        )
        try:
            sb = await multi.acquire("python")
            assert multi.placement()[second_engine]["others"] == 1
            with pytest.raises(SandboxError, match="at capacity"):
                await multi.acquire("python")
            await multi.release(sb, broken=True)  # destroyed: its room is free again
            await multi.settle()
            await multi.release(await multi.acquire("python"))
        finally:
            await multi.aclose()

    try:
        asyncio.run(main())
    finally:
        engine.remove_container(api, foreign)


def test_tls_engine_with_client_certificates(tls_engine: Any) -> None:
    host = DockerHost.from_env(
        tls_engine.url, environ={"DOCKER_TLS_VERIFY": "1", "DOCKER_CERT_PATH": str(tls_engine.certs)}
    )
    assert host.tls_verify and host.cert_path == str(tls_engine.certs)

    async def main() -> None:
        backend = RemoteDockerBackend(host=host, profiles=PROFILES)
        try:
            sb = await backend.acquire("python")
            assert (await sb.run("echo over-tls", timeout=10)).stdout == "over-tls\n"
            py = await sb.python()
            assert (await py.execute("sum(range(10))")).value == "45"
            await backend.release(sb)
        finally:
            await backend.aclose()

    asyncio.run(main())
    no_certs = DockerHost(tls_engine.url)  # plain TCP to a TLS listener: refused, with the engine named
    with pytest.raises(SandboxError, match=tls_engine.url.split("//")[1]):
        asyncio.run(RemoteDockerBackend(host=no_certs, profiles=PROFILES).acquire("python"))


def test_gc_of_every_listed_host(second_engine: str, capsys: pytest.CaptureFixture[str]) -> None:
    from toolgym.sandboxes.remote.__main__ import main

    api = api2(second_engine)
    labels = {
        engine.LABEL: "python",
        "toolgym.owner": "elsewhere:1:1",
        "toolgym.expires": str(int(time.time() + 3600)),
    }
    kept = api.create_container(
        IMAGE,
        command=["sleep", "300"],
        labels=labels,
        host_config=api.create_host_config(network_mode="none"),
    )["Id"]
    # a live sandbox of this machine (its state directory: agent and egress sockets) is none of that engine's business
    here = lifecycle.state_root() / f"gc-scope-{uuid.uuid4().hex[:8]}"
    here.mkdir()
    (here / "owner").write_text(lifecycle.owner_id())
    try:
        assert main(["ls", f"{second_engine}=4"]) == 0 and "owner=elsewhere:1:1" in capsys.readouterr().out
        assert main(["gc", second_engine]) == 0 and api.containers(all=True, filters={"id": kept}), (
            "a live owner's stays"
        )
        assert main(["gc", "--all", second_engine]) == 0 and not api.containers(
            all=True, filters={"id": kept}
        )
        assert "removed 1 sandboxes" in capsys.readouterr().out
        assert (here / "owner").exists(), (
            "gc --all of another engine removed a live local sandbox's state directory"
        )
    finally:
        engine.remove_container(api, kept)
        shutil.rmtree(here, ignore_errors=True)
    assert (
        main(["ls", "tcp://127.0.0.1:1"]) == 1 and "cannot reach the Docker engine" in capsys.readouterr().err
    )
