"""Reset checks: a released sandbox comes back indistinguishable from a
fresh one, an earlier episode's attacker does not answer for the next episode, the host does
not take a sandbox's word for its own reset, and a kept session (the browser tools') is spared
only when nothing of the episode's own ran beside it."""

from __future__ import annotations

import json
from typing import Any

from toolgym.sandboxes.audit import probes
from toolgym.sandboxes.audit.hijack_probe import FORGED
from toolgym.sandboxes.audit.rows import Fail
from toolgym.sandboxes.audit.target import Target, poisoned, pools

ESCAPE = (
    "import os, time\nr, w = os.pipe()\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
    "        os.write(w, b'x')\n        time.sleep(300)\n    os._exit(0)\nos.read(r, 1)\n"
)
"""A command that returns once a detached process (its own session, out of the group kill) runs."""


def differences(fresh: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """What ``now`` (a ``FIND``) shows that a fresh sandbox did not, one phrase each."""
    out = []
    for key in sorted(set(fresh) | set(now)):
        a, b = fresh.get(key), now.get(key)
        if a == b:
            continue
        if isinstance(a, dict) and isinstance(b, dict):
            for place in sorted(set(a) | set(b)):
                if a.get(place) != b.get(place):
                    out.append(f"{key} of {place}: {str(b.get(place))[:80]}")
        else:
            out.append(f"{key}: {str(b)[:120]}")
    return out


async def enumeration(t: Target) -> str:
    if t.fresh is None:
        raise Fail(f"could not look at the fresh sandbox: {t.fresh_error}")
    first = await t.current()
    left = await (await first.python()).execute(probes.LEAVE + "\ntg_secret = 'episode 1'\n", timeout=60)
    if left.error is not None:
        raise Fail(f"the leftovers probe failed: {left.error}")
    report = json.loads(left.stdout.strip().splitlines()[-1])
    dirty = await probes.run_probe(first, probes.FIND)
    if dirty == t.fresh or not dirty["processes"]:
        raise Fail("the probe does not see its own leftovers; it cannot vouch for the reset")
    await (await first.shell()).run("export TG_MARK=episode-1; cd /tmp")
    second, same = await t.recycle()
    if not same:
        return (
            f"marks in {len(report['marks'])} places; the pool made a new sandbox instead of reusing this one"
        )
    leaks = differences(t.fresh, await probes.run_probe(second, probes.FIND))
    r = await (await second.python()).execute("tg_secret")
    if r.error is None or "NameError" not in r.error:
        leaks.append("the Python session kept a variable")
    out = (await (await second.shell()).run('echo "[$TG_MARK]"; pwd')).stdout
    if out != "[]\n/workspace\n":
        leaks.append(f"the shell session kept its state: {out.strip()!r}")
    if leaks:
        raise Fail("the next episode saw " + "; ".join(leaks))
    kinds = ", ".join(k for k, v in report["ipc"].items() if v >= 0)
    return (
        f"marks in {len(report['marks'])} writable places ({', '.join(report['marks'])}), {kinds}, a listener, "
        "session state: none seen after reuse"
    )


async def after_hijack(t: Target) -> str:
    """Run right after ``agent.hijack``: its leftover process is still in the sandbox."""
    _, same = await t.recycle()
    sb = await t.current()
    problems = []
    if (await (await sb.python()).execute("print(6 * 7)")).stdout != "42\n":
        problems.append("print(6 * 7) did not give 42")
    if (await sb.run(["echo", "mine"])).stdout != "mine\n":
        problems.append("echo did not give its own output")
    listing = (await sb.run(["ps", "-eo", "pid,args"])).stdout
    if FORGED in listing or "run_in_cell" in listing or "hijack" in listing:
        problems.append("the attacker's process is still there")
    if problems:
        raise Fail("the next episode: " + "; ".join(problems))
    return f"{'the same sandbox' if same else 'a new sandbox'} gave the next episode its own results"


KEPT_SETUP = "import os\ntg_kept = 'episode 1'\ndef tg_renew():\n    return True\n"
RENEW = "tg_renew()"


async def kept_session(t: Target) -> str:
    """The kept session (``AgentSandbox.kept_python``) outlives a reset after an episode that ran
    no code of its own, and dies with the rest after one that did (a detached process here)."""
    sb = await t.current()
    first = await (await sb.kept_python(renew=RENEW)).execute(KEPT_SETUP + "os.getpid()")
    if first.error is not None:
        raise Fail(f"the kept session did not run: {first.error}")
    second, same = await t.recycle()
    if not same:
        return "the pool made a new sandbox instead of reusing this one: nothing was kept"
    again = await (await second.kept_python(renew=RENEW)).execute("os.getpid(), tg_kept")
    if again.error is not None or again.value != f"({first.value}, 'episode 1')":
        raise Fail(
            f"a renewed kept session was not kept after an episode that ran no code: {again.error or again.value}"
        )
    await second.run(["python3", "-c", ESCAPE])
    third, same = await t.recycle()
    if not same:
        return f"kept (pid {first.value}) when no code ran; the sandbox was made anew after code ran"
    left = await (await third.kept_python(renew=RENEW)).execute("tg_kept")
    if left.error is None or "NameError" not in left.error:
        raise Fail("the kept session survived the reset of an episode that ran code of its own")
    processes = (await third.stats())["processes"]
    if processes:
        raise Fail(f"{processes} processes of the episode that ran code survived beside the kept session")
    return (
        f"kept (the same interpreter, pid {first.value}) after an episode that ran no code; killed with "
        "the rest, a detached process included, after one that did"
    )


async def verified_from_host(t: Target) -> str:
    """A sandbox whose agent says 'clean' while a process is left (as a hijacked agent would) must
    not be reused: the host looks for itself."""
    sb = await t.current()
    await sb.run(["python3", "-c", ESCAPE])

    async def lying_reset(**_: Any) -> dict[str, Any]:
        return {"processes": 0, "disk": {}}

    sb.reset = lying_reset
    before = poisoned(t.backend)
    t.sandbox = None
    await t.backend.release(sb)
    await t.backend.settle()
    if any(s.id == sb.id for p in pools(t.backend) for s in p.live):
        raise Fail("a sandbox whose agent lied about its reset was kept for reuse")
    how = (sb.handle.get("pids") or {}).get("via", "proc")
    if poisoned(t.backend) != before + 1:
        raise Fail("the lying sandbox was not counted as poisoned")
    return f"a lying reset was caught from outside (host {'/proc' if how == 'proc' else 'docker top'}) and the sandbox destroyed"
