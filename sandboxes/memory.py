"""The in-memory sandbox backend: a test double of the Sandbox API, for tests without Docker.

``MemoryBackend`` hands out ``MemorySandbox`` objects that keep files in a dict (confined to the
work directory as the real backends confine them), answer commands with a pluggable handler,
and run ``python()`` cells in this process. Nothing is isolated: use it to test tools and
environments, never to run a model's code. Registered as backend ``"memory"``; never chosen
automatically, only when named.

    backend = MemoryBackend(handler=lambda cmd: "3 files\\n" if cmd.words[:1] == ["ls"] else None)
    sb = await backend.acquire("python")
    await sb.write_file("data/x.txt", "hi")
    (await sb.run(["cat", "data/x.txt"])).stdout      # 'hi' (built-in commands answer what no handler does)
    (await (await sb.python()).execute("6 * 7")).value   # '42'

A handler gets a ``Command`` and returns an ``ExecResult``, a ``str`` (stdout, exit code 0), or
None to fall back to the built-in commands (``true``, ``false``, ``echo``, ``cat``, ``ls``,
``pwd``); unknown commands exit 127. Async handlers are bounded by the call's timeout (exit
124, ``timed_out``), like the real agent.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import posixpath
import shlex
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from toolgym.core.errors import PathOutsideSandboxError, SandboxBrokenError, SandboxError
from toolgym.core.sandbox import PythonSession
from toolgym.core.sandbox_profiles import DEFAULT_PROFILES, WORKDIR, SandboxProfile, resolve_profiles
from toolgym.core.types import ExecResult
from toolgym.sandboxes.inprocess import InProcessPythonSession, cap_text

TIMEOUT_EXIT = 124
_SHELL_SYNTAX = set("|&;<>()$`*?[]{}\\\n")


@dataclass(slots=True)
class Command:
    """One ``run`` call as a handler sees it."""

    argv: list[str] | None
    """The argv list, or None when the command came as a shell string."""
    shell: str | None
    stdin: bytes | None
    env: dict[str, str]
    cwd: str
    """Absolute, inside the work directory."""
    timeout: float
    sandbox: MemorySandbox

    @property
    def text(self) -> str:
        """The command as one line."""
        return self.shell if self.shell is not None else shlex.join(self.argv or [])

    @property
    def words(self) -> list[str]:
        """The argv list, or the shell string split as ``sh`` would split a simple command."""
        if self.argv is not None:
            return list(self.argv)
        try:
            return shlex.split(self.shell or "")
        except ValueError:
            return [self.shell or ""]


Handler = Callable[[Command], "ExecResult | str | Awaitable[ExecResult | str | None] | None"]


class MemorySandbox:
    """One in-memory sandbox (see the module docstring). ``files`` maps absolute paths to bytes;
    ``commands`` records every ``run``, for assertions."""

    def __init__(
        self,
        kind: str = "python",
        *,
        profile: SandboxProfile | None = None,
        handler: Handler | None = None,
        python: Literal["inprocess"] | Callable[[MemorySandbox], PythonSession] | None = "inprocess",
        files: Mapping[str, str | bytes] | None = None,
        id: str = "mem-0",
    ) -> None:
        self.id = id
        self.kind = kind
        self.profile = profile or DEFAULT_PROFILES.get(kind) or SandboxProfile()
        self.handler = handler
        self.workdir = WORKDIR
        self.episode_id = ""
        self.files: dict[str, bytes] = {}
        self.commands: list[Command] = []
        self._python_factory = python
        self._initial = dict(files or {})
        self._python: PythonSession | None = None
        self._shell: MemoryShellSession | None = None
        self._broken: str | None = None
        self.reset()

    def __repr__(self) -> str:
        return f"<MemorySandbox {self.kind}:{self.id}{' broken' if self.broken else ''}>"

    @property
    def broken(self) -> bool:
        return self._broken is not None

    def mark_broken(self, reason: str = "marked broken by a test") -> None:
        """Make every later call raise ``SandboxBrokenError``, as a dead agent would."""
        self._broken = self._broken or reason

    def reset(self) -> None:
        """Back to the initial files, with fresh sessions (what a pool does between episodes)."""
        self.files = {}
        for path, data in self._initial.items():
            self.files[self.path(path)] = data.encode() if isinstance(data, str) else bytes(data)
        self._python = self._shell = None
        self.commands = []

    def _check(self) -> None:
        if self._broken is not None:
            raise SandboxBrokenError(f"sandbox {self.id} is broken ({self._broken}); acquire a new sandbox")

    def path(self, path: str) -> str:
        """The absolute path ``path`` names; raises ``PathOutsideSandboxError`` when it leaves the work directory."""
        if not path or "\0" in path:
            raise SandboxError(f"invalid path {path!r}: give a non-empty path without NUL bytes")
        full = posixpath.normpath(posixpath.join(self.workdir, path))
        if full != self.workdir and not full.startswith(self.workdir + "/"):
            raise PathOutsideSandboxError(
                f"path {path!r} leaves the work directory {self.workdir}; use a path inside it"
            )
        return full

    def is_dir(self, full: str) -> bool:
        return full == self.workdir or any(p.startswith(full + "/") for p in self.files)

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
        """Answer a command with the handler (then the built-in commands); output is capped at
        ``max_output`` (default: as the profile says), and an async handler past ``timeout``
        seconds gives exit 124."""
        self._check()
        limit = self.profile.default_timeout_s if timeout is None else float(timeout)
        if limit <= 0:
            raise SandboxError(f"timeout must be positive seconds, got {timeout!r}")
        if not isinstance(cmd, str) and not list(cmd):
            raise SandboxError("run() needs a command: give an argv list with at least one item, or a string")
        command = Command(
            argv=None if isinstance(cmd, str) else [str(a) for a in cmd],
            shell=cmd if isinstance(cmd, str) else None,
            stdin=stdin.encode() if isinstance(stdin, str) else stdin,
            env=dict(env or {}),
            cwd=self.path(cwd or "."),
            timeout=limit,
            sandbox=self,
        )
        self.commands.append(command)
        start = time.perf_counter()
        answer: Any = None
        if self.handler is not None:
            answer = self.handler(command)
            if inspect.isawaitable(answer):
                try:
                    answer = await asyncio.wait_for(answer, limit)
                except TimeoutError:
                    return ExecResult(
                        TIMEOUT_EXIT,
                        "",
                        f"timed out after {limit:g}s",
                        timed_out=True,
                        duration_s=time.perf_counter() - start,
                    )
        if answer is None:
            answer = builtin_command(command)
        if isinstance(answer, str):
            answer = ExecResult(0, answer, "")
        if not isinstance(answer, ExecResult):
            raise SandboxError(
                f"the memory sandbox's handler returned {type(answer).__name__}; "
                "return an ExecResult, a str (stdout) or None"
            )
        cap = self.profile.max_output_bytes if max_output is None else max_output
        stdout, cut_out = cap_text(answer.stdout, cap)
        stderr, cut_err = cap_text(answer.stderr, cap)
        return ExecResult(
            answer.exit_code,
            stdout,
            stderr,
            timed_out=answer.timed_out,
            truncated=answer.truncated or cut_out or cut_err,
            duration_s=answer.duration_s or time.perf_counter() - start,
            oom_killed=answer.oom_killed,
        )

    async def write_file(
        self, path: str, data: str | bytes, *, mode: int = 0o644, append: bool = False
    ) -> None:
        """Store ``data`` at ``path`` (inside the work directory); ``mode`` is accepted and ignored."""
        self._check()
        full = self.path(path)
        if self.is_dir(full):
            raise IsADirectoryError(21, f"{path!r} is a directory in sandbox {self.id}", path)
        parent = posixpath.dirname(full)
        while parent != self.workdir and parent != "/":
            if parent in self.files:
                raise NotADirectoryError(20, f"{parent!r} is a file in sandbox {self.id}", path)
            parent = posixpath.dirname(parent)
        raw = data.encode() if isinstance(data, str) else bytes(data)
        self.files[full] = (self.files.get(full, b"") + raw) if append else raw

    async def read_file(self, path: str, *, max_bytes: int | None = None) -> bytes:
        """The bytes at ``path``; ``FileNotFoundError`` / ``IsADirectoryError`` as the real backends raise them."""
        self._check()
        full = self.path(path)
        if full not in self.files:
            if self.is_dir(full):
                raise IsADirectoryError(21, f"{path!r} is a directory in sandbox {self.id}", path)
            raise FileNotFoundError(2, f"no such file {path!r} in sandbox {self.id}", path)
        data = self.files[full]
        limit = max_bytes or self.profile.max_file_bytes
        if len(data) > limit:
            raise SandboxError(
                f"sandbox {self.id}: {path!r} is {len(data)} bytes, more than the {limit} bytes read_file returns"
            )
        return data

    async def python(self) -> PythonSession:
        """The Python session: in this process by default, or what the ``python`` factory makes."""
        self._check()
        if self._python is None:
            if self._python_factory is None:
                raise SandboxError(
                    "this memory sandbox has no Python session; create it with python='inprocess' "
                    "or a factory returning a PythonSession"
                )
            if self._python_factory == "inprocess":
                self._python = InProcessPythonSession(max_output=self.profile.max_output_bytes)
            else:
                self._python = self._python_factory(self)
        return self._python

    async def shell(self) -> MemoryShellSession:
        self._check()
        if self._shell is None:
            self._shell = MemoryShellSession(self)
        return self._shell


class MemoryShellSession:
    """A shell session whose ``cd DIR`` and ``export NAME=VALUE`` (given alone) last between
    commands; every other command goes to the sandbox's handler with that directory and those
    variables."""

    def __init__(self, sandbox: MemorySandbox) -> None:
        self.sandbox = sandbox
        self.cwd = sandbox.workdir
        self.env: dict[str, str] = {}

    async def run(self, command: str, *, timeout: float | None = None) -> ExecResult:
        words = Command(None, command, None, {}, self.cwd, 0.0, self.sandbox).words
        if words[:1] == ["cd"] and len(words) <= 2:
            target = self.sandbox.path(posixpath.join(self.cwd, words[1] if len(words) == 2 else "."))
            if not self.sandbox.is_dir(target):
                return ExecResult(1, "", f"cd: {words[1]}: No such file or directory\n")
            self.cwd = target
            return ExecResult(0, "", "")
        if words[:1] == ["export"] and len(words) > 1 and all("=" in w for w in words[1:]):
            for word in words[1:]:
                key, _, value = word.partition("=")
                self.env[key] = value
            return ExecResult(0, "", "")
        return await self.sandbox.run(command, timeout=timeout, env=self.env, cwd=self.cwd)


def builtin_command(command: Command) -> ExecResult:
    """What the memory sandbox answers by itself: ``true``, ``false``, ``echo``, ``cat``, ``ls``,
    ``pwd`` as simple commands; anything else, or shell syntax, exits 127 saying so."""
    if command.shell is not None and _SHELL_SYNTAX & set(command.shell):
        return ExecResult(
            127,
            "",
            f"memory sandbox: shell syntax is not interpreted: {command.shell!r}; "
            "give the backend a handler= that answers it\n",
        )
    words = command.words
    name, args = (words[0], words[1:]) if words else ("", [])
    sandbox = command.sandbox
    if name in ("true", "false"):
        return ExecResult(int(name == "false"), "", "")
    if name == "echo":
        return ExecResult(0, " ".join(args) + "\n", "")
    if name == "pwd":
        return ExecResult(0, command.cwd + "\n", "")
    if name == "cat":
        out, err = [], []
        for arg in args:
            full = posixpath.normpath(posixpath.join(command.cwd, arg))
            if full in sandbox.files:
                out.append(sandbox.files[full].decode("utf-8", "replace"))
            else:
                err.append(f"cat: {arg}: No such file or directory\n")
        return ExecResult(1 if err else 0, "".join(out), "".join(err))
    if name == "ls":
        folder = posixpath.normpath(posixpath.join(command.cwd, args[0] if args else "."))
        names = sorted(
            {p[len(folder) + 1 :].split("/")[0] for p in sandbox.files if p.startswith(folder + "/")}
        )
        if not names and not sandbox.is_dir(folder):
            return ExecResult(
                2, "", f"ls: cannot access '{args[0] if args else '.'}': No such file or directory\n"
            )
        return ExecResult(0, "".join(n + "\n" for n in names), "")
    return ExecResult(
        127,
        "",
        f"memory sandbox: command not found: {name or command.text!r}; give the backend a "
        "handler= that answers it\n",
    )


@dataclass
class MemoryBackend:
    """Hands out ``MemorySandbox`` objects; a released one is reset and reused, a broken one dropped.
    ``warm``, ``max_idle`` and ``run_id`` are accepted (the CLI passes them) and change nothing."""

    handler: Handler | None = None
    python: Literal["inprocess"] | Callable[[MemorySandbox], PythonSession] | None = "inprocess"
    files: Mapping[str, str | bytes] = field(default_factory=dict)
    """Files every sandbox starts with (paths relative to the work directory)."""
    profiles: Mapping[str, SandboxProfile | Mapping[str, Any]] | None = None
    warm: Any = 0
    max_idle: int = 16
    run_id: str = ""
    name: str = "memory"
    live: list[MemorySandbox] = field(default_factory=list)
    """Every sandbox handed out and not yet destroyed."""
    counters: dict[str, int] = field(default_factory=lambda: {"created": 0, "reused": 0, "destroyed": 0})

    def __post_init__(self) -> None:
        self._profiles = resolve_profiles(self.profiles)
        self._idle: dict[str, list[MemorySandbox]] = {}
        self._ids = itertools.count(1)
        self._closed = False

    async def acquire(
        self, kind: str, *, episode_id: str = "", labels: Mapping[str, str] | None = None
    ) -> MemorySandbox:
        if self._closed:
            raise SandboxError("the memory sandbox backend is closed; create a new one")
        idle = self._idle.setdefault(kind, [])
        if idle:
            sandbox = idle.pop()
            self.counters["reused"] += 1
        else:
            sandbox = MemorySandbox(
                kind,
                profile=self._profiles.get(kind) or DEFAULT_PROFILES.get(kind) or SandboxProfile(),
                handler=self.handler,
                python=self.python,
                files=self.files,
                id=f"mem-{next(self._ids)}",
            )
            self.live.append(sandbox)
            self.counters["created"] += 1
        sandbox.episode_id = episode_id
        return sandbox

    async def release(self, sandbox: MemorySandbox, *, broken: bool = False) -> None:  # type: ignore[override]
        if sandbox not in self.live:
            return
        if broken or sandbox.broken or self._closed or len(self._idle.get(sandbox.kind, [])) >= self.max_idle:
            self.live.remove(sandbox)
            self.counters["destroyed"] += 1
            return
        sandbox.reset()
        sandbox.episode_id = ""
        self._idle.setdefault(sandbox.kind, []).append(sandbox)

    async def aclose(self) -> None:
        self._closed = True
        self.counters["destroyed"] += len(self.live)
        self.live.clear()
        self._idle.clear()
