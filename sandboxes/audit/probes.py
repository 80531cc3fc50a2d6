"""Probes run inside a sandbox (``python3 -c TEXT``), shared by ``toolgym sandbox audit`` and the
test suite. Each is stdlib-only Python that prints one JSON line last; ``run_probe`` runs one and
parses that line.

- ``PLACES``: defines ``writable_places()``, every directory this user can write, found from
  ``/proc/self/mountinfo`` (the writable mounts' roots) and, below a writable file system whose
  root this user cannot write, by walking it (a writable subdirectory there is outside what a
  wipe of mount roots empties).
- ``LEAVE``: one episode's leftovers of every kind: a mark (file, data, directory, symlink) in
  every writable place, the places' modes, extended attributes and times, System V IPC objects,
  a POSIX message queue, a detached process listening on TCP and on an abstract UNIX socket.
- ``FIND``: what a next episode can see of those (compare with a fresh sandbox's answer).
- ``TMPFS``: every tmpfs mount with its size, inode cap and whether it takes a new file.
- ``SECCOMP``: the calls the agent's filter must refuse, each tried on this process itself.
- ``REACH``: connect to ``host:port`` arguments, each classified (``answered``, ``connected``,
  ``refused``, ``unreachable``, ``timeout``); ``NONCE`` marks the host's audit server's answer.
- ``PIDS`` / ``MEMORY_HOGS``: push on the process and memory caps.
"""

from __future__ import annotations

import json
from typing import Any

from toolgym.sandboxes.agent.harden import SYSCALLS

PLACES = r"""
import os, stat

def _mounts():
    out = []
    for line in open('/proc/self/mountinfo'):
        left, _, right = line.partition(' - ')
        f = left.split()
        point = f[4].replace('\\040', ' ').replace('\\011', '\t').replace('\\012', '\n').replace('\\134', '\\')
        out.append((point, f[5].split(','), right.split()[0]))
    return out

def writable_places(limit=20000):
    # looks without touching (a probe file would change the roots' times)
    mounts = _mounts()
    points = {m[0] for m in mounts}
    out = []
    for point, options, fstype in mounts:
        if fstype in ('proc', 'sysfs', 'devpts'):
            continue
        try:
            st = os.stat(point)
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode):
            continue
        if os.access(point, os.W_OK):
            out.append(point)
            continue
        if 'rw' not in options:
            continue
        seen = 0
        for root, dirs, _ in os.walk(point):
            dirs[:] = [d for d in dirs if os.path.join(root, d) not in points]
            for d in dirs:
                path = os.path.join(root, d)
                if not os.path.islink(path) and os.access(path, os.W_OK):
                    out.append(path)
            seen += len(dirs)
            if seen > limit:
                break
    return sorted(set(out))
"""

LEAVE = (
    PLACES
    + r"""
import ctypes, json, subprocess, sys, time
libc = ctypes.CDLL(None, use_errno=True)
marks = []
for point in writable_places():
    try:
        open(os.path.join(point, '.tg-mark'), 'w').close()  # in /dev/mqueue: a message queue
    except OSError:
        continue
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
)

FIND = (
    PLACES
    + r"""
import json
state = {'files': {}, 'modes': {}, 'xattrs': {}, 'times': {}}
for point in writable_places():
    names = []
    for root, dirs, files in os.walk(point):
        names += [os.path.relpath(os.path.join(root, n), point) for n in dirs + files]
    state['files'][point] = sorted(names)
    st = os.stat(point)
    state['modes'][point] = oct(st.st_mode & 0o7777)
    try:
        state['xattrs'][point] = os.listxattr(point)
    except OSError:
        state['xattrs'][point] = []
    if st.st_uid == os.geteuid():  # a time a sandbox user can set at will (atime: any read sets it)
        state['times'][point] = st.st_mtime_ns
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
)

TMPFS = r"""
import json, os
out = []
for line in open('/proc/self/mountinfo'):
    left, _, right = line.partition(' - ')
    point, fstype = left.split()[4].replace('\\040', ' '), right.split()[0]
    if fstype != 'tmpfs':
        continue
    probe = os.path.join(point, '.tg-probe-%d' % os.getpid())
    try:
        open(probe, 'w').close()
        os.unlink(probe)
        writable = True
    except OSError:
        writable = False
    st = os.statvfs(point)
    out.append({'point': point, 'writable': writable, 'inodes': st.f_files, 'bytes': st.f_blocks * st.f_frsize})
print(json.dumps(out))
"""

SECCOMP = r"""
import ctypes, json, os, platform
NR = json.loads(NUMBERS).get(platform.machine())
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
out = {}
def attempt(name, *args):  # every integer as a full register: syscall() is variadic
    r = libc.syscall(ctypes.c_long(NR[name]), *(ctypes.c_long(a) if isinstance(a, int) else a for a in args))
    out[name] = 'allowed' if r >= 0 else os.strerror(ctypes.get_errno())
if NR is None:
    print(json.dumps({'machine': platform.machine()}))
    raise SystemExit
me = os.getpid()
pid = os.fork()
if pid == 0:  # PTRACE_TRACEME in a child: allowed, it would make this process its tracer
    os._exit(0 if libc.syscall(NR['ptrace'], 0, 0, 0, 0) >= 0 else 3 + min(ctypes.get_errno(), 250))
status = os.waitpid(pid, 0)[1]
code = os.waitstatus_to_exitcode(status)
out['ptrace'] = 'allowed' if code == 0 else os.strerror(code - 3)
buf = ctypes.create_string_buffer(8)
iov = (ctypes.c_void_p * 2)(ctypes.addressof(buf), 8)
src = (ctypes.c_void_p * 2)(ctypes.addressof(buf), 8)
attempt('process_vm_readv', me, ctypes.byref(iov), 1, ctypes.byref(src), 1, 0)
attempt('process_vm_writev', me, ctypes.byref(src), 1, ctypes.byref(iov), 1, 0)
pidfd = os.pidfd_open(me)
attempt('pidfd_getfd', pidfd, 0, 0)
attempt('kcmp', me, me, 0, 0, 0)
attempt('unshare', 0x10000000)
attempt('add_key', b'user', b'tg-audit', b'secret', 6, -2)
attempt('keyctl', 0, -2, 0)
print(json.dumps(out))
""".replace("NUMBERS", repr(json.dumps({m: nrs for m, (_, nrs) in SYSCALLS.items()})))
"""Each call is tried on this process itself, so nothing is harmed when the filter is missing."""

