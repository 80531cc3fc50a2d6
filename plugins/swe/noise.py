"""Wrong or exploratory turns for SWE episodes: the noise of a scripted-plus-noise policy.

``ScriptedPolicy(noise=p, noise_action=noise_turn)`` plays, with probability ``p`` per turn, one
of these instead of the oracle's next turn, so a group of scripted rollouts drifts apart the way
sampled rollouts of a half-trained model do: looking around (a view of a file of the repository,
``git status``, a test run, a search for a name from the issue), or a stray edit (a comment line
appended to a source file, which changes the repository diff for the rest of the episode and may
break the oracle's later edits). The menu is small on purpose: sampled agents repeat the same few
moves, which is what makes GiGPO's anchor states recur. Used by ``bench/swe_anchor_repeat.py``.
"""

from __future__ import annotations

import random
import re
from typing import Any

from toolgym.plugins.swe.datasets import base_files
from toolgym.plugins.swe.oracle import WORKDIR, call

LOOK = (
    "cd /workspace && git status --short",
    "cd /workspace && ls",
    "cd /workspace && git diff",
    "cd /workspace && python3 -m pytest -q -x -p no:cacheprovider 2>&1 | tail -n 5",
)
"""Shell commands that change nothing."""
STRAY = "# TODO: check this\n"


def source_files(env: Any) -> list[str]:
    """The task's non-test Python files (relative paths), sorted; empty for image tasks."""
    task = env.task
    if task is None or not task.shipped:
        return []
    return sorted(p for p in base_files(task) if p.endswith(".py") and "test" not in p.rsplit("/", 1)[-1])


async def noise_turn(env: Any, rng: random.Random) -> str | None:
    """One noisy turn for the SWE environment ``env`` (see the module docstring)."""
    files = source_files(env)
    kind = rng.choice(("view", "look", "search", "edit") if files else ("look", "search"))
    if kind == "view":
        path = rng.choice(files)
        return call(
            "str_replace_editor", {"command": "view", "path": f"{WORKDIR}/{path}"}, "Let me read this file."
        )
    if kind == "look":
        return call(env.bash_tool, {"command": rng.choice(LOOK)}, "Let me look at the repository.")
    if kind == "search":
        words = re.findall(r"\b[a-z_]{5,}\b", env.task.problem_statement if env.task else "") or ["def"]
        return call("search", {"pattern": rng.choice(sorted(set(words)))}, "Let me find where this is used.")
    path = rng.choice(files)
    return call(
        env.bash_tool,
        {"command": f"cd {WORKDIR} && printf '{STRAY.strip()}\\n' >> {path}"},
        "I will leave a note here.",
    )
