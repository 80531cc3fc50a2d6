"""The ``python`` and ``bash`` tools: a persistent Python session and a persistent shell, each in
the episode's sandbox (kinds ``python`` and ``shell``).

What the model reads is capped at ``MAX_OUTPUT_CHARS`` (head and tail kept), on top of the
sandbox's own caps at the source (``max_output_bytes`` per stream and per text field: a cell's
value, error and traceback), and the line where text was cut says how much there was. A
sandbox whose agent died (a command killed it, it ran out of memory) cannot be used again: the
tool says so, and the episode gets a fresh sandbox on its next call.
"""

from __future__ import annotations

import re

from toolgym import Sandbox, SandboxBrokenError, ToolOutput, tool

CELL_TIMEOUT_S = 60.0
"""Time limit of one Python cell or shell command inside the sandbox."""
MAX_OUTPUT_CHARS = 16 * 1024
"""What the model reads of one call; the sandbox has already capped each stream at its source."""


_SANDBOX_CUT = re.compile(r"\[\.\.\. \d+ (?:characters|bytes of output) omitted[^\]\n]*\]")
"""The line a sandbox puts where it cut a stream or a text (``protocol.cap_text``, ``procs.Capture``)."""


def _cap(text: str, limit: int = MAX_OUTPUT_CHARS) -> str:
    """``text`` cut to ``limit`` characters, head and tail kept. The line in the middle also repeats
    what the sandbox had already cut in the part dropped here, so that the model reads how large
    the output really was (a 100 MB traceback, not 250 KB)."""
    if len(text) <= limit:
        return text
    half = limit // 2
    earlier = _SANDBOX_CUT.findall(text, half, len(text) - half)[:5]
    note = "".join(f"; before that, in the sandbox: {m[1:-1].strip('. ')}" for m in earlier)
    return f"{text[:half]}\n[... {len(text) - 2 * half} characters omitted{note} ...]\n{text[-half:]}"


def _broken(exc: SandboxBrokenError) -> ToolOutput:
    return ToolOutput(
        f"Error: the sandbox stopped working ({exc}). The next call runs in a fresh sandbox: "
        "earlier variables and files are gone.",
        error=True,
        metadata={"sandbox_broken": True},
    )


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
    return ToolOutput(
        _cap(result.output) or "(no output)",
        error=result.error is not None,
        metadata={
            "timed_out": result.timed_out,
            "restarted": result.restarted,
            "truncated": result.truncated,
        },
    )


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
    return ToolOutput(
        text or "(no output)",
        metadata={
            "exit_code": result.exit_code,
            "timed_out": result.timed_out,
            "truncated": result.truncated,
        },
    )
