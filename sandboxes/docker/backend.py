"""The Docker backend: one hardened container per sandbox, driven through its agent.

Each container runs the agent as its PID 1 (uid 1000) and nothing else until asked; the agent
reaps orphans itself (no ``docker-init``: a tool could write an init's memory through
``/proc/1/mem``, while the agent is not dumpable). By
default it has no network (``--network none``), a read-only root with size-capped tmpfs for the
work directory, /tmp and home, all capabilities dropped, ``no-new-privileges``, the engine's
default seccomp profile, pids / memory (= memory+swap) / CPU limits, no core dumps, and
``auto_remove`` so it vanishes once its agent exits. The state directory (the host's listening
socket) and the agent's files are bind-mounted read-only. Labels: ``toolgym.sandbox`` (kind),
``toolgym.run``, ``toolgym.episode``, ``toolgym.owner``, ``toolgym.expires`` and ``toolgym.id``.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from collections.abc import Mapping, Sequence
from typing import Any

from toolgym.core.errors import SandboxError
from toolgym.core.sandbox import ImageNeed
from toolgym.core.sandbox_profiles import HOME, SANDBOX_UID, WORKDIR, SandboxProfile, agent_config
from toolgym.sandboxes import counters, hostprocs, lifecycle
from toolgym.sandboxes.agent import protocol
from toolgym.sandboxes.channel import AgentListener
from toolgym.sandboxes.docker import engine, warm
from toolgym.sandboxes.netproxy import EgressProxy
from toolgym.sandboxes.pool import PooledBackend
from toolgym.sandboxes.sandbox import AgentSandbox

PYTHON = "/usr/bin/python3"


class DockerBackend(PooledBackend):
    """Sandboxes as Docker containers (see the module docstring). Options: those of
    ``PooledBackend`` plus ``base_url`` (the engine; default from ``DOCKER_HOST``)."""

    name = "docker"

    def __init__(self, *, base_url: str | None = None, **options: Any) -> None:
        super().__init__(**options)
        self.base_url = base_url
        self._images_ok: set[str] = set()

    @property
    def api(self) -> Any:
        return engine.api(self.base_url)

    async def _sweep(self) -> int:
        def sweep() -> int:  # the client is made off the loop too
            swept = engine.sweep(self.api)
            lifecycle.sweep_state_dirs()  # the state directories of owners that are gone, never a live one's
            return swept

        return await engine.call(sweep)

    async def _check_image(self, image: str, kind: str) -> None:
        if image in self._images_ok:
            return
        import docker

        try:
            await engine.call(lambda: self.api.inspect_image(image))
        except docker.errors.ImageNotFound:
            from toolgym.sandboxes.docker.images import recipes

            hint = (
                f"run `toolgym sandbox build {kind}`"
                if kind in recipes()
                else f"build it, or give the kind an existing image: profiles={{{kind!r}: {{'image': ...}}}}"
            )
            raise SandboxError(
                f"the Docker image {image} for {kind!r} sandboxes is missing; {hint}"
            ) from None
        self._images_ok.add(image)

    async def warm_images(
        self, needs: Sequence[ImageNeed], *, progress: warm.Progress | None = None
    ) -> warm.WarmResult:
        """Make the images a batch needs present (pulled where a registry answers, use recorded);
        a missing one raises ``warm.MissingImageError`` naming it and how to build it."""
        return await engine.call(warm.warm, self.api, needs, progress=progress or warm.TerminalProgress())

    async def _create(
        self,
        kind: str,
        profile: SandboxProfile,
        *,
        sandbox_id: str,
        episode_id: str,
        labels: Mapping[str, str],
    ) -> AgentSandbox:
        image = profile.image_for(kind)
        await self._check_image(image, kind)
        state, private = lifecycle.sandbox_dir(sandbox_id, uid=SANDBOX_UID)
        token = secrets.token_hex(16)
        listener = AgentListener(
            str(state / "h.sock"), token=token, name=sandbox_id, owner_uid=SANDBOX_UID if private else None
        )
        proxy = None
        container_id = None
        try:
            await listener.start()
            if not private:
                (state / "h.sock").chmod(0o666)  # the token still keeps other users out
            if profile.network:
                proxy = EgressProxy(
                    str(state / "p.sock"),
                    profile,
                    name=sandbox_id,
                    owner_uid=SANDBOX_UID if private else None,
                )
                await proxy.start()
                if not private:
                    (state / "p.sock").chmod(0o666)
            config = agent_config(profile, socket="/run/toolgym/h.sock", python=PYTHON)
            all_labels = self._labels(
                labels, kind, sandbox_id=sandbox_id, episode_id=episode_id, profile=profile
            )
            container_id = await engine.call(
                self._start_container, image, kind, sandbox_id, profile, config, all_labels, str(state), token
            )

            async def alive() -> str | None:
                return await engine.call(self._why_stopped, container_id)

            channel = await listener.wait(self.start_timeout_s, alive=alive)
        except BaseException:
            listener.stop()
            if proxy is not None:
                proxy.stop()
            if container_id is not None:
                await engine.call(lambda: engine.remove_container(self.api, container_id))
            lifecycle.remove_sandbox_dir(sandbox_id)
            raise
        return AgentSandbox(
            id=sandbox_id,
            kind=kind,
            backend=self.name,
            channel=channel,
            profile=profile,
            episode_id=episode_id,
            handle={"container": container_id, "proxy": proxy},
        )

    def _labels(
        self,
        labels: Mapping[str, str],
        kind: str,
        *,
        sandbox_id: str,
        episode_id: str,
        profile: SandboxProfile,
    ) -> dict[str, str]:
        """The labels of a sandbox container: the caller's plus kind, run, episode, owner, id, expiry."""
        return {
            **labels,
            engine.LABEL: kind,
            "toolgym.run": self.run_id,
            "toolgym.episode": episode_id,
            "toolgym.owner": self.owner,
            "toolgym.id": sandbox_id,
            "toolgym.expires": str(int(time.time() + profile.ttl_s)),
        }

    def _start_container(
        self,
        image: str,
        kind: str,
        sandbox_id: str,
        profile: SandboxProfile,
        config: dict[str, Any],
        labels: dict[str, str],
        state: str,
        token: str,
    ) -> str:
        from docker.types import Mount

        api = self.api
        mounts = [
            Mount(target="/run/toolgym", source=state, type="bind", read_only=True),
            Mount(
                target="/opt/toolgym", source=str(lifecycle.staged_agent_dir()), type="bind", read_only=True
            ),
        ]
        with engine.LIFECYCLE_GATE:
            container_id = create_sandbox_container(
                api,
                image,
                kind=kind,
                sandbox_id=sandbox_id,
                profile=profile,
                labels=labels,
                entry="/opt/toolgym/main.py",
                config=config,
                token=token,
                mounts=mounts,
            )
            api.start(container_id)
        return container_id

    def _why_stopped(self, container_id: str) -> str | None:
        import docker

        try:
            state = self.api.inspect_container(container_id)["State"]
        except docker.errors.NotFound:
            return "its container exited and was removed (is python3 in the image?)"
        if state.get("Running"):
            return None
        logs = self.api.logs(container_id, tail=20).decode("utf-8", "replace").strip()
        return f"its container exited with status {state.get('ExitCode')}: {logs or 'no output'}"

    # -- checking a reset from outside -----------------------------------------------------------

    async def _note_start(self, sandbox: AgentSandbox) -> None:
        """Record the host PID of the container's agent (its PID 1) and how to see its processes:
        through this host's ``/proc`` when the engine runs here, else through ``docker top``; and
        the Python session's zygote, when the agent's hello names one (``hostprocs.note_zygote``)."""
        pids = await engine.call(self._container_pids, sandbox.handle["container"], None)
        inner = sandbox.channel.hello.get("zygote")
        if inner is not None:
            try:
                pids["zygote"] = await engine.call(
                    self._note_zygote, sandbox.handle["container"], pids, int(inner)
                )
            except LookupError as exc:
                raise SandboxError(f"sandbox {sandbox.id}: {exc}") from None
        sandbox.handle["pids"] = pids

    def _note_zygote(self, container_id: str, pids: dict[str, Any], inner: int) -> dict[str, Any]:
        if pids["via"] == "proc":
            return hostprocs.note_zygote(pids["agent"], inner)
        kids = [pid for pid, parent in self._top(container_id) if parent == pids["agent"]]
        if len(kids) != 1:  # the engine's view has no namespace pids: the only child, by pid
            raise LookupError(f"expected the agent's zygote as its only child, found {kids}")
        return {"pid": kids[0]}

    async def _host_check(self, sandbox: AgentSandbox) -> str | None:
        start = sandbox.handle.get("pids")
        if not start:
            return "the container's processes were not recorded when it was made"
        return await engine.call(  # type: ignore[no-any-return]
            self._container_pids, sandbox.handle["container"], start, bool(sandbox.kept_pid)
        )

    async def _after_reset(self, sandbox: AgentSandbox) -> None:
        """Reset the container's memory peak from this host (``counters``): possible on cgroup v1
        with write access to its cgroup; elsewhere the channel stays (the pool's group rule)."""
        start = sandbox.handle.get("pids") or {}
        if start.get("via") != "proc":
            result = "the engine runs on another machine: its cgroups are out of this host's reach"
        else:
            result = await asyncio.to_thread(counters.reset_memory_peak, int(start["agent"]))
        sandbox.handle["counters"] = {"memory_peak": result}

    def _container_pids(self, container_id: str, start: dict[str, Any] | None, kept: bool = False) -> Any:
        """Without ``start``: ``{"via", "agent"}`` of a fresh container (and, through this host's
        ``/proc``, the agent's ``attributes``). With it: None when the agent is the only process
        left (with ``kept``: beside one process tree under it, the kept session's) and its
        attributes are those it was made with (``hostprocs.attributes_changed``), else why not."""
        if start is not None and start["via"] == "proc":  # no engine call: this host's /proc says it all
            if not _engine_is_local(start["agent"], container_id):
                return f"the container's agent {start['agent']} is gone"
            zygote = start.get("zygote")
            expected = {zygote["pid"]} if zygote else set()
            left = hostprocs.only_expected(
                start["agent"], expected, kept_under=start["agent"] if kept else None
            )
            if left is None and start.get("attributes"):
                left = hostprocs.attributes_changed(start["agent"], start["attributes"])
            if left is None and zygote:
                left = hostprocs.zygote_changed(zygote)
            return left
        agent = int(self.api.inspect_container(container_id)["State"]["Pid"])
        if start is None:
            if not _engine_is_local(agent, container_id):
                return {"via": "top", "agent": agent}
            return {"via": "proc", "agent": agent, "attributes": hostprocs.fresh_attributes(agent)}
        if agent != start["agent"]:
            return f"the container's agent changed from {start['agent']} to {agent}"
        zygote = {start["zygote"]["pid"]} if start.get("zygote") else set()
        deadline = time.monotonic() + 0.5
        while True:
            rows = self._top(container_id)
            if zygote and not zygote <= {pid for pid, parent in rows if parent == agent}:
                return f"the zygote {min(zygote)} is gone (the sandbox's interpreters can no longer be forked from it)"
            others = {pid for pid, _ in rows} - {agent} - zygote
            kids = [pid for pid, parent in rows if parent == agent and pid not in zygote]
            if kept and len(kids) == 1:
                tree, grew = {kids[0]}, True
                while grew:
                    more = {pid for pid, parent in rows if parent in tree} - tree
                    tree, grew = tree | more, bool(more)
                others -= tree
            if not others:
                return None
            if time.monotonic() > deadline:
                return f"the engine sees processes {sorted(others)} the reset left"
            time.sleep(0.05)

    def _top(self, container_id: str) -> list[tuple[int, int]]:
        top = self.api.top(container_id)
        titles = top["Titles"]
        ipid, ippid = titles.index("PID"), titles.index("PPID")
        return [(int(row[ipid]), int(row[ippid])) for row in top.get("Processes") or []]

    async def _destroy(self, sandbox: AgentSandbox) -> None:
        proxy = sandbox.handle.get("proxy")
        if proxy is not None:
            proxy.stop()
        await engine.call(lambda: engine.remove_container(self.api, sandbox.handle["container"]))

    def _destroy_sync(self, sandbox: AgentSandbox) -> None:
        engine.remove_container(self.api, sandbox.handle["container"])


