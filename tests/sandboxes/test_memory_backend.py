"""The in-memory sandbox backend (a test double): the Sandbox protocols, confined files, commands
through a handler or the built-ins, the in-process Python session, the shell session, pooling,
registration (never chosen automatically), and the code tools running on it without Docker."""

from __future__ import annotations

import asyncio

import pytest

from toolgym.core.env.contract import EpisodeContext
from toolgym.core.errors import PathOutsideSandboxError, SandboxBrokenError, SandboxError
from toolgym.core.registry import Registry
from toolgym.core.sandbox import PythonResult, PythonSession, Sandbox, SandboxBackend
from toolgym.core.sandbox_profiles import SandboxProfile
from toolgym.core.types import ExecResult
from toolgym.plugins.code.tools import bash, python
from toolgym.sandboxes import plugin as sandbox_plugin
from toolgym.sandboxes.memory import Command, MemoryBackend, MemorySandbox


async def test_the_backend_and_its_sandboxes_fit_the_protocols() -> None:
    backend = MemoryBackend()
    sandbox = await backend.acquire("python", episode_id="ep")
    assert isinstance(backend, SandboxBackend) and isinstance(sandbox, Sandbox)
    assert isinstance(await sandbox.python(), PythonSession)
    assert (sandbox.kind, sandbox.episode_id, sandbox.id) == ("python", "ep", "mem-1")


async def test_files_are_confined_to_the_work_directory() -> None:
    sb = MemorySandbox(files={"seed.txt": "seed"})
    await sb.write_file("data/a.csv", "a,b\n")
    await sb.write_file("/workspace/data/a.csv", "1,2\n", append=True)
    assert await sb.read_file("data/a.csv") == b"a,b\n1,2\n"
    assert await sb.read_file("./data/../seed.txt") == b"seed"
    for outside in ("../etc/passwd", "/etc/passwd", "data/../../x"):
        with pytest.raises(PathOutsideSandboxError, match="leaves the work directory"):
            await sb.write_file(outside, "x")
    with pytest.raises(FileNotFoundError, match=r"no such file 'nope\.txt'"):
        await sb.read_file("nope.txt")
    with pytest.raises(IsADirectoryError):
        await sb.read_file("data")
    with pytest.raises(IsADirectoryError):
        await sb.write_file("data", "x")
    with pytest.raises(NotADirectoryError):
        await sb.write_file("seed.txt/inner", "x")
    with pytest.raises(SandboxError, match="more than the 3 bytes"):
        await sb.read_file("seed.txt", max_bytes=3)


async def test_builtin_commands_answer_what_no_handler_does() -> None:
    sb = MemorySandbox(files={"dir/one.txt": "1\n", "dir/two.txt": "2\n"})
    assert (await sb.run(["echo", "hi", "there"])).stdout == "hi there\n"
    assert (await sb.run("cat dir/one.txt dir/two.txt")).stdout == "1\n2\n"
    assert (await sb.run(["ls", "dir"])).stdout == "one.txt\ntwo.txt\n"
    assert (await sb.run("pwd", cwd="dir")).stdout == "/workspace/dir\n"
    assert (await sb.run("true")).ok and (await sb.run("false")).exit_code == 1
    missing = await sb.run(["cat", "nope"])
    assert missing.exit_code == 1 and "No such file" in missing.stderr
    unknown = await sb.run(["gcc", "x.c"])
    assert (
        unknown.exit_code == 127
        and "command not found: 'gcc'" in unknown.stderr
        and "handler=" in unknown.stderr
    )
    piped = await sb.run("echo a | wc -l")
    assert piped.exit_code == 127 and "shell syntax is not interpreted" in piped.stderr
    assert [c.text for c in sb.commands][:2] == ["echo hi there", "cat dir/one.txt dir/two.txt"]
    with pytest.raises(SandboxError, match="needs a command"):
        await sb.run([])
    with pytest.raises(PathOutsideSandboxError):
        await sb.run("pwd", cwd="/tmp")


