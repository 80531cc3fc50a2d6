"""The ``python`` and ``bash`` tools: a persistent Python session and a persistent shell, each in
the episode's sandbox (kinds ``python`` and ``shell``).

What the model reads is capped at ``MAX_OUTPUT_CHARS`` (head and tail kept). A
sandbox whose agent died (a command killed it, it ran out of memory) cannot be used again: the
tool says so, and the episode gets a fresh sandbox on its next call.
"""

from __future__ import annotations

from toolgym import Sandbox, SandboxBrokenError, ToolOutput, tool

CELL_TIMEOUT_S = 60.0
"""Time limit of one Python cell or shell command inside the sandbox."""
MAX_OUTPUT_CHARS = 16 * 1024
"""What the model reads of one call; the sandbox has already capped each stream at its source."""


def _cap(text: str, limit: int = MAX_OUTPUT_CHARS) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[... {len(text) - 2 * half} characters omitted ...]\n{text[-half:]}"


def _broken(exc: SandboxBrokenError) -> ToolOutput:
    return ToolOutput(f"Error: the sandbox stopped working ({exc}). The next call runs in a fresh sandbox: "
                      "earlier variables and files are gone.", error=True, metadata={"sandbox_broken": True})


@tool(sandbox="python", timeout_s=CELL_TIMEOUT_S + 30.0)
async def python(code: str, *, sandbox: Sandbox) -> ToolOutput:
    """Run Python code in a persistent session: variables, imports and files last between calls.
    Returns what the code prints and the value of its last line if that is an expression.

    Args:
        code: Python source to run (several lines allowed).
    """
    try:
        session = await sandbox.python()
        result = await session.execute(code, timeout=CELL_TIMEOUT_S)
    except SandboxBrokenError as exc:
        return _broken(exc)
    return ToolOutput(_cap(result.output) or "(no output)", error=result.error is not None,
                      metadata={"timed_out": result.timed_out, "restarted": result.restarted,
                                "truncated": result.truncated})


@tool(sandbox="shell", timeout_s=CELL_TIMEOUT_S + 30.0)
async def bash(command: str, *, sandbox: Sandbox) -> ToolOutput:
    """Run a bash command in a persistent shell: the working directory and exported variables last
    between calls. Returns the command's output and, when it failed, its exit code.

    Args:
        command: The bash command line (several lines allowed).
    """
    try:
        shell = await sandbox.shell()
        result = await shell.run(command, timeout=CELL_TIMEOUT_S)
    except SandboxBrokenError as exc:
        return _broken(exc)
    text = _cap(result.output).rstrip("\n")
    if result.exit_code != 0:
        text = f"{text}\n[exit code {result.exit_code}]".lstrip("\n")
    return ToolOutput(text or "(no output)", metadata={"exit_code": result.exit_code, "timed_out": result.timed_out,
                                                       "truncated": result.truncated})