REACH = r"""
import errno, json, socket, sys
nonce, timeout = sys.argv[1], float(sys.argv[2])
out = {}
for target in sys.argv[3:]:
    host, _, port = target.rpartition(':')
    family = socket.AF_INET6 if ':' in host else socket.AF_INET
    s = socket.socket(family, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect((host.strip('[]'), int(port)))
        s.sendall(b'GET /audit HTTP/1.0\r\nHost: x\r\n\r\n')
        data = b''
        try:
            while len(data) < 4096:
                chunk = s.recv(4096)
                if not chunk:
                    break
                data += chunk
        except OSError:
            pass
        out[target] = 'answered' if nonce.encode() in data else 'connected'
    except socket.timeout:
        out[target] = 'timeout'
    except ConnectionRefusedError:
        out[target] = 'refused'
    except OSError as exc:
        unreachable = (errno.ENETUNREACH, errno.EHOSTUNREACH, errno.EACCES, errno.EPERM, errno.EADDRNOTAVAIL)
        out[target] = 'unreachable' if exc.errno in unreachable else 'error: %s' % exc
    finally:
        s.close()
print(json.dumps(out))
"""

FETCH = r"""
import json, sys, urllib.request
out = {}
for url in sys.argv[1:]:
    try:
        out[url] = 'answered: ' + urllib.request.urlopen(url, timeout=10).read().decode(errors='replace')[:200]
    except Exception as exc:
        out[url] = 'refused: %s' % exc
print(json.dumps(out))
"""

INTERFACES = r"""
import json, socket
print(json.dumps(sorted(name for _, name in socket.if_nameindex())))
"""

DNS = r"""
import json, socket
try:
    socket.getaddrinfo('example.com', 443)
    print(json.dumps('resolved'))
except OSError as exc:
    print(json.dumps('failed: %s' % exc))
"""

PIDS = r"""
import json, os, signal, sys, time
limit = int(sys.argv[1])
children = []
failure = None
for _ in range(limit + 16):
    try:
        pid = os.fork()
    except OSError as exc:
        failure = exc.strerror
        break
    if pid == 0:
        time.sleep(30)
        os._exit(0)
    children.append(pid)
for pid in children:
    os.kill(pid, signal.SIGKILL)
for pid in children:
    os.waitpid(pid, 0)
print(json.dumps({'forked': len(children), 'stopped_by': failure}))
"""

MEMORY_HOGS = """
import subprocess, sys
hog = "b = bytearray(100 << 20)\\nfor i in range(0, len(b), 4096): b[i] = 1\\nimport time; time.sleep(3); print('alive')"
procs = [subprocess.Popen([sys.executable, '-c', hog], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL) for _ in range(4)]
print(sum(p.communicate()[0] == b'alive\\n' for p in procs))
"""
"""Four processes of 100 MB each: against a 256 MiB sandbox they cannot all live."""

ATTEMPTS = r"""
import json, socket, sys
out = {}
for path in sys.argv[2:]:
    try:
        if sys.argv[1] == 'append':
            open(path, 'ab').close()
        else:
            s = socket.socket(socket.AF_UNIX)
            s.connect(path)
            s.close()
        out[path] = 'done'
    except OSError as exc:
        out[path] = exc.strerror or str(exc)
print(json.dumps(out))
"""
"""``append PATH...`` or ``connect PATH...`` (UNIX sockets): ``done`` or why not, for each."""

STATUS = r"""
import json, os
fields = dict(l.split(':\t', 1) for l in open('/proc/self/status').read().splitlines() if ':\t' in l)
root = next(l.split()[5] for l in open('/proc/self/mountinfo') if l.split()[4] == '/')
print(json.dumps({'status': {k: v.strip() for k, v in fields.items()}, 'root_options': root, 'uid': os.getuid()}))
"""


async def run_probe(
    sandbox: Any, text: str, *args: str, timeout: float = 30.0, env: dict[str, str] | None = None
) -> Any:
    """Run ``text`` with ``args`` in ``sandbox``; its last output line, parsed. Raises
    ``ProbeError`` when it fails or prints no JSON."""
    r = await sandbox.run(["python3", "-c", text, *args], timeout=timeout, env=env)
    lines = r.stdout.strip().splitlines()
    if r.exit_code != 0 or not lines:
        raise ProbeError(
            f"probe exited {r.exit_code}{' (timed out)' if r.timed_out else ''}: "
            f"{(r.stderr or r.stdout).strip()[-300:]}"
        )
    try:
        return json.loads(lines[-1])
    except ValueError:
        raise ProbeError(f"probe printed no JSON: {lines[-1][:200]}") from None


class ProbeError(Exception):
    """A probe could not run to the end inside the sandbox."""