async def test_a_handler_answers_commands_with_limits_applied() -> None:
    seen: list[Command] = []

    async def handler(cmd: Command) -> ExecResult | str | None:
        seen.append(cmd)
        if cmd.words[0] == "slow":
            await asyncio.sleep(5)
        if cmd.words[0] == "fail":
            return ExecResult(3, "", "bad input\n")
        if cmd.words[0] == "big":
            return "x" * 5000
        return (
            None if cmd.words[0] == "echo" else f"ran {cmd.text} in {cmd.cwd} with {cmd.env} <{cmd.stdin!r}>"
        )

    sb = MemorySandbox(handler=handler, profile=SandboxProfile(max_output_bytes=1000, default_timeout_s=2.0))
    assert (
        await sb.run(["tool", "--flag"], env={"K": "1"}, stdin="in")
    ).stdout == "ran tool --flag in /workspace with {'K': '1'} <b'in'>"
    assert (await sb.run("echo fallback")).stdout == "fallback\n"
    failed = await sb.run("fail")
    assert (failed.exit_code, failed.stderr, failed.ok) == (3, "bad input\n", False)
    big = await sb.run("big")
    assert big.truncated and len(big.stdout) < 1100 and "characters omitted" in big.stdout
    slow = await sb.run("slow", timeout=0.2)
    assert slow.timed_out and slow.exit_code == 124 and slow.duration_s < 2
    assert len(seen) == 5

    wrong = MemorySandbox(handler=lambda cmd: 42)  # type: ignore[arg-type, return-value]
    with pytest.raises(SandboxError, match="returned int; return an ExecResult, a str"):
        await wrong.run("x")


async def test_the_in_process_python_session_is_persistent_and_bounded() -> None:
    sb = MemorySandbox()
    py = await sb.python()
    first = await py.execute("x = 6 * 7\nprint('working')\nx")
    assert (first.stdout, first.value, first.error) == ("working\n", "42", None)
    assert (await py.execute("x + 1")).value == "43"
    error = await py.execute("def f():\n    return 1 / 0\nf()")
    assert error.error == "ZeroDivisionError: division by zero"
    assert (
        error.traceback is not None
        and '"<cell-3>", line 2, in f' in error.traceback
        and "inprocess.py" not in error.traceback
    )
    looping = await py.execute("while True:\n    pass", timeout=0.3)
    assert looping.timed_out and not looping.restarted and "interrupted" in (looping.error or "")
    assert (await py.execute("x")).value == "42"  # an interrupted cell keeps the session
    stuck = await py.execute("import time\ntime.sleep(3)", timeout=0.2)
    assert stuck.timed_out and stuck.restarted and "every variable is lost" in (stuck.error or "")
    assert (await py.execute("x")).error == "NameError: name 'x' is not defined"
    await py.execute("y = 1")
    await py.restart()
    assert (await py.execute("y")).error is not None


async def test_prints_go_to_their_own_cell_even_concurrently(capsys: pytest.CaptureFixture[str]) -> None:
    one, two = MemorySandbox(), MemorySandbox()
    p1, p2 = await one.python(), await two.python()
    code = "import time\nfor i in range(5):\n    print({tag!r}, i)\n    time.sleep(0.01)\n"
    a, b = await asyncio.gather(p1.execute(code.format(tag="a")), p2.execute(code.format(tag="b")))
    assert a.stdout == "".join(f"a {i}\n" for i in range(5)) and b.stdout == "".join(
        f"b {i}\n" for i in range(5)
    )
    print("the host's own print")
    assert capsys.readouterr().out == "the host's own print\n"  # the host's prints are not taken


