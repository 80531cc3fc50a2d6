"""``AgentSandbox``: the ``toolgym.core.sandbox.Sandbox`` every backend hands out, driven
through the in-sandbox agent over one ``AgentChannel``.

Time limits: a call that names no ``timeout`` gets the profile's ``default_timeout_s``. The
agent enforces the limit (killing the command's process group); the host waits a margin longer
and, if the agent has not answered by then, takes the sandbox for broken.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Mapping, Sequence
from typing import Any

from toolgym.core.errors import PathOutsideSandboxError, SandboxBrokenError, SandboxError
from toolgym.core.sandbox import PythonResult
from toolgym.core.sandbox_profiles import WORKDIR, SandboxProfile
from toolgym.core.types import ExecResult
from toolgym.sandboxes.agent import protocol
from toolgym.sandboxes.channel import AgentChannel

HOST_MARGIN_S = 10.0
"""How much longer than a call's own time limit the host waits for the agent's answer."""
CODE_OPS = frozenset({"run", "write_file", "py_exec", "sh_run"})
"""Ops that run code of the episode's choosing in the sandbox, or put a file there for it (a
kept session's cells excepted: only the host's tools send those)."""
KEPT = "kept"


def _raise_for(reply: dict[str, Any], sandbox: str, path: str = "") -> dict[str, Any]:
    """The reply's fields (without ``ok`` and ``id``), or the error it carries, raised."""
    if reply.pop("ok", False):
        reply.pop("id", None)
        return reply
    error = reply.get("error") or {}
    kind, message = error.get("type", ""), error.get("message", "unknown error")
    if kind == protocol.E_OUTSIDE:
        raise PathOutsideSandboxError(message)
    if kind == protocol.E_NOT_FOUND:
        raise FileNotFoundError(2, f"{message} in sandbox {sandbox}", path)
    if kind == protocol.E_IS_DIR:
        raise IsADirectoryError(21, f"{message} in sandbox {sandbox}", path)
    if kind == protocol.E_INVALID:
        raise SandboxError(f"sandbox {sandbox}: invalid request: {message}")
    raise SandboxError(f"sandbox {sandbox}: {message}")


def _exec_result(reply: dict[str, Any]) -> ExecResult:
    return ExecResult(
        exit_code=int(reply["exit_code"]),
        stdout=reply["stdout"],
        stderr=reply["stderr"],
        timed_out=bool(reply["timed_out"]),
        truncated=bool(reply["truncated"]),
        duration_s=float(reply["duration"]),
        oom_killed=bool(reply.get("oom_killed")),
    )


