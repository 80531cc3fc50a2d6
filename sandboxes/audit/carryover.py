"""What one episode can hand the next through kernel counters that a reset does not empty,
probed across a real reset, and the rule that keeps what stays open harmless.

Each ``reset.carryover-*`` row reads a counter in the sandbox, moves it by an amount an episode
chooses, has the sandbox reset and handed out again, and reads it once more:

- ``lo-bytes``: bytes through the loopback interface (``/proc/net/dev``), moved by sending data to
  a local socket. Per network namespace; a sandbox keeps its namespace for life.
- ``inodes``: the inode number a new file in ``/tmp`` gets, moved by creating files. tmpfs numbers
  its inodes from a counter per mount, and the mount outlives a reset.
- ``pids``: the process id a new process gets, moved by forking. Per PID namespace.
- ``ipc-ids``: the id a new System V shared memory segment gets, moved by making and removing
  segments (the reset removes them; the sequence behind their ids goes on). Per IPC namespace.
- ``process-counters``: the context switches (``/proc/PID/status``) of the processes that outlive
  a reset, the agent and the Python session's zygote (``agent/zygote.py``), moved by sending the
  agent requests and by making the zygote fork interpreters (a cell that exits, then another).
  Their ``/proc`` status and stat files are readable by every process of the uid, not dumpable or
  not; their CPU times and page faults move the same way.
- ``memory-peak``: the memory cgroup's peak use, moved by allocating. The backend may reset it from
  outside (Docker on cgroup v1, ``toolgym.sandboxes.counters``) or the sandbox may not see it at
  all (bubblewrap mounts no ``/sys``); a backend that claims it reset the peak and still shows it
  FAILs.

A counter that came back where the episode left it is ``residual``: no namespace or mount can be
renewed from inside an unprivileged sandbox, and renewing them from outside means a new sandbox.
What keeps them harmless is ``reset.group-separation``, checked here too: the pool never hands a
sandbox to another episode of a group it has served (``GROUP_LABEL``), so the samples of one
group (and the same task in a later epoch) never follow each other on one sandbox.
"""

from __future__ import annotations

from typing import Any

from toolgym.core.sandbox import GROUP_LABEL
from toolgym.sandboxes import counters
from toolgym.sandboxes.audit import probes
from toolgym.sandboxes.audit.rows import Fail, Residual
from toolgym.sandboxes.audit.target import Target

COUNTERS = r"""
import ctypes, json, os
out = {'lo_bytes': None, 'memory_peak': None}
for line in open('/proc/net/dev'):
    name, _, rest = line.partition(':')
    if name.strip() == 'lo':
        fields = rest.split()
        out['lo_bytes'] = int(fields[0]) + int(fields[8])
probe = '/tmp/.tg-inode-%d' % os.getpid()
open(probe, 'w').close()
out['inode'] = os.stat(probe).st_ino
os.unlink(probe)
pid = os.fork()
if pid == 0:
    os._exit(0)
os.waitpid(pid, 0)
out['pid'] = pid
libc = ctypes.CDLL(None)
out['ipc_id'] = libc.shmget(0, 4096, 0o1600)  # IPC_PRIVATE
libc.shmctl(out['ipc_id'], 0, None)  # IPC_RMID
for path in ('/sys/fs/cgroup/memory/memory.max_usage_in_bytes', '/sys/fs/cgroup/memory.peak'):
    try:
        out['memory_peak'] = int(open(path).read())
        break
    except (OSError, ValueError):
        pass
print(json.dumps(out))
"""
"""Loopback bytes (received + sent), the next inode number in /tmp, the next pid, the next System V
shared memory id, the memory cgroup's peak (None where no cgroup file is visible)."""

MOVE_COUNTERS = r"""
import ctypes, json, os, socket, sys, threading
mib, files, forks, segments = (int(a) for a in sys.argv[1:5])
server = socket.socket()
server.bind(('127.0.0.1', 0))
server.listen()
def drain():
    conn, _ = server.accept()
    while conn.recv(1 << 16):
        pass
reader = threading.Thread(target=drain)
reader.start()
client = socket.create_connection(server.getsockname())
client.sendall(b'x' * (mib << 20))
client.close()
reader.join()
for i in range(files):
    open('/tmp/.tg-count-%d' % i, 'w').close()
for i in range(files):
    os.unlink('/tmp/.tg-count-%d' % i)
for _ in range(forks):
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
libc = ctypes.CDLL(None)
for _ in range(segments):
    libc.shmctl(libc.shmget(0, 4096, 0o1600), 0, None)
print(json.dumps({'done': True}))
"""
"""Move the counters by amounts the caller names: MiB through loopback, files made in /tmp, forks,
System V segments made and removed."""

ALLOCATE = r"""
import json, sys
block = bytearray(int(sys.argv[1]) << 20)
for i in range(0, len(block), 4096):
    block[i] = 1
print(json.dumps({'done': True}))
"""
"""Touch ``argv[1]`` MiB of memory, then exit."""

MITIGATION = (
    "mitigated: the pool never hands a sandbox to another episode of a group it has served "
    "(reset.group-separation)"
)
LO_MIB, FILES, FORKS, SEGMENTS, PEAK_MIB = 4, 300, 40, 50, 120


async def _read(sandbox: Any) -> dict[str, Any]:
    seen: dict[str, Any] = await probes.run_probe(sandbox, COUNTERS)
    return seen


