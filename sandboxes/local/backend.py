"""The local backend: bubblewrap namespaces plus rlimits, for hosts without a Docker engine.

Each sandbox is ``bwrap`` running the same agent as the Docker backend, with new user, PID,
network, IPC, UTS and cgroup namespaces; the host's ``/usr`` and ``/etc`` read-only (nothing else
of the host: no ``/home``, ``/root``, ``/var``, no Docker socket); size-capped tmpfs for the work
directory, /tmp and home; no capabilities; ``--die-with-parent`` so it cannot outlive the host
process. When the host runs as root, bwrap itself runs as ``nobody`` (uid 65534): root's files
stay unreadable and the process limit applies. Limits come from rlimits, set by the agent before
anything else starts: ``NPROC`` (pids), ``AS`` (memory, per process), ``FSIZE``, ``NOFILE``,
``CORE``. What this cannot do, unlike Docker: cap CPU, cap the sum of memory over processes, or
count OOM kills (an out-of-memory failure is recognised from the command's error output).
Commands see the host's programs (``/usr/bin/python3`` must exist).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import secrets
import shutil
import signal
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from toolgym.core.errors import SandboxError
from toolgym.core.sandbox_profiles import HOME, SANDBOX_UID, WORKDIR, SandboxProfile, agent_config
from toolgym.sandboxes import hostprocs, lifecycle
from toolgym.sandboxes.channel import AgentListener
from toolgym.sandboxes.local import limits
from toolgym.sandboxes.netproxy import EgressProxy
from toolgym.sandboxes.pool import PooledBackend
from toolgym.sandboxes.sandbox import AgentSandbox

PYTHON = "/usr/bin/python3"
NOBODY = 65534


def host_uid() -> int:
    """The host uid sandboxes run as: ``nobody`` when we are root, else our own."""
    return NOBODY if os.geteuid() == 0 else os.geteuid()


@functools.lru_cache(maxsize=1)
def bwrap_problem() -> str | None:
    """Why the local backend cannot work here, or None when it can (checked once per process)."""
    if shutil.which("bwrap") is None:
        return "bubblewrap is not installed (apt-get install bubblewrap)"
    if not os.path.exists(PYTHON):
        return f"{PYTHON} is missing on this host"
    try:
        done = subprocess.run(
            [
                "bwrap",
                "--unshare-all",
                "--die-with-parent",
                "--ro-bind",
                "/",
                "/",
                "--uid",
                str(SANDBOX_UID),
                "true",
            ],
            capture_output=True,
            timeout=20,
            **_drop_kwargs(),
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bwrap could not run: {exc}"
    if done.returncode != 0:
        return (
            "bwrap cannot create namespaces here: "
            + done.stderr.decode(errors="replace").strip()
            + " (unprivileged user namespaces may be disabled: sysctl kernel.unprivileged_userns_clone=1)"
        )
    return None


def _drop_kwargs() -> dict[str, Any]:
    if os.geteuid() != 0:
        return {}
    return {"user": NOBODY, "group": NOBODY, "extra_groups": []}


def _root_binds() -> list[str]:
    args = ["--ro-bind", "/usr", "/usr", "--ro-bind", "/etc", "/etc"]
    for name in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(name):
            args += ["--symlink", os.readlink(name), name]
        elif os.path.isdir(name):
            args += ["--ro-bind", name, name]
    return args


def writable_mounts(profile: SandboxProfile) -> list[tuple[str, str, int, str]]:
    """Every writable place of a local sandbox: ``(name, path inside, size, mode)``."""
    return [
        ("workspace", WORKDIR, profile.workdir_bytes, "0755"),
        ("tmp", "/tmp", profile.tmp_bytes, "1777"),
        ("home", HOME, profile.home_bytes, "0700"),
        ("shm", "/dev/shm", profile.shm_bytes, "1777"),
    ]


def tmpfs_options(profile: SandboxProfile, size: int, mode: str, uid: int, *, exec_: bool) -> str:
    """Mount options of one sandbox tmpfs made by the launcher (size and inode caps)."""
    return f"size={size},nr_inodes={profile.inodes},mode={mode},uid={uid},gid={uid},nosuid,nodev" + (
        "" if exec_ else ",noexec"
    )


@functools.lru_cache(maxsize=1)
def _bwrap_disables_userns() -> bool:
    try:
        text = subprocess.run(["bwrap", "--help"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "--disable-userns" in text


def bwrap_argv(
    profile: SandboxProfile,
    *,
    state: Path,
    agent_dir: Path,
    config: dict[str, Any],
    premounted: Path | None = None,
) -> list[str]:
    """The full bubblewrap command line of one sandbox. ``premounted``: a directory holding the
    writable tmpfs already mounted by the launcher (``workspace``, ``tmp``, ``home``, ``shm``),
    bound in instead of bwrap's own (which have a size but no inode cap)."""
    writable: list[str] = []
    for name, path, size, mode in writable_mounts(profile):
        if premounted is not None:
            writable += ["--bind", str(premounted / name), path]
        else:
            writable += ["--perms", mode, "--size", str(size), "--tmpfs", path]
    return [
        "bwrap",
        "--unshare-all",
        "--unshare-user",
        "--as-pid-1",
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
        "--clearenv",
        *(["--disable-userns"] if _bwrap_disables_userns() else []),
        *_root_binds(),
        "--ro-bind",
        str(state / "passwd"),
        "/etc/passwd",
        "--ro-bind",
        str(state / "group"),
        "/etc/group",
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        *writable,
        "--mqueue",
        "/dev/mqueue",
        "--remount-ro",
        "/dev",
        "--ro-bind",
        str(state),
        "/run/toolgym",
        "--ro-bind",
        str(agent_dir),
        "/opt/toolgym",
        "--remount-ro",
        "/",
        "--uid",
        str(SANDBOX_UID),
        "--gid",
        str(SANDBOX_UID),
        "--hostname",
        "sandbox",
        "--chdir",
        WORKDIR,
        "--",
        PYTHON,
        "-E",
        "-s",
        "-S",
        "/opt/toolgym/main.py",
        json.dumps(config),
    ]


