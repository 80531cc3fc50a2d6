"""The baseline sandbox path of ``bench/swe_rollouts.py``: every tool call is a fresh ``docker exec``.

This is how many RL frameworks drive containers (one ``docker exec`` per command, no process
inside the container between calls). The same containers, from the same warm pool, are used;
only the way commands reach them changes:

- ``run`` → ``docker exec -i [-w CWD] [-e K=V] CONTAINER timeout -k 1 T sh -c CMD`` (or argv);
- ``write_file`` / ``read_file`` → ``docker exec -i CONTAINER sh -c 'cat > PATH'`` / ``cat PATH``;
- ``shell()`` → a shell emulated over ``docker exec bash -c``: each command is prefixed with the
  directory and the exported variables the previous one left (read back from ``pwd`` and
  ``export -p`` after a marker), so ``cd`` and ``export`` last as in a persistent shell.

Everything else (reset between episodes, health checks, labels, removal) is the pool's own.
"""

from __future__ import annotations

import asyncio
import shlex
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from toolgym.core.types import ExecResult

MARK = f"__toolgym_exec_{uuid.uuid4().hex[:8]}__"


async def docker_exec(
    container: str,
    argv: Sequence[str],
    *,
    stdin: bytes | None = None,
    cwd: str | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 60.0,
    max_output: int = 1 << 20,
) -> ExecResult:
    """One ``docker exec`` of ``argv`` in ``container`` (killed inside after ``timeout`` seconds)."""
    cmd = ["docker", "exec", "-i"]
    if cwd:
        cmd += ["-w", cwd]
    for k, v in (env or {}).items():
        cmd += ["-e", f"{k}={v}"]
    cmd += [container, "timeout", "-k", "1", str(max(1, int(timeout))), *argv]
    start = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        *cmd, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(stdin or b""), timeout + 10)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        return ExecResult(
            124, "", "docker exec did not return", timed_out=True, duration_s=time.perf_counter() - start
        )
    code = proc.returncode if proc.returncode is not None else -1
    cut = len(out) > max_output or len(err) > max_output
    return ExecResult(
        code,
        out[:max_output].decode(errors="replace"),
        err[:max_output].decode(errors="replace"),
        timed_out=code == 124,
        truncated=cut,
        duration_s=time.perf_counter() - start,
    )


class ExecShell:
    """A shell whose ``cd`` and ``export`` last, over stateless ``docker exec bash -c`` calls."""

    def __init__(self, box: ExecSandbox) -> None:
        self.box = box
        self.cwd = box.workdir
        self.exports = ""

    async def run(
        self, command: str, *, timeout: float | None = None, max_output: int | None = None
    ) -> ExecResult:
        script = (
            f"cd {shlex.quote(self.cwd)} 2>/dev/null\n{self.exports}\n{command}\n"
            f"__rc=$?; printf '\\n{MARK}%s\\n' \"$__rc\"; pwd; export -p"
        )
        r = await docker_exec(
            self.box.container,
            ["bash", "-c", script],
            timeout=timeout or 60.0,
            max_output=max_output or self.box.max_output,
        )
        body, found, tail = r.stdout.rpartition(f"\n{MARK}")
        if not found:
            return r
        lines = tail.splitlines()
        code = int(lines[0]) if lines and lines[0].lstrip("-").isdigit() else r.exit_code
        if len(lines) > 1:
            self.cwd = lines[1]
            self.exports = "\n".join(
                ln
                for ln in lines[2:]
                if ln.startswith("declare -x ") and " PWD=" not in ln and " OLDPWD=" not in ln
            )
        return ExecResult(
            code, body, r.stderr, timed_out=r.timed_out, truncated=r.truncated, duration_s=r.duration_s
        )


class ExecSandbox:
    """A pooled Docker sandbox whose commands go through ``docker exec`` (see the module docstring)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        handle = inner.handle
        self.container = str(handle["container"] if isinstance(handle, dict) else handle)
        self.workdir = str(inner.workdir)
        self.max_output = int(inner.profile.max_output_bytes)
        self._shell: ExecShell | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def _path(self, path: str) -> str:
        return path if path.startswith("/") else f"{self.workdir}/{path}"

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
        argv = ["sh", "-c", cmd] if isinstance(cmd, str) else [str(a) for a in cmd]
        data = stdin.encode() if isinstance(stdin, str) else stdin
        return await docker_exec(
            self.container,
            argv,
            stdin=data,
            cwd=self._path(cwd) if cwd else self.workdir,
            env=env,
            timeout=timeout or float(self.inner.profile.default_timeout_s),
            max_output=max_output or self.max_output,
        )

    async def write_file(
        self, path: str, data: str | bytes, *, mode: int = 0o644, append: bool = False
    ) -> None:
        p = shlex.quote(self._path(path))
        raw = data.encode() if isinstance(data, str) else bytes(data)
        script = f'mkdir -p "$(dirname {p})" && cat {">>" if append else ">"} {p} && chmod {mode:o} {p}'
        r = await docker_exec(self.container, ["sh", "-c", script], stdin=raw)
        if r.exit_code:
            raise OSError(f"write_file {path}: {r.stderr.strip()}")

    async def read_file(self, path: str, *, max_bytes: int | None = None) -> bytes:
        r = await docker_exec(self.container, ["cat", self._path(path)], max_output=max_bytes or (64 << 20))
        if r.exit_code:
            raise FileNotFoundError(path)
        return r.stdout.encode()

    async def shell(self) -> ExecShell:
        if self._shell is None:
            self._shell = ExecShell(self)
        return self._shell


class ExecPerCallBackend:
    """The pool of ``inner`` (a Docker backend), handing out :class:`ExecSandbox` wrappers."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def acquire(self, kind: str, **kwargs: Any) -> ExecSandbox:
        return ExecSandbox(await self.inner.acquire(kind, **kwargs))

    async def release(self, sandbox: Any, **kwargs: Any) -> None:
        await self.inner.release(sandbox.inner if isinstance(sandbox, ExecSandbox) else sandbox, **kwargs)