def _engine_is_local(pid: int, container_id: str) -> bool:
    """Whether ``pid`` (the engine's view of the container's init) is that process in this host's
    ``/proc`` too: the container's id is in its cgroup path (cgroupfs and systemd drivers)."""
    try:
        with open(f"/proc/{pid}/cgroup") as f:
            return container_id in f.read()
    except OSError:
        return False


def create_sandbox_container(
    api: Any,
    image: str,
    *,
    kind: str,
    sandbox_id: str,
    profile: SandboxProfile,
    labels: Mapping[str, str],
    entry: str,
    config: Mapping[str, Any],
    token: str,
    mounts: list[Any],
    host_options: Mapping[str, Any] | None = None,
    **create_options: Any,
) -> str:
    """Create (not start) one sandbox container on ``api`` and return its id: the agent at ``entry``
    run by ``PYTHON`` with ``config`` as PID 1, as ``SANDBOX_UID``, in ``WORKDIR``, with no network
    and ``hardened_host_config``. The hello ``token`` goes in the agent's environment, which it
    wipes at start (never on its command line, which ``/proc/1/cmdline`` shows to every process). What differs between engines comes in as parameters: ``mounts``
    (how the agent's files and socket arrive), ``host_options`` (a log driver) and
    ``create_options`` (stdin and attach for an attach-stream channel)."""
    host_config = hardened_host_config(api, profile, mounts, **(host_options or {}))
    created = api.create_container(
        image,
        command=[PYTHON, "-E", "-s", "-S", entry, json.dumps(dict(config))],
        environment={protocol.TOKEN_ENV: token},
        user=f"{SANDBOX_UID}:{SANDBOX_UID}",
        working_dir=WORKDIR,
        hostname="sandbox",
        labels=dict(labels),
        host_config=host_config,
        name=f"toolgym-{kind}-{sandbox_id}",
        network_disabled=True,
        **create_options,
    )
    return str(created["Id"])