async def test_a_process_wide_redirect_elsewhere_does_not_empty_a_cell(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Another thread swapping ``sys.stdout`` (``redirect_stdout``, as libraries do) while a cell
    runs must neither take the cell's prints nor leave the host's stream swapped."""
    import contextlib
    import io
    import threading
    import time

    started, stolen = threading.Event(), io.StringIO()

    def chatty_library() -> None:
        started.wait(5)
        with contextlib.redirect_stdout(stolen):
            time.sleep(0.2)

    thief = threading.Thread(target=chatty_library)
    thief.start()
    py = await MemorySandbox().python()
    py.namespace["started"] = started  # type: ignore[attr-defined]
    code = "import time\nstarted.set()\nfor i in range(10):\n    print('cell', i)\n    time.sleep(0.03)\n"
    result = await py.execute(code)
    thief.join()
    assert result.stdout == "".join(f"cell {i}\n" for i in range(10)) and stolen.getvalue() == ""
    print("the host's own print")
    assert capsys.readouterr().out == "the host's own print\n"


async def test_python_can_be_replaced_or_switched_off() -> None:
    class Scripted:
        def __init__(self, sandbox: MemorySandbox) -> None:
            self.sandbox = sandbox

        async def execute(self, code: str, *, timeout: float | None = None) -> PythonResult:
            return PythonResult(value=repr(f"{self.sandbox.kind}:{code}"))

        async def restart(self) -> None:
            pass

    scripted = MemorySandbox("sql", python=Scripted)
    assert (await (await scripted.python()).execute("1")).value == "'sql:1'"
    with pytest.raises(SandboxError, match="has no Python session"):
        await MemorySandbox(python=None).python()


async def test_the_shell_session_keeps_directory_and_exports() -> None:
    calls: list[tuple[str, str, dict[str, str]]] = []

    def handler(cmd: Command) -> str | None:
        calls.append((cmd.text, cmd.cwd, cmd.env))
        return None

    sb = MemorySandbox(handler=handler, files={"src/main.py": "print(1)\n"})
    sh = await sb.shell()
    assert (await sh.run("cd src")).ok and (await sh.run("export MODE=fast LEVEL=2")).ok
    assert (await sh.run("pwd")).stdout == "/workspace/src\n"
    assert calls[-1] == ("pwd", "/workspace/src", {"MODE": "fast", "LEVEL": "2"})
    assert (await sh.run("ls")).stdout == "main.py\n"
    missing = await sh.run("cd nowhere")
    assert missing.exit_code == 1 and "No such file or directory" in missing.stderr
    with pytest.raises(PathOutsideSandboxError):
        await sh.run("cd ../..")


async def test_the_pool_resets_reuses_and_drops_broken_sandboxes() -> None:
    backend = MemoryBackend(
        files={"start.txt": "fresh"}, max_idle=1, profiles={"python": {"max_output_bytes": 100}}
    )
    sb = await backend.acquire("python", episode_id="a")
    assert sb.profile.max_output_bytes == 100
    await sb.write_file("start.txt", "dirty")
    await (await sb.python()).execute("state = 1")
    await backend.release(sb)
    again = await backend.acquire("python", episode_id="b")
    assert again is sb and backend.counters["reused"] == 1
    assert await again.read_file("start.txt") == b"fresh" and again.commands == []
    assert (await (await again.python()).execute("state")).error is not None
    again.mark_broken("the agent died")
    with pytest.raises(SandboxBrokenError, match="the agent died"):
        await again.run("true")
    await backend.release(again)
    assert again not in backend.live and backend.counters["destroyed"] == 1
    other = await backend.acquire("shell")
    assert other is not sb and other.kind == "shell" and other.profile.memory_bytes == 2 * 1024**3
    await backend.aclose()
    with pytest.raises(SandboxError, match="closed"):
        await backend.acquire("python")


def test_registered_by_name_and_never_chosen_automatically() -> None:
    reg = Registry.load(entry_points=False, plugins=[("sandboxes", sandbox_plugin)])
    spec = reg.sandbox_backend("memory")
    assert isinstance(spec.factory(run_id="r", warm=2), MemoryBackend)
    assert not spec.available() and spec.priority == min(s.priority for s in reg.sandbox_backends.values())


async def test_tools_and_episodes_run_on_it_without_docker() -> None:
    backend = MemoryBackend(handler=lambda cmd: "3 files\n" if cmd.words[:1] == ["ls"] else None)
    ctx = EpisodeContext(episode_id="ep", sandbox_backend=backend)
    sandbox = await ctx.sandbox("python")
    out = await python.call({"code": "import math\nmath.factorial(5)"}, sandbox=sandbox)
    assert (out.text, out.error) == ("120", False)
    listed = await bash.call({"command": "ls"}, sandbox=await ctx.sandbox("shell"))
    assert listed.text == "3 files"
    sandbox.mark_broken("killed by a test")
    replacement = await ctx.sandbox("python")  # the context replaces a broken sandbox
    assert replacement is not sandbox and not replacement.broken and sandbox not in backend.live