async def _carry(t: Target, key: str, what: str, moved: int, move: tuple[int, int, int, int]) -> str:
    sb = await t.current()
    before = (await _read(sb))[key]
    await probes.run_probe(sb, MOVE_COUNTERS, *(str(n) for n in move), timeout=60)
    moved_to = (await _read(sb))[key]
    if moved_to < before + moved:
        raise Fail(f"the probe did not move {what} ({before} -> {moved_to}); it cannot vouch for the reset")
    again, same = await t.recycle()
    if not same:
        return f"closed: the pool made a new sandbox instead of reusing this one ({what} starts afresh)"
    after = (await _read(again))[key]
    if after >= before + moved:
        raise Residual(f"{what} {before} -> {moved_to} in one episode, {after} in the next; {MITIGATION}")
    return f"closed: {what} {before} -> {moved_to} in one episode, {after} in the next"


async def lo_bytes(t: Target) -> str:
    return await _carry(t, "lo_bytes", "loopback bytes", LO_MIB << 20, (LO_MIB, 0, 0, 0))


async def inodes(t: Target) -> str:
    return await _carry(t, "inode", "the next inode number in /tmp", FILES, (0, FILES, 0, 0))


async def pids(t: Target) -> str:
    return await _carry(t, "pid", "the next process id", FORKS, (0, 0, FORKS, 0))


async def ipc_ids(t: Target) -> str:
    return await _carry(t, "ipc_id", "the next System V shared memory id", SEGMENTS, (0, 0, 0, SEGMENTS))


def _switches_probe(pids: list[int]) -> str:
    return (
        "import json\nout = {}\n"
        f"for pid in {pids!r}:\n"
        "    status = open(f'/proc/{pid}/status').read()\n"
        "    out[str(pid)] = int(status.split('voluntary_ctxt_switches:')[1].split()[0])\n"
        "print(json.dumps(out))\n"
    )


RESTARTS, REQUESTS = 10, 30


async def process_counters(t: Target) -> str:
    """The agent's and the zygote's context switches, moved by one episode, read by the next."""
    sb = await t.current()
    zygote = sb.channel.hello.get("zygote")
    pids = [1] + ([int(zygote)] if zygote else [])
    probe = _switches_probe(pids)
    before = await probes.run_probe(sb, probe)
    for _ in range(REQUESTS):
        await sb.run(["true"])
    py = await sb.python()
    for _ in range(RESTARTS if zygote else 0):
        await py.execute("import os; os._exit(0)")  # the next cell forks a new interpreter
        await py.execute("0")
    moved = await probes.run_probe(sb, probe)
    names = {"1": "the agent's"} | ({str(zygote): "the zygote's"} if zygote else {})
    if any(moved[k] <= before[k] for k in before):
        raise Fail(
            f"the probe did not move the counters ({before} -> {moved}); it cannot vouch for the reset"
        )
    again, same = await t.recycle()
    if not same:
        return "closed: the pool made a new sandbox instead of reusing this one"
    after = await probes.run_probe(again, probe)
    seen = "; ".join(f"{names[k]} {before[k]} -> {moved[k]}, {after[k]} in the next" for k in before)
    if any(after[k] >= moved[k] for k in before):
        raise Residual(f"context switches: {seen}; {MITIGATION}")
    return f"closed: context switches: {seen}"


async def memory_peak(t: Target) -> str:
    sb = await t.current()
    fresh = (await _read(sb))["memory_peak"]
    r = await sb.run(["python3", "-c", ALLOCATE, str(PEAK_MIB)], timeout=60)
    if r.exit_code != 0:
        raise Fail(f"the allocation probe failed: {(r.stderr or r.stdout).strip()[-200:]}")
    dirty = (await _read(sb))["memory_peak"]
    if fresh is None and dirty is None:
        return "closed: not visible in the sandbox (no memory cgroup file, no /sys/fs/cgroup)"
    if dirty is None or dirty < PEAK_MIB << 20:
        raise Fail(
            f"the probe did not see its own {PEAK_MIB} MiB in the peak ({dirty}); it cannot vouch for the reset"
        )
    again, same = await t.recycle()
    if not same:
        return "closed: the pool made a new sandbox instead of reusing this one"
    after = (await _read(again))["memory_peak"] or 0
    claim = (again.handle.get("counters") or {}).get(
        "memory_peak", f"the {t.backend_name} backend does not reset it"
    )
    mib = f"{fresh >> 20 if fresh else '?'} MiB fresh, {dirty >> 20} MiB after {PEAK_MIB} MiB, {after >> 20} MiB in the next episode"
    if after >= PEAK_MIB << 20:
        if claim == counters.RESET:
            raise Fail(f"the host reset the memory peak, yet the next episode read it: {mib}")
        raise Residual(f"{mib} ({claim}); {MITIGATION}")
    return f"closed: {mib} (reset from the host)" if claim == counters.RESET else f"closed: {mib}"


async def group_separation(t: Target) -> str:
    """Two episodes of one group in turn get two sandboxes; another group's episode reuses one."""
    await t.close()
    await t.backend.settle()
    groups = [{GROUP_LABEL: f"audit-{t.kind}-{name}"} for name in ("g", "h")]
    held: list[Any] = []
    try:
        first = await t.backend.acquire(t.kind, episode_id="audit-group-g0", labels=groups[0])
        await t.backend.release(first)
        await t.backend.settle()
        sibling = await t.backend.acquire(t.kind, episode_id="audit-group-g1", labels=groups[0])
        held.append(sibling)
        if sibling.id == first.id:
            raise Fail("a second episode of the same group got the sandbox the first had just used")
        other = await t.backend.acquire(t.kind, episode_id="audit-group-h0", labels=groups[1])
        held.append(other)
        reused = "reused it" if other.id == first.id else "got another (the pool had not kept it)"
    finally:
        for sb in held:
            await t.backend.release(sb)
        await t.backend.settle()
    return f"a sibling of the same {GROUP_LABEL} got a new sandbox; an episode of another group {reused}"