def hardened_host_config(
    api: Any, profile: SandboxProfile, mounts: list[Any], **extra: Any
) -> dict[str, Any]:
    """The host configuration of every sandbox container (local or remote engine): no network,
    read-only root with size-capped tmpfs, no capabilities, ``no-new-privileges``, pids / memory
    (= memory+swap) / CPU limits, no core dumps, ``--init``, ``auto_remove``. ``mounts`` are the
    agent's (and the state directory's); ``extra`` adds engine options (a log driver)."""
    from docker.types import Ulimit

    mb = 1024 * 1024
    return api.create_host_config(  # type: ignore[no-any-return]
        mounts=mounts,
        network_mode="none",
        read_only=True,
        tmpfs={
            WORKDIR: f"rw,exec,nosuid,nodev,size={profile.workdir_bytes // mb}m,nr_inodes={profile.inodes},"
            f"uid={SANDBOX_UID},gid={SANDBOX_UID},mode=0755",
            "/tmp": f"rw,exec,nosuid,nodev,size={profile.tmp_bytes // mb}m,nr_inodes={profile.inodes},mode=1777",
            HOME: f"rw,noexec,nosuid,nodev,size={profile.home_bytes // mb}m,nr_inodes={profile.inodes},"
            f"uid={SANDBOX_UID},gid={SANDBOX_UID},mode=0700",
            # replaces the engine's own /dev/shm (sized by shm_size, but with no inode cap)
            "/dev/shm": f"rw,noexec,nosuid,nodev,size={max(profile.shm_bytes // mb, 1)}m,nr_inodes={profile.inodes},mode=1777",
        },
        cap_drop=["ALL"],
        security_opt=["no-new-privileges"],
        pids_limit=profile.pids,
        mem_limit=profile.memory_bytes,
        memswap_limit=profile.memory_bytes,
        nano_cpus=int(profile.cpus * 1e9),
        shm_size=profile.shm_bytes,
        ulimits=[
            Ulimit(name="core", soft=0, hard=0),
            Ulimit(name="nofile", soft=profile.nofile, hard=profile.nofile),
        ],
        init=False,  # the agent is PID 1 itself: no init whose memory a tool could write (/proc/1/mem)
        auto_remove=True,
        **extra,
    )
