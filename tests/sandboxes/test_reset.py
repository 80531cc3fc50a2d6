"""Issue 17 (section 1): a released sandbox comes back indistinguishable from a fresh one, shown by
enumeration on both backends. One episode writes a mark in every place it can write (found from
``/proc/self/mountinfo``, not from a list), changes the mount roots' modes, leaves System V IPC
objects, a POSIX message queue, detached processes with listening sockets, Python and shell
session state; the next episode on the same sandbox finds exactly what a fresh sandbox shows."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.sandboxes.helpers import BACKENDS, TEST_PROFILE, make_backend
from toolgym.sandboxes.pool import PooledBackend

WRITABLE = r"""
import os, stat
def writable_mounts():  # looks without touching (a probe file would change the roots' times)
    out = []
    for line in open('/proc/self/mountinfo'):
        left, _, right = line.partition(' - ')
        point = left.split()[4].replace('\\040', ' ')
        if right.split()[0] in ('proc', 'sysfs', 'devpts') or stat.S_ISCHR(os.stat(point).st_mode):
            continue
        if os.access(point, os.W_OK):
            out.append(point)
    return out
"""

LEAVE = WRITABLE + r"""
import ctypes, json, subprocess, sys, time
libc = ctypes.CDLL(None, use_errno=True)
marks = []
for point in writable_mounts():
    open(os.path.join(point, '.tg-mark'), 'w').close()  # in /dev/mqueue: a message queue
    marks.append(point)
    try:  # what a file system allows beyond an empty file
        with open(os.path.join(point, '.tg-data'), 'w') as f:
            f.write('left by episode 1')
        os.makedirs(os.path.join(point, '.tg-dir', 'sub'), exist_ok=True)
        os.symlink('/etc/passwd', os.path.join(point, '.tg-dir', 'link'))
        os.chmod(point, 0o700)
    except OSError:
        pass
    for leave in (lambda: os.setxattr(point, 'user.tg', b'answer=42'), lambda: os.utime(point, (1e9, 1e9))):
        try:  # metadata of the root itself, which a wipe of its contents keeps
            leave()
        except OSError:
            pass
ipc = {'shm': libc.shmget(0x746701, 4096, 0o1666), 'sem': libc.semget(0x746702, 1, 0o1666),
       'msg': libc.msgget(0x746703, 0o1666)}
libc.mq_open.restype = ctypes.c_int
ipc['mq'] = libc.mq_open(b'/tg-mark', os.O_CREAT | os.O_RDWR, 0o600, None)
server = ("import socket, time\n"
          "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
          "s.bind(('127.0.0.1', 4242)); s.listen()\n"
          "u = socket.socket(socket.AF_UNIX); u.bind('\\0tg-mark'); u.listen()\n"
          "time.sleep(600)")
subprocess.Popen([sys.executable, '-c', server, 'tg-mark'], start_new_session=True)
time.sleep(1.0)
print(json.dumps({'marks': marks, 'ipc': ipc}))
"""

FIND = WRITABLE + r"""
import json
state = {'files': {}, 'modes': {}}
for point in writable_mounts():
    names = []
    for root, dirs, files in os.walk(point):
        names += [os.path.relpath(os.path.join(root, n), point) for n in dirs + files]
    state['files'][point] = sorted(names)
    st = os.stat(point)
    state['modes'][point] = oct(st.st_mode & 0o7777)
    state['xattrs'] = {**state.get('xattrs', {}), point: os.listxattr(point)}
    if st.st_uid == os.geteuid():  # a time a sandbox user can set at will (atime: any read sets it)
        state['times'] = {**state.get('times', {}), point: st.st_mtime_ns}
state['sysv'] = {k: open('/proc/sysvipc/' + k).read().splitlines()[1:] for k in ('shm', 'sem', 'msg')}
state['mqueue'] = sorted(os.listdir('/dev/mqueue')) if os.path.isdir('/dev/mqueue') else None
state['tcp_listen'] = [l for n in ('tcp', 'tcp6') for l in open('/proc/net/' + n).read().splitlines()[1:]
                       if l.split()[3] == '0A']
state['unix'] = [l for l in open('/proc/net/unix').read().splitlines()[1:] if 'tg-mark' in l]
me = os.getpid()
state['processes'] = sorted(open('/proc/%s/cmdline' % p, 'rb').read().replace(b'\0', b' ').decode()[:60]
                            for p in os.listdir('/proc') if p.isdigit() and int(p) != me
                            and b'tg-mark' in open('/proc/%s/cmdline' % p, 'rb').read())
print(json.dumps(state, sort_keys=True))
"""


@pytest.fixture(scope="module", params=BACKENDS)
def pool(request: pytest.FixtureRequest, runner: asyncio.Runner) -> Iterator[PooledBackend]:
    """A fresh backend keeping one idle sandbox, so that the released one is handed out next."""
    b = make_backend(request.param, profiles={"python": TEST_PROFILE}, max_idle=1)
    yield b
    runner.run(b.aclose())


def _find(sandbox: Any, runner: asyncio.Runner) -> dict[str, Any]:
    r = runner.run(sandbox.run(["python3", "-c", FIND]))
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout)  # type: ignore[no-any-return]


def test_a_reused_sandbox_is_indistinguishable_from_a_fresh_one(pool: PooledBackend, runner: asyncio.Runner) -> None:
    first = runner.run(pool.acquire("python", episode_id="ep-1"))
    fresh = _find(first, runner)  # a sandbox just made: the reference
    py = runner.run(first.python())
    left = runner.run(py.execute(LEAVE + "\ntg_secret = 'episode 1'\n", timeout=30))
    assert left.error is None, left.traceback
    report = json.loads(left.stdout.strip().splitlines()[-1])
    assert {"/workspace", "/tmp", "/home/sandbox", "/dev/shm"} <= set(report["marks"]), report
    assert all(v >= 0 for v in report["ipc"].values()), report  # every kind of leftover was made
    dirty = _find(first, runner)
    assert dirty != fresh and dirty["sysv"]["shm"] and dirty["processes"]  # the probe sees what it left
    assert dirty["times"] != fresh["times"] and any(dirty["xattrs"].values()), dirty
    sh = runner.run(first.shell())
    runner.run(sh.run("export TG_MARK=episode-1; cd /tmp"))
    runner.run(pool.release(first))
    runner.run(pool.settle())

    second = runner.run(pool.acquire("python", episode_id="ep-2"))
    try:
        assert second.id == first.id  # the same sandbox, reset
        assert _find(second, runner) == fresh
        r = runner.run(runner.run(second.python()).execute("tg_secret"))
        assert r.error is not None and "NameError" in r.error
        out = runner.run(runner.run(second.shell()).run('echo "[$TG_MARK]"; pwd')).stdout
        assert out == "[]\n/workspace\n"
    finally:
        runner.run(pool.release(second))
        runner.run(pool.settle())