class AgentSandbox:
    """One sandbox (a container or a bubblewrap namespace) held by one episode at a time."""

    def __init__(
        self,
        *,
        id: str,
        kind: str,
        backend: str,
        channel: AgentChannel,
        profile: SandboxProfile,
        episode_id: str = "",
        handle: Any = None,
    ) -> None:
        self.id = id
        self.kind = kind
        self.backend = backend
        self.channel = channel
        self.profile = profile
        self.episode_id = episode_id
        self.handle = handle
        """What the backend needs to destroy it (a container id, a process)."""
        self.workdir = WORKDIR
        self.created_at = time.time()
        self.calls = 0
        self._marked_broken: str | None = None
        self._python: AgentPythonSession | None = None
        self._shell: AgentShellSession | None = None
        self._kept: AgentPythonSession | None = None
        self.keep_cell: str | None = None
        """The kept session's renewal cell (``kept_python``); None when nothing is kept."""
        self.ran_code = False
        """Whether this episode ran code of its own in the sandbox (``CODE_OPS``): then a reset
        keeps nothing, since that code could have reached the kept session's processes."""
        self.kept_pid: int | None = None
        """After a reset that kept the kept session: its pid in the sandbox (the host's check
        then allows its process tree, and only it, beside the agent)."""

    def __repr__(self) -> str:
        return f"<AgentSandbox {self.backend}:{self.kind}:{self.id}{' broken' if self.broken else ''}>"

    @property
    def broken(self) -> bool:
        """True once the agent died, hung, or the sandbox was marked poisoned."""
        return self._marked_broken is not None or self.channel.closed

    def mark_broken(self, reason: str) -> None:
        self._marked_broken = self._marked_broken or reason

    async def _call(self, op: str, *, op_timeout_s: float, **fields: Any) -> dict[str, Any]:
        if self._marked_broken is not None:
            raise SandboxBrokenError(
                f"sandbox {self.id} is broken ({self._marked_broken}); acquire a new sandbox"
            )
        self.calls += 1
        if op in CODE_OPS and fields.get("session") != KEPT:
            self.ran_code = True
        return _raise_for(
            await self.channel.request(op, reply_timeout_s=op_timeout_s + HOST_MARGIN_S, **fields),
            self.id,
            fields.get("path", ""),
        )

    def _timeout(self, timeout: float | None) -> float:
        if timeout is None:
            return self.profile.default_timeout_s
        if timeout <= 0:
            raise SandboxError(f"timeout must be positive seconds, got {timeout!r}")
        return float(timeout)

    # -- the Sandbox protocol --------------------------------------------------------------------

    async def run(
        self,
        cmd: Sequence[str] | str,
        *,
        timeout: float | None = None,
        stdin: str | bytes | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        max_output: int | None = None,
    ) -> ExecResult:
        """Run a command (argv list, or a string for ``sh -c``) in its own process group.

        ``cwd`` is relative to the work directory unless absolute; ``max_output`` caps each stream
        (bytes, head and tail kept; default from the profile). Exit code 124 means timed out.
        """
        fields: dict[str, Any] = {"timeout": self._timeout(timeout)}
        if isinstance(cmd, str):
            fields["shell"] = cmd
        else:
            argv = [str(a) for a in cmd]
            if not argv:
                raise SandboxError(
                    "run() needs a command: give an argv list with at least one item, or a string"
                )
            fields["argv"] = argv
        if stdin is not None:
            data = stdin.encode() if isinstance(stdin, str) else bytes(stdin)
            fields["stdin_b64"] = base64.b64encode(data).decode("ascii")
        if env:
            fields["env"] = {str(k): str(v) for k, v in env.items()}
        if cwd:
            fields["cwd"] = cwd
        fields["max_output"] = max_output or self.profile.max_output_bytes
        return _exec_result(await self._call("run", op_timeout_s=fields["timeout"], **fields))

    async def write_file(
        self, path: str, data: str | bytes, *, mode: int = 0o644, append: bool = False
    ) -> None:
        """Write inside the work directory (parents are created); paths that leave it, through
        ``..`` or a symlink, raise ``PathOutsideSandboxError``."""
        raw = data.encode() if isinstance(data, str) else bytes(data)
        await self._call(
            "write_file",
            op_timeout_s=30.0,
            path=path,
            mode=mode,
            append=append,
            data_b64=base64.b64encode(raw).decode("ascii"),
        )

    async def read_file(self, path: str, *, max_bytes: int | None = None) -> bytes:
        """The bytes of a file inside the work directory (at most ``max_bytes``, default from the
        profile; a larger file raises ``SandboxError``)."""
        reply = await self._call(
            "read_file", op_timeout_s=30.0, path=path, max_bytes=max_bytes or self.profile.max_file_bytes
        )
        return base64.b64decode(reply["data_b64"])

    async def python(self) -> AgentPythonSession:
        """The sandbox's persistent Python session (its interpreter starts on the first call)."""
        if self._python is None:
            self._python = AgentPythonSession(self)
        return self._python

    async def kept_python(self, *, renew: str) -> AgentPythonSession:
        """The sandbox's **kept** Python session: like ``python()``, but a pooled sandbox's reset
        keeps it, with the processes it started, when ``renew`` (a cell whose value must be
        ``True``) drops everything the episode left in it, and the episode ran no code of its own
        in the sandbox (``run``, ``write_file``, the ``python()`` and ``shell()`` sessions).
        Otherwise the reset kills it like everything else. For state that is costly to rebuild
        and can be renewed from inside: the browser tools keep Playwright and Chromium here and
        renew by closing every browser context. Only the host's own code should reach it."""
        self.keep_cell = renew
        if self._kept is None:
            self._kept = AgentPythonSession(self, session=KEPT)
        return self._kept

    async def shell(self) -> AgentShellSession:
        """The sandbox's persistent shell session (bash starts on the first command)."""
        if self._shell is None:
            self._shell = AgentShellSession(self)
        return self._shell

    # -- for backends ----------------------------------------------------------------------------

    async def ping(self, *, timeout: float = 2.0) -> float:
        """Round-trip seconds to the agent; raises ``SandboxBrokenError`` if it does not answer."""
        if self._marked_broken is not None:
            raise SandboxBrokenError(
                f"sandbox {self.id} is broken ({self._marked_broken}); acquire a new sandbox"
            )
        start = time.perf_counter()
        _raise_for(await self.channel.request("ping", reply_timeout_s=timeout), self.id)
        return time.perf_counter() - start

    async def stats(self) -> dict[str, Any]:
        """Processes, memory, pids and disk use as the agent sees them."""
        return await self._call("stats", op_timeout_s=5.0)

    async def reset(self, *, prestart: bool = True, keep: bool = False) -> dict[str, Any]:
        """Kill every process but the agent, wipe the work directory, /tmp and home, and forget
        the sessions; returns the stats afterwards (for the poison check). With ``prestart``
        false the next interpreter waits for ``prestart()`` (after the host's own check). With
        ``keep``, the kept session survives when it may (``kept_python``); ``kept_pid`` says
        whether it did."""
        keep = keep and self.keep_cell is not None and not self.ran_code
        reply = await self._call(
            "reset", op_timeout_s=10.0 + 10.0 * keep, prestart=prestart, keep=keep, keep_cell=self.keep_cell
        )
        self._python = self._shell = None
        self.kept_pid = reply.get("kept") if keep else None
        if self.kept_pid is None:
            self._kept = self.keep_cell = None
        self.ran_code = False
        self.calls = 0
        return reply

    async def prestart(self) -> None:
        """Start the Python interpreter of the next episode now, when the profile asks for it."""
        _raise_for(await self.channel.request("prestart", reply_timeout_s=15.0 + HOST_MARGIN_S), self.id)