class LocalBackend(PooledBackend):
    """Sandboxes as bubblewrap namespaces on this host (see the module docstring)."""

    name = "local"

    async def _sweep(self) -> int:
        swept = await asyncio.to_thread(lifecycle.sweep_state_dirs)
        await asyncio.to_thread(limits.sweep)
        return swept

    async def _create(
        self,
        kind: str,
        profile: SandboxProfile,
        *,
        sandbox_id: str,
        episode_id: str,
        labels: Mapping[str, str],
    ) -> AgentSandbox:
        problem = await asyncio.to_thread(bwrap_problem)  # runs bwrap once per process
        if problem:
            raise SandboxError(f"the local sandbox backend cannot work on this host: {problem}")
        uid = host_uid()
        state, private = lifecycle.sandbox_dir(sandbox_id, uid=uid)
        if not private:
            raise SandboxError(f"cannot hand {state} to uid {uid}: run as root or as an ordinary user")
        (state / "passwd").write_text(
            f"sandbox:x:{SANDBOX_UID}:{SANDBOX_UID}:sandbox:{HOME}:/bin/bash\n"
            "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
        )
        (state / "group").write_text(f"sandbox:x:{SANDBOX_UID}:\nnogroup:x:65534:\n")
        for name in ("passwd", "group"):
            (state / name).chmod(0o644)
        token = secrets.token_hex(16)
        listener = AgentListener(str(state / "h.sock"), token=token, name=sandbox_id, owner_uid=uid)
        proxy = None
        proc = None
        cgroups: list[Path] = []
        try:
            cgroups = await asyncio.to_thread(
                limits.prepare, sandbox_id, memory_bytes=profile.memory_bytes, pids=profile.pids
            )
            await listener.start()
            if profile.network:
                proxy = EgressProxy(str(state / "p.sock"), profile, name=sandbox_id, owner_uid=uid)
                await proxy.start()
            rlimits = {
                "NPROC": profile.pids,
                "AS": profile.memory_bytes,
                "FSIZE": max(profile.workdir_bytes, profile.tmp_bytes),
            }
            config = agent_config(profile, socket="/run/toolgym/h.sock", python=PYTHON, rlimits=rlimits)
            # the token travels in a pipe the agent inherits, reads and closes: not on bwrap's or the
            # agent's command line, which /proc shows (the agent's, to every process of the sandbox)
            token_r, token_w = os.pipe()
            log_fd = None
            try:
                try:
                    os.write(token_w, token.encode("ascii"))  # 32 bytes: never blocks on a pipe
                finally:
                    os.close(token_w)
                config["token_fd"] = token_r
                argv, drop = await asyncio.to_thread(self._launch_argv, profile, state, config, cgroups)
                log_fd = os.open(state / "bwrap.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                proc = await asyncio.create_subprocess_exec(
                    *argv,
                    stdin=subprocess.DEVNULL,
                    stdout=log_fd,
                    stderr=log_fd,
                    env={},
                    pass_fds=(token_r,),
                    start_new_session=True,
                    **(_drop_kwargs() if drop else {}),
                )
            finally:
                os.close(token_r)
                if log_fd is not None:
                    os.close(log_fd)

            async def alive() -> str | None:
                if proc is None or proc.returncode is None:
                    return None
                text = (state / "bwrap.log").read_text(errors="replace").strip()[-2000:]
                return f"bwrap exited with status {proc.returncode}: {text or 'no output'}"

            channel = await listener.wait(self.start_timeout_s, alive=alive)
        except BaseException:
            listener.stop()
            if proxy is not None:
                proxy.stop()
            if proc is not None:
                _kill_group(proc.pid)
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(proc.wait(), 5.0)
            limits.cleanup(cgroups)
            lifecycle.remove_sandbox_dir(sandbox_id)
            raise
        return AgentSandbox(
            id=sandbox_id,
            kind=kind,
            backend=self.name,
            channel=channel,
            profile=profile,
            episode_id=episode_id,
            handle={"process": proc, "proxy": proxy, "cgroups": cgroups},
        )

    @staticmethod
    def _launch_argv(
        profile: SandboxProfile, state: Path, config: dict[str, Any], cgroups: list[Path]
    ) -> tuple[list[str], bool]:
        """The command line (through the launcher when it has work to do) and whether the host
        must drop to ``nobody`` itself (else the launcher does, after its privileged steps)."""
        agent_dir = lifecycle.staged_agent_dir()
        mounts: list[tuple[Path, str]] = []
        premounted = None
        if limits.can_mount():
            premounted = state / "mnt"
            premounted.mkdir(exist_ok=True)
            for name, _, size, mode in writable_mounts(profile):
                (premounted / name).mkdir(exist_ok=True)
                mounts.append(
                    (
                        premounted / name,
                        tmpfs_options(profile, size, mode, host_uid(), exec_=name in ("workspace", "tmp")),
                    )
                )
        argv = bwrap_argv(profile, state=state, agent_dir=agent_dir, config=config, premounted=premounted)
        drop_to = NOBODY if os.geteuid() == 0 else None
        launched = limits.launcher_argv(argv, cgroups=cgroups, mounts=mounts, drop_to=drop_to)
        return launched, launched is argv

    async def _note_start(self, sandbox: AgentSandbox) -> None:
        """Record the host PIDs of bwrap (outside the sandbox) and of the agent, its only child
        (PID 1 of the sandbox's namespace: ``--as-pid-1``), and the agent's attributes that
        sandbox code could change (``hostprocs.attributes``)."""
        outer = sandbox.handle["process"].pid
        agents = hostprocs.children(outer)
        if len(agents) != 1:
            raise SandboxError(f"sandbox {sandbox.id}: expected bwrap -> agent, found bwrap -> {agents}")
        sandbox.handle["pids"] = {"outer": outer, "agent": agents[0]}
        sandbox.handle["attributes"] = hostprocs.fresh_attributes(agents[0])
        inner = sandbox.channel.hello.get("zygote")
        if inner is not None:
            try:
                sandbox.handle["zygote"] = hostprocs.note_zygote(agents[0], int(inner))
            except LookupError as exc:
                raise SandboxError(f"sandbox {sandbox.id}: {exc}") from None

    async def _host_check(self, sandbox: AgentSandbox) -> str | None:
        pids = sandbox.handle.get("pids")
        if not pids:
            return "the sandbox's processes were not recorded when it was made"
        return await asyncio.to_thread(
            self._check_from_host,
            pids,
            sandbox.handle.get("attributes"),
            bool(sandbox.kept_pid),
            sandbox.handle.get("zygote"),
        )

    @staticmethod
    def _check_from_host(
        pids: dict[str, int],
        attributes: dict[str, object] | None,
        kept: bool,
        zygote: dict[str, object] | None = None,
    ) -> str | None:
        """Only bwrap, the agent, its zygote (and the kept session's tree) left, and the agent's
        and the zygote's attributes as when it was made (``hostprocs.attributes_changed``)."""
        expected = {pids["agent"]} | ({int(zygote["pid"])} if zygote else set())  # type: ignore[call-overload]
        left = hostprocs.only_expected(pids["outer"], expected, kept_under=pids["agent"] if kept else None)
        if left is None and attributes:
            left = hostprocs.attributes_changed(pids["agent"], attributes)
        if left is None and zygote:
            left = hostprocs.zygote_changed(zygote)
        return left

    async def _destroy(self, sandbox: AgentSandbox) -> None:
        proxy = sandbox.handle.get("proxy")
        if proxy is not None:
            proxy.stop()
        proc = sandbox.handle["process"]
        _kill_group(proc.pid)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(proc.wait(), 10.0)
        limits.cleanup(sandbox.handle.get("cgroups") or [])

    def _destroy_sync(self, sandbox: AgentSandbox) -> None:
        _kill_group(sandbox.handle["process"].pid)


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
