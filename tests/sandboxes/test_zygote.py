"""The Python session's zygote (``sandboxes/agent/zygote.py``), attacked on both backends.

Each episode's interpreter is forked from a pre-imported one that lives through the resets. So:
what one episode plants in its interpreter and around it (module globals, ``sys.modules``
patches, ``builtins``, files, threads, processes, descriptors, environment variables, signal
handlers, ``atexit`` hooks, import hooks, tracers, limits) is not in the next one's; the
zygote is out of the episodes' reach (not dumpable, signals blocked, seccomp); and a zygote that
an episode killed, stopped or changed is caught from outside and the sandbox made anew (or, when
stopped, resumed)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from tests.sandboxes.helpers import BACKENDS, TEST_PROFILE, make_backend
from toolgym.sandboxes import hostprocs
from toolgym.sandboxes.pool import PooledBackend

ZYGOTE_PROFILE = dataclasses.replace(TEST_PROFILE, python_zygote=True, prestart_python=True)


@pytest.fixture(scope="module", params=BACKENDS)
def pool(request: pytest.FixtureRequest, runner: asyncio.Runner) -> Iterator[PooledBackend]:
    """One idle sandbox at most, so that a released one is handed out next."""
    b = make_backend(request.param, profiles={"python": ZYGOTE_PROFILE}, max_idle=1)
    yield b
    runner.run(b.aclose())


def _cell(sandbox: Any, runner: asyncio.Runner, code: str, timeout: float = 20) -> Any:
    return runner.run(runner.run(sandbox.python()).execute(code, timeout=timeout))


def _json_cell(sandbox: Any, runner: asyncio.Runner, code: str) -> Any:
    r = _cell(sandbox, runner, code)
    assert r.error is None, r.traceback or r.error
    return json.loads(r.stdout.strip().splitlines()[-1])


def _episode(pool: PooledBackend, runner: asyncio.Runner, name: str) -> Any:
    return runner.run(pool.acquire("python", episode_id=name))


def _release(pool: PooledBackend, runner: asyncio.Runner, sandbox: Any) -> None:
    runner.run(pool.release(sandbox))
    runner.run(pool.settle())


def zygote_pid(sandbox: Any) -> str:
    """A cell's first lines: ``zygote_pid()``, the zygote the agent named in its hello (a forked
    interpreter's command line is the zygote's, so it is not told apart by that)."""
    return f"import os\ndef zygote_pid():\n    return {int(sandbox.channel.hello['zygote'])}\n"


LOOK = r"""
import json, os, signal, sys
print(json.dumps({
    'parent': os.getppid(), 'session_leader': os.getsid(0) == os.getpid(),
    'fds': sorted(int(f) for f in os.listdir('/proc/self/fd')),
    'blocked': sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])),
    'environ_readable': len(open('/proc/self/environ', 'rb').read()) > 0,
    'oom_score_adj': open('/proc/self/oom_score_adj').read().strip(),
    'zygote_modules': sorted({'_ctypes', '_socket', 'ctypes'} & set(sys.modules)),
    'argv': sys.argv[1:], 'path0': sys.path[0], 'cwd': os.getcwd(),
    'sigint': type(signal.getsignal(signal.SIGINT)).__name__, 'zygote': zygote_pid(),
}))
"""


def test_the_interpreter_is_forked_from_the_zygote_and_holds_what_a_started_one_does(
    pool: PooledBackend, runner: asyncio.Runner
) -> None:
    sb = _episode(pool, runner, "look")
    try:
        zygote = sb.channel.hello.get("zygote")
        assert zygote, sb.channel.hello
        seen = _json_cell(sb, runner, zygote_pid(sb) + LOOK)
        assert seen["zygote"] == zygote
        assert seen["parent"] == 1 and seen["session_leader"]  # the agent's child, as a started one
        assert seen["fds"] == [0, 1, 2, 3, 4]  # stdio, its channel, this listing
        assert seen["blocked"] == []  # the zygote's blocked signals are not passed on
        assert seen["environ_readable"] and seen["oom_score_adj"] == "1000"  # dumpable again
        assert seen["zygote_modules"] == []
        assert seen["argv"] == ["3"] and seen["path0"] == "" and seen["cwd"] == "/workspace"
        assert seen["sigint"] == "builtin_function_or_method"  # Python's own handler: interrupts work
        r = _cell(sb, runner, "while True: pass", timeout=1)
        assert r.timed_out and "TimeoutError" in (r.error or "") and not r.restarted
        assert _cell(sb, runner, "1 + 1").value == "2"
    finally:
        _release(pool, runner, sb)


PLANT = r"""
import atexit, builtins, json, os, signal, socket, subprocess, sys, textwrap, threading, time
tg_global = 'episode 1'
sys.modules['textwrap'].dedent = lambda text: 'patched'  # a module the interpreter had imported
sys.modules['tg_planted'] = type(sys)('tg_planted')
builtins.tg_builtin = 'episode 1'
builtins.abs = lambda x: 42
os.environ['TG_PLANTED'] = 'episode 1'
os.putenv('TG_PUTENV', 'episode 1')
signal.signal(signal.SIGUSR1, lambda *_: None)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR2})
atexit.register(lambda: open('/workspace/tg-atexit', 'w').write('episode 1'))
sys.path.insert(0, '/tmp/tg-path')
sys.meta_path.insert(0, type('Finder', (), {'find_spec': staticmethod(lambda *a, **k: None)})())
sys.settrace(lambda *a: None)
sys.setrecursionlimit(77)
os.umask(0o077)
os.nice(5)
import resource
resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
for d in ('/workspace', '/tmp', os.environ['HOME']):
    open(os.path.join(d, 'tg-file'), 'w').write('episode 1')
