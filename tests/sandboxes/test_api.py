"""The sandbox API on both backends: run, files, the Python session, the shell session."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from toolgym.core.errors import PathOutsideSandboxError, SandboxError
from toolgym.sandboxes import WORKDIR


def test_run_argv_string_stdin_env_cwd(sandbox: Any, runner: asyncio.Runner) -> None:
    r = runner.run(sandbox.run(["echo", "hello world"]))
    assert (r.exit_code, r.stdout, r.stderr, r.timed_out, r.truncated) == (
        0,
        "hello world\n",
        "",
        False,
        False,
    )
    assert r.duration_s > 0

    r = runner.run(sandbox.run("echo out; echo err >&2; exit 3"))
    assert (r.exit_code, r.stdout, r.stderr) == (3, "out\n", "err\n")
    assert not r.ok

    r = runner.run(sandbox.run(["cat"], stdin="piped ünïcode\n"))
    assert r.stdout == "piped ünïcode\n"

    r = runner.run(sandbox.run("echo $GREETING-$HOME", env={"GREETING": "hi"}))
    assert r.stdout == "hi-/home/sandbox\n"

    runner.run(sandbox.run("mkdir -p sub/dir"))
    assert runner.run(sandbox.run("pwd", cwd="sub/dir")).stdout == f"{WORKDIR}/sub/dir\n"
    assert runner.run(sandbox.run("pwd")).stdout == f"{WORKDIR}\n"
    assert runner.run(sandbox.run("id -u")).stdout == "1000\n"


def test_run_reports_missing_command_and_directory(sandbox: Any, runner: asyncio.Runner) -> None:
    r = runner.run(sandbox.run(["no-such-program-xyz"]))
    assert r.exit_code == 127 and "no-such-program-xyz" in r.stderr
    r = runner.run(sandbox.run(["true"], cwd="/does/not/exist"))
    assert r.exit_code == 126 and "working directory" in r.stderr
    with pytest.raises(SandboxError, match="needs a command"):
        runner.run(sandbox.run([]))
    with pytest.raises(SandboxError, match="timeout must be positive"):
        runner.run(sandbox.run(["true"], timeout=0))


def test_signal_exit_codes(sandbox: Any, runner: asyncio.Runner) -> None:
    r = runner.run(sandbox.run("kill -TERM $$"))
    assert r.exit_code == 128 + 15


def test_output_is_capped_head_and_tail(sandbox: Any, runner: asyncio.Runner) -> None:
    r = runner.run(
        sandbox.run("echo FIRST; head -c 200000 /dev/zero | tr '\\0' x; echo; echo LAST", max_output=2000)
    )
    assert r.truncated
    assert r.stdout.startswith("FIRST\n") and r.stdout.endswith("LAST\n")
    assert "bytes of output omitted" in r.stdout and len(r.stdout) < 2200


def test_write_and_read_files(sandbox: Any, runner: asyncio.Runner) -> None:
    runner.run(sandbox.write_file("notes/a.txt", "alpha\n"))
    runner.run(sandbox.write_file(f"{WORKDIR}/notes/b.bin", bytes(range(256))))
    assert runner.run(sandbox.read_file("notes/a.txt")) == b"alpha\n"
    assert runner.run(sandbox.read_file("notes/b.bin")) == bytes(range(256))
    assert runner.run(sandbox.run("cat notes/a.txt")).stdout == "alpha\n"
    runner.run(sandbox.write_file("notes/a.txt", "beta\n", append=True))
    assert runner.run(sandbox.read_file("./notes/../notes/a.txt")) == b"alpha\nbeta\n"
    with pytest.raises(FileNotFoundError):
        runner.run(sandbox.read_file("missing.txt"))
    with pytest.raises(IsADirectoryError):
        runner.run(sandbox.read_file("notes"))


@pytest.mark.parametrize(
    "path", ["../escape.txt", "/etc/passwd", "notes/../../etc/passwd", "/tmp/x", f"{WORKDIR}/../x"]
)
def test_file_api_refuses_paths_outside(sandbox: Any, runner: asyncio.Runner, path: str) -> None:
    with pytest.raises(PathOutsideSandboxError, match="leaves the work directory"):
        runner.run(sandbox.read_file(path))
    with pytest.raises(PathOutsideSandboxError, match="leaves the work directory"):
        runner.run(sandbox.write_file(path, "x"))


def test_file_api_refuses_symlinks_that_leave(sandbox: Any, runner: asyncio.Runner) -> None:
    runner.run(
        sandbox.run(
            "ln -s /etc etc-link && ln -s /tmp/target tmp-file && mkdir -p d && ln -s ../d/real.txt d/inner"
        )
    )
    with pytest.raises(PathOutsideSandboxError, match="symlink"):
        runner.run(sandbox.read_file("etc-link/passwd"))
    with pytest.raises(PathOutsideSandboxError, match="symlink"):
        runner.run(sandbox.write_file("etc-link/evil", "x"))
    with pytest.raises(PathOutsideSandboxError, match="symlink"):
        runner.run(sandbox.write_file("tmp-file", "x"))
    assert runner.run(sandbox.run("test -e /tmp/target")).exit_code == 1
    runner.run(sandbox.write_file("d/inner", "inside is fine"))  # a symlink that stays inside
    assert runner.run(sandbox.read_file("d/real.txt")) == b"inside is fine"


def test_python_session_keeps_state_and_echoes_values(sandbox: Any, runner: asyncio.Runner) -> None:
    py = runner.run(sandbox.python())
    r = runner.run(py.execute("import math\nx = 6 * 7\nprint('printed')\nx"))
    assert (r.stdout, r.value, r.error, r.restarted) == ("printed\n", "42", None, False)
    r = runner.run(py.execute("def f(n):\n    return math.factorial(n)\nf(5)"))
    assert r.value == "120"
    r = runner.run(py.execute("y = x + 1"))
    assert r.value is None and r.output == ""
    assert runner.run(py.execute("y")).value == "43"
    r = runner.run(py.execute("import subprocess; subprocess.run(['echo', 'from a child'])"))
    assert "from a child" in r.stdout


def test_python_session_errors_have_tracebacks(sandbox: Any, runner: asyncio.Runner) -> None:
    py = runner.run(sandbox.python())
    r = runner.run(py.execute("def g():\n    return 1 / 0\ng()"))
    assert r.error == "ZeroDivisionError: division by zero"
    assert "<cell-" in r.traceback and "return 1 / 0" in r.traceback and "pyworker" not in r.traceback
    r = runner.run(py.execute("def broken(:"))
    assert r.error.startswith("SyntaxError")
    r = runner.run(py.execute("import sys; print('bye', file=sys.stderr); sys.exit(3)"))
    assert r.stderr == "bye\n" and r.error.startswith("SystemExit")
    assert runner.run(py.execute("1 + 1")).value == "2"  # still alive after SystemExit


def test_python_timeout_interrupts_and_keeps_state(sandbox: Any, runner: asyncio.Runner) -> None:
    py = runner.run(sandbox.python())
    runner.run(py.execute("kept = 'yes'"))
    r = runner.run(py.execute("import time\nwhile True: time.sleep(0.01)", timeout=0.5))
    assert r.timed_out and not r.restarted and "KeyboardInterrupt" in r.traceback
    assert runner.run(py.execute("kept")).value == "'yes'"


def test_python_session_that_will_not_stop_is_restarted(sandbox: Any, runner: asyncio.Runner) -> None:
    py = runner.run(sandbox.python())
    runner.run(py.execute("lost = 1"))
    r = runner.run(
        py.execute(
            "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True: pass", timeout=0.3
        )
    )
    assert r.timed_out and r.restarted and "restarted" in r.output
    r = runner.run(py.execute("'lost' in dir()"))
    assert r.value == "False" and not r.restarted
    r = runner.run(py.execute("import os; os._exit(1)"))
    assert r.restarted and "exited" in r.error
    assert runner.run(py.execute("2 + 2")).value == "4"


def test_python_output_is_capped(sandbox: Any, runner: asyncio.Runner) -> None:
    py = runner.run(sandbox.python())
    r = runner.run(py.execute("print('a' * 500000)\n'b' * 500000", max_output=4096))
    assert r.truncated and len(r.stdout) < 5000 and len(r.value) < 5000


def test_shell_session_keeps_directory_and_environment(sandbox: Any, runner: asyncio.Runner) -> None:
    sh = runner.run(sandbox.shell())
    r = runner.run(sh.run("mkdir -p proj && cd proj && export TOKEN=abc && LOCAL=1"))
    assert r.exit_code == 0
    r = runner.run(sh.run("pwd; echo $TOKEN $LOCAL"))
    assert r.stdout == f"{WORKDIR}/proj\nabc 1\n"
    assert runner.run(sh.run("false")).exit_code == 1
    assert runner.run(sh.run("(exit 42)")).exit_code == 42
    r = runner.run(sh.run("echo 'PS1$ fake prompt 0'; exit_code_lookalike=7; printf 'no newline'"))
    assert r.exit_code == 0 and r.stdout == "PS1$ fake prompt 0\nno newline"
    r = runner.run(sh.run("cat <<'EOF'\nline one\n  line 'two'\nEOF"))
    assert r.stdout == "line one\n  line 'two'\n"
    r = runner.run(sh.run("echo 'unbalanced"))
    assert r.exit_code == 2 and "unexpected EOF" in r.stderr
    assert runner.run(sh.run("echo still $TOKEN")).stdout == "still abc\n"


def test_shell_timeout_and_exit_restart_in_place(sandbox: Any, runner: asyncio.Runner) -> None:
    sh = runner.run(sandbox.shell())
    runner.run(sh.run("mkdir -p /tmp/w && cd /tmp/w && export KEEP=1"))
    r = runner.run(sh.run("sleep 30", timeout=0.5))
    assert r.timed_out and r.exit_code == 124 and "timed out" in r.stderr
    assert runner.run(sh.run("pwd; echo $KEEP")).stdout == "/tmp/w\n1\n"
    r = runner.run(sh.run("exit 7"))
    assert r.exit_code == 7 and "shell exited" in r.stderr
    assert runner.run(sh.run("pwd; echo $KEEP")).stdout == "/tmp/w\n1\n"
