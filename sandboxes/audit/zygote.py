"""The Python session's zygote (``agent/zygote.py``): the one process besides the agent that lives
through the resets, forking each episode's interpreter. Checked from inside: it is out of the
episode's reach (its memory, descriptors and environment closed, the signals that would end it
blocked) and a forked interpreter carries nothing of the episode before; and from the host: a
zygote an episode killed is caught by the check of the reset, and the sandbox made anew."""

from __future__ import annotations

import json

from toolgym.sandboxes.audit.rows import Fail, Skip
from toolgym.sandboxes.audit.target import Target, poisoned

REACH = r"""
import json, os, signal, time
z = ZYGOTE
seen = {}
for name, mode in (('mem', 'r+b'), ('environ', 'rb'), ('fd/0', 'rb')):
    try:
        open(f'/proc/{z}/{name}', mode).close()
        seen[name] = 'open'
    except OSError as exc:
        seen[name] = exc.strerror
for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1):
    os.kill(z, sig)
time.sleep(0.1)
seen['state'] = open(f'/proc/{z}/stat').read().split()[2]
print(json.dumps(seen))
"""
"""From a cell: the zygote's ``/proc`` files (closed when it is not dumpable), then signals."""


async def zygote(t: Target) -> str:
    sb = await t.current()
    pid = sb.channel.hello.get("zygote")
    if not pid:
        raise Skip(f"the {t.kind} kind forks no interpreter from a zygote (python_zygote off)")
    py = await sb.python()
    r = await py.execute(REACH.replace("ZYGOTE", str(int(pid))) + "tg_zygote_mark = 1", timeout=30)
    if r.error is not None:
        raise Fail(f"the probe cell failed: {r.error}")
    seen = json.loads(r.stdout.strip().splitlines()[-1])
    state = seen.pop("state")
    opened = [name for name, how in seen.items() if how == "open"]
    if opened:
        raise Fail(f"the zygote's /proc/{pid}/{' and '.join(opened)} opened from a cell (it is dumpable)")
    if state not in "SR":
        raise Fail(f"the zygote is in state {state!r} after SIGINT, SIGTERM, SIGHUP and SIGUSR1")
    second, same = await t.recycle()
    if not same:
        raise Fail("the pool made a new sandbox after an episode that left the zygote alone")
    if second.channel.hello.get("zygote") != pid:
        raise Fail("the zygote changed across a reset")
    left = await (await second.python()).execute("tg_zygote_mark")
    if left.error is None or "NameError" not in left.error:
        raise Fail(
            "the next episode's interpreter, forked from the zygote, still holds the last one's variable"
        )
    before = poisoned(t.backend)
    killed = await second.run(["python3", "-c", f"import os; os.kill({int(pid)}, 9)"])
    if killed.exit_code != 0:
        raise Fail(f"could not signal the zygote from a command: {killed.stderr.strip()[-200:]}")
    third, same = await t.recycle()
    if same or poisoned(t.backend) != before + 1:
        raise Fail("a sandbox whose zygote an episode killed was reused")
    if (await (await third.python()).execute("6 * 7")).value != "42":
        raise Fail("the sandbox made anew after the zygote was killed does not run cells")
    return (
        f"zygote {pid}: /proc mem, environ and fd closed; alive after 4 signals; the next interpreter "
        "forked without the last one's variable; killed by an episode: caught from the host, sandbox made anew"
    )