open('/workspace/sitecustomize.py', 'w').write('open("/tmp/tg-sitecustomize", "w")\n')
open('/workspace/tg_module.py', 'w').write('PLANTED = 1\n')
keep = [os.open('/workspace/tg-file', os.O_RDONLY), *os.pipe(), socket.socket()]
keep[-1].bind(('127.0.0.1', 4343)); keep[-1].listen()
threading.Thread(target=time.sleep, args=(600,), daemon=True, name='tg-thread').start()
child = subprocess.Popen(['sleep', '600'], start_new_session=True)
for _ in range(500):  # until the child has exec'd (before, its cmdline is still this Python's)
    if open(f'/proc/{child.pid}/cmdline', 'rb').read().startswith(b'sleep'):
        break
    time.sleep(0.01)
os.chdir('/tmp')
"""

FIND = r"""
import builtins, json, os, resource, signal, sys, threading
print(json.dumps({
    'global': 'tg_global' in globals(),
    'patched': sys.modules['textwrap'].dedent(' a') != 'a',
    'module': 'tg_planted' in sys.modules or 'tg_module' in sys.modules,
    'builtin': hasattr(builtins, 'tg_builtin') or abs(-1) != 1,
    'environ': sorted(k for k in os.environ if k.startswith('TG_')),
    'usr1': signal.getsignal(signal.SIGUSR1) not in (signal.SIG_DFL, None),
    'term': signal.getsignal(signal.SIGTERM) != signal.SIG_DFL,
    'blocked': sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])),
    'path': [p for p in sys.path if 'tg' in p], 'meta_path': len(sys.meta_path),
    'trace': sys.gettrace() is not None, 'recursion': sys.getrecursionlimit(),
    'umask': os.umask(0o022), 'nice': os.nice(0), 'nofile': resource.getrlimit(resource.RLIMIT_NOFILE)[0],
    'files': sorted(n for d in ('/workspace', '/tmp', os.environ['HOME']) for n in os.listdir(d)),
    'fds': sorted(int(f) for f in os.listdir('/proc/self/fd')),
    'threads': [t.name for t in threading.enumerate()],
    'tasks': len(os.listdir('/proc/self/task')), 'cwd': os.getcwd(),
    'processes': sorted(open(f'/proc/{p}/cmdline', 'rb').read().split(b'\0')[0].decode()
                        for p in os.listdir('/proc') if p.isdigit() and p != str(os.getpid())),
}))
"""


def test_what_an_episode_plants_is_not_in_the_next_ones_interpreter(
    pool: PooledBackend, runner: asyncio.Runner
) -> None:
    first = _episode(pool, runner, "plant-1")
    fresh = _json_cell(first, runner, FIND)  # an interpreter no episode code has touched yet
    r = _cell(first, runner, PLANT)
    assert r.error is None, r.traceback
    dirty = _json_cell(first, runner, FIND)
    for key in ("global", "patched", "module", "builtin", "usr1", "term", "trace"):
        assert dirty[key], key  # the probe sees each plant where it was made
    assert dirty["environ"] and dirty["blocked"] and "tg-thread" in dirty["threads"]
    assert dirty["nofile"] == 64 and dirty["nice"] > fresh["nice"]
    assert "sleep" in dirty["processes"]
    runner.run(pool.release(first))
    runner.run(pool.settle())

    second = _episode(pool, runner, "plant-2")
    try:
        assert second.id == first.id  # the same sandbox and zygote, reset
        after = _json_cell(second, runner, FIND)
        assert after == fresh
        assert _cell(second, runner, "tg_global").error.startswith("NameError")
        assert runner.run(second.run(["ls", "-A", "/tmp", "/workspace"])).stdout == "/tmp:\n\n/workspace:\n"
    finally:
        _release(pool, runner, second)


def test_the_zygote_is_out_of_the_episodes_reach(pool: PooledBackend, runner: asyncio.Runner) -> None:
    """Its memory, descriptors, environment and OOM score are closed (not dumpable), ptrace is
    refused (the seccomp filter), and the signals that would end it are blocked."""
    first = _episode(pool, runner, "reach-1")
    probe = (
        zygote_pid(first)
        + r"""