class AgentPythonSession:
    """The persistent Python session of one sandbox (see ``toolgym.core.sandbox.PythonSession``)."""

    def __init__(self, sandbox: AgentSandbox, *, session: str = "") -> None:
        self.sandbox = sandbox
        self._which = {"session": session} if session else {}

    async def execute(
        self, code: str, *, timeout: float | None = None, max_output: int | None = None
    ) -> PythonResult:
        """Run a cell; ``value`` is the repr of a trailing expression. A timeout interrupts the cell
        (``KeyboardInterrupt``); an interpreter that does not stop, or dies, is restarted and the
        result says ``restarted``."""
        limit = self.sandbox._timeout(timeout)
        r = await self.sandbox._call(
            "py_exec",
            op_timeout_s=limit + 5.0,
            code=code,
            timeout=limit,
            max_output=max_output or self.sandbox.profile.max_output_bytes,
            **self._which,
        )
        return PythonResult(
            stdout=r["stdout"],
            stderr=r["stderr"],
            value=r.get("value"),
            error=r.get("error"),
            traceback=r.get("traceback"),
            timed_out=bool(r["timed_out"]),
            restarted=bool(r["restarted"]),
            truncated=bool(r["truncated"]),
            duration_s=float(r["duration"]),
        )

    async def restart(self) -> None:
        """Throw the interpreter away; the next ``execute`` starts a fresh one."""
        await self.sandbox._call("py_restart", op_timeout_s=5.0, **self._which)


class AgentShellSession:
    """The persistent bash of one sandbox (see ``toolgym.core.sandbox.ShellSession``): ``cd`` and
    ``export`` last between commands; the exit code comes from bash's own ``$?``."""

    def __init__(self, sandbox: AgentSandbox) -> None:
        self.sandbox = sandbox

    async def run(
        self, command: str, *, timeout: float | None = None, max_output: int | None = None
    ) -> ExecResult:
        """Run ``command`` (any bash text, several lines allowed). On a timeout the shell and its
        jobs are killed and a new one starts in the same directory with the same exports."""
        limit = self.sandbox._timeout(timeout)
        r = await self.sandbox._call(
            "sh_run",
            op_timeout_s=limit,
            command=command,
            timeout=limit,
            max_output=max_output or self.sandbox.profile.max_output_bytes,
        )
        return _exec_result(r)
