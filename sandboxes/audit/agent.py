"""Checks of the in-sandbox agent's isolation from the code it runs: it is PID 1 and
alone, not dumpable, its seccomp filter refuses the calls that would reach it, and the attack that
took it over before (``hijack_probe``) fails."""

from __future__ import annotations

import asyncio
import json
import re

from toolgym.sandboxes.audit import hostside, probes
from toolgym.sandboxes.audit.hijack_probe import probe_cell
from toolgym.sandboxes.audit.rows import Fail, Skip
from toolgym.sandboxes.audit.target import Target

AGENT_ALONE = r"""
import json, os
me = os.getpid()
procs = {}
for p in os.listdir('/proc'):
    if p.isdigit() and int(p) != me and (int(p) != os.getppid() or p == '1'):
        try:
            procs[p] = open('/proc/%s/cmdline' % p, 'rb').read().replace(b'\0', b' ').decode()[:80]
        except OSError:
            pass
access = {}
for name in ('mem', 'environ'):
    try:
        open('/proc/1/' + name, 'rb').read(1)
        access[name] = 'readable'
    except OSError as exc:
        access[name] = exc.strerror
print(json.dumps({'procs': procs, 'access': access}))
"""
"""Processes besides this probe and its parent (unless that is PID 1); PID 1's memory."""


async def pid1(t: Target) -> str:
    sb = await t.current()
    seen = await probes.run_probe(sb, AGENT_ALONE)
    procs = seen["procs"]
    if sb.channel.agent_pid != 1 or not re.search(r" /opt/toolgym/(\S+/)?main\.py ", procs.get("1", "")):
        raise Fail(f"the agent is PID {sb.channel.agent_pid}; PID 1 is {procs.get('1', 'absent')!r}")
    others = {
        p: c for p, c in procs.items() if p != "1" and "/opt/toolgym/" not in c
    }  # the agent's own sessions
    if others:
        raise Fail(f"processes besides the agent: {others}")
    readable = [n for n, v in seen["access"].items() if v == "readable"]
    if readable:
        raise Fail(f"/proc/1/{' and '.join(readable)} readable from a command (the agent is dumpable)")
    return f"agent is PID 1 and alone; /proc/1/mem: {seen['access']['mem']}"


async def seccomp(t: Target) -> str:
    sb = await t.current()
    seen = await probes.run_probe(sb, probes.SECCOMP)
    if "machine" in seen:
        raise Fail(f"the agent has no seccomp filter for {seen['machine']}")
    allowed = sorted(name for name, how in seen.items() if how == "allowed")
    if allowed:
        raise Fail(f"allowed: {', '.join(allowed)} (the agent's filter is missing)")
    hardening = sb.channel.hello.get("hardening") or {}
    if hardening.get("seccomp") != "installed":
        raise Fail(f"the agent reports its filter {hardening.get('seccomp')!r}")
    return f"{len(seen)} calls refused ({', '.join(sorted(seen))})"


async def host_view(t: Target) -> str:
    sb = await t.current()
    pid = hostside.agent_pid_here(sb)
    if pid is None:
        raise Skip("the engine runs on another machine: its /proc is not visible from here")
    view = await asyncio.to_thread(hostside.process_view, pid)
    status = view["status"]
    problems = []
    if status.get("Seccomp") != "2":
        problems.append(f"Seccomp mode {status.get('Seccomp')} (2: filtered)")
    if status.get("NoNewPrivs") != "1":
        problems.append(f"NoNewPrivs {status.get('NoNewPrivs')}")
    if status.get("CapEff", "0").strip("0"):
        problems.append(f"CapEff {status.get('CapEff')}")
    uid = int(status.get("Uid", "0").split()[0])
    if view["proc_owner"] != 0 and uid != 0:
        problems.append(f"/proc/{pid}/mem belongs to uid {view['proc_owner']}: the agent is dumpable")
    if problems:
        raise Fail(f"host pid {pid}: " + "; ".join(problems))
    return (
        f"host pid {pid} (uid {uid}): seccomp filters {status.get('Seccomp_filters', '?')}, no_new_privs, "
        "no capabilities, not dumpable"
    )


async def hijack(t: Target) -> str:
    sb = await t.current()
    py = await sb.python()
    r = await py.execute(probe_cell(), timeout=30)
    if r.error is not None:
        raise Fail(f"the attack cell failed: {r.error}")
    report = json.loads(r.stdout.strip().splitlines()[-1])
    if report.get("hijacked"):
        route = next((k for k in ("pidfd_getfd", "ptrace") if "got the channel" in str(report.get(k))), "?")
        raise Fail(f"a tool process took the agent's channel through {route}")
    if report.get("init_mem") == "writable":
        raise Fail("PID 1's memory is writable from a tool process")
    if not report.get("agent"):
        raise Fail(f"the attack did not find the agent: {report}")
    await asyncio.sleep(2.0)  # a hijacker would now stop the agent and answer for it
    if (await sb.run(["echo", "still mine"])).stdout != "still mine\n":
        raise Fail("after the attack the sandbox no longer gives its own answers")
    return f"{report['pidfd_getfd']}; {report['ptrace']}; /proc/1/mem: {report['init_mem']}"