import ctypes, json, signal
z = zygote_pid()
seen = {'zygote': z}
for name, mode in (('mem', 'r+b'), ('environ', 'rb'), ('oom_score_adj', 'w'), ('fd/0', 'rb')):
    try:
        open(f'/proc/{z}/{name}', mode).close()
        seen[name] = 'open'
    except OSError as exc:
        seen[name] = exc.strerror
try:
    os.listdir(f'/proc/{z}/fd')
    seen['fd'] = 'listed'
except OSError as exc:
    seen['fd'] = exc.strerror
libc = ctypes.CDLL(None, use_errno=True)
seen['ptrace'] = libc.ptrace(16, z, 0, 0) == 0 or ctypes.get_errno()  # PTRACE_ATTACH
for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGQUIT, signal.SIGPIPE):
    os.kill(z, sig)
import time; time.sleep(0.2)
seen['alive'] = open(f'/proc/{z}/stat').read().split()[2]
print(json.dumps(seen))
"""
    )
    seen = _json_cell(first, runner, probe)
    zygote = seen.pop("zygote")
    assert zygote == first.channel.hello["zygote"]
    assert seen.pop("alive") in ("S", "R"), seen
    assert seen.pop("ptrace") == 1, seen  # EPERM
    assert all(v in ("Permission denied", "Operation not permitted") for v in seen.values()), seen
    _release(pool, runner, first)
    second = _episode(pool, runner, "reach-2")
    try:
        assert second.id == first.id and second.channel.hello["zygote"] == zygote
        assert _cell(second, runner, "6 * 7").value == "42"
    finally:
        _release(pool, runner, second)


ZYGOTE_ATTACKS = {
    "killed": "os.kill(zygote_pid(), 9)",
    "killed and replaced": (
        "import subprocess, sys, time; os.kill(zygote_pid(), 9); time.sleep(0.2)\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)', '--zygote'], "
        "start_new_session=True)"
    ),
    "limits": "import resource; resource.prlimit(zygote_pid(), resource.RLIMIT_NOFILE, (99, 99))",
    "nice": "os.setpriority(os.PRIO_PROCESS, zygote_pid(), 9)",
    "scheduler": "os.sched_setscheduler(zygote_pid(), os.SCHED_IDLE, os.sched_param(0))",
    "affinity": "os.sched_setaffinity(zygote_pid(), {min(os.sched_getaffinity(0))})",
}


@pytest.mark.parametrize("attack", sorted(ZYGOTE_ATTACKS))
def test_a_zygote_an_episode_killed_or_changed_is_caught_from_outside(
    pool: PooledBackend, runner: asyncio.Runner, attack: str
) -> None:
    """The host's check after the reset finds the zygote gone or changed (its pid, start time,
    limits, nice value, scheduling): the sandbox is destroyed and the next episode gets a new
    one, with a zygote of its own."""
    if attack == "affinity" and len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one CPU: no other affinity to set")
    first = _episode(pool, runner, f"zygote-{attack}-1")
    r = _cell(first, runner, zygote_pid(first) + ZYGOTE_ATTACKS[attack])
    assert r.error is None, r.traceback
    poisoned = pool.counters["poisoned"]
    _release(pool, runner, first)
    assert pool.counters["poisoned"] == poisoned + 1
    second = _episode(pool, runner, f"zygote-{attack}-2")
    try:
        assert second.id != first.id and second.channel.hello.get("zygote")
        assert _cell(second, runner, "import os; os.getppid()").value == "1"
        assert _cell(
            second, runner, "import resource; resource.getrlimit(resource.RLIMIT_NOFILE)[0]"
        ).value == str(ZYGOTE_PROFILE.nofile)
    finally:
        _release(pool, runner, second)


def test_a_stopped_zygote_is_resumed_by_the_reset(pool: PooledBackend, runner: asyncio.Runner) -> None:
    first = _episode(pool, runner, "stopped-1")
    r = _cell(first, runner, zygote_pid(first) + "import signal; os.kill(zygote_pid(), signal.SIGSTOP)")
    assert r.error is None, r.traceback
    _release(pool, runner, first)
    second = _episode(pool, runner, "stopped-2")
    try:
        assert second.id == first.id
        assert _cell(second, runner, "6 * 7").value == "42"
        state = _cell(
            second, runner, zygote_pid(second) + "open(f'/proc/{zygote_pid()}/stat').read().split()[2]"
        )
        assert state.value in ("'S'", "'R'")
    finally:
        _release(pool, runner, second)


def test_an_interpreter_that_dies_mid_episode_is_forked_anew(
    pool: PooledBackend, runner: asyncio.Runner
) -> None:
    sb = _episode(pool, runner, "dies")
    try:
        _cell(sb, runner, "tg_state = 1")
        r = _cell(sb, runner, "import os; os._exit(7)")
        assert r.restarted and "status 7" in (r.error or "")
        r = _cell(sb, runner, "tg_state")
        assert r.error is not None and "NameError" in r.error
        assert _cell(sb, runner, "import os; os.getppid()").value == "1"
    finally:
        _release(pool, runner, sb)


def test_the_host_tells_the_recorded_zygote_from_a_process_with_its_pid() -> None:
    """The host's record holds the zygote's start time: another process that got its pid later
    is not taken for it, nor is a child whose pid inside is not the one the agent named."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        start = hostprocs.start_time(child.pid)
        assert start is not None
        record = {"pid": child.pid, "start": start, "attributes": hostprocs.fresh_attributes(child.pid)}
        assert hostprocs.zygote_changed(record) is None
        assert "is gone" in (hostprocs.zygote_changed({**record, "start": start - 1}) or "")
        with pytest.raises(LookupError):
            hostprocs.note_zygote(os.getpid(), -1)
    finally:
        child.kill()
        child.wait()
    assert "is gone" in (hostprocs.zygote_changed(record) or "")


def test_a_killed_zygote_not_yet_reaped_counts_as_gone() -> None:
    """The host's check after a reset reads the zygote's ``/proc`` entry: a zygote an episode killed
    stays there as a zombie until its parent reaps it, with its start time unchanged, and must read
    as gone (seen under CI's load: the sandbox was about to be reused)."""
    import signal
    import time

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        record: dict[str, object] = {"pid": child.pid, "start": hostprocs.start_time(child.pid)}
        assert hostprocs.zygote_changed(record) is None
        os.kill(child.pid, signal.SIGKILL)
        for _ in range(500):  # dead, not reaped: a zombie keeps its /proc entry and start time
            with open(f"/proc/{child.pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    break
            time.sleep(0.01)
        assert hostprocs.start_time(child.pid) == record["start"]
        assert "is gone" in (hostprocs.zygote_changed(record) or "")
    finally:
        child.kill()
        child.wait()
