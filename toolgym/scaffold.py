"""``toolgym new``: scaffold a pip-installable plugin package with a passing test."""

from __future__ import annotations

import re
from pathlib import Path

from toolgym.core.errors import ConfigError

PYPROJECT = """\
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "toolgym-{name}"
version = "0.1.0"
description = "{what} for toolgym"
requires-python = ">=3.11"
dependencies = ["toolgym"]

[project.entry-points.toolgym]
{name} = "{pkg}.plugin"

[tool.setuptools]
packages = ["{pkg}"]
"""

TOOL_PLUGIN = '''\
"""The {name} tool."""

from toolgym import hookimpl, tool


@tool(timeout_s=10)
async def {name}(text: str, times: int = 1) -> str:
    """Repeat a text in capitals. Replace this with what your tool does.

    Args:
        text: The text to repeat.
        times: How many times.
    """
    return " ".join([text.upper()] * times)


@hookimpl
def toolgym_tools():
    return [{name}]
'''

TOOL_TEST = """\
import asyncio

from toolgym import Registry

from {pkg} import plugin


def test_{name}_is_registered_and_callable():
    registry = Registry.load(entry_points=False, plugins=[("{name}", plugin)])
    tool = registry.tool("{name}")
    assert tool.schema["function"]["parameters"]["required"] == ["text"]
    out = asyncio.run(tool.call({{"text": "hi", "times": 2}}))
    assert not out.error and out.text == "HI HI"


def test_{name}_reports_bad_arguments():
    registry = Registry.load(entry_points=False, plugins=[("{name}", plugin)])
    out = asyncio.run(registry.tool("{name}").call({{"times": "x"}}))
    assert out.error and "missing required argument 'text'" in out.text
"""

ENV_PLUGIN = '''\
"""The {name} environment: walk to the end of a corridor. Replace the rules with your own."""

from toolgym import Env, EnvSpec, StepResult, hookimpl


class {cls}(Env):
    """Reach position ``length`` by replying ``forward`` or ``back``."""

    parser = "env_action"
    max_turns = 20

    def __init__(self, length: int = 3):
        self.length = length
        self.position = 0

    async def reset(self, *, seed, options=None):
        self.position = 0
        return [{{"role": "user", "content": f"You are at 0 of {{self.length}}. Reply forward or back."}}], {{"seed": seed}}

    def anchor(self):
        return str(self.position)

    async def step(self, action):
        command = (action.command or "").strip().lower()
        if command not in ("forward", "back"):
            return StepResult([{{"role": "user", "content": "Reply forward or back."}}], valid=False)
        self.position = max(0, self.position + (1 if command == "forward" else -1))
        done = self.position >= self.length
        return StepResult([{{"role": "user", "content": f"You are at {{self.position}}."}}], reward=1.0 if done else 0.0, terminated=done)

    async def scripted_action(self):
        return "forward"


@hookimpl
def toolgym_envs():
    return [EnvSpec("{name}", {cls}, description="Walk to the end of a corridor.")]
'''

ENV_TEST = """\
import asyncio

from toolgym import EngineConfig, Registry, RolloutEngine, ScriptedPolicy, plan_episodes
from toolgym.core.builtin import parsers
from toolgym.core.tokens.chat import ChatFormat
from toolgym.testing import load_tiny_tokenizer

from {pkg} import plugin


def test_{name}_scripted_policy_solves_it():
    registry = Registry.load(entry_points=False, plugins=[("parsers", parsers), ("{name}", plugin)])
    done = []
    engine = RolloutEngine(
        registry=registry, policy=ScriptedPolicy(ChatFormat(load_tiny_tokenizer())),
        config=EngineConfig(max_turns=10), on_trajectory=done.append,
    )
    asyncio.run(engine.run(plan_episodes("{name}", num_tasks=3, group_size=2)))
    assert len(done) == 6 and all(t.reward == 1.0 and t.terminated for t in done)
"""

README = """\
# toolgym-{name}

{what} for [toolgym](https://github.com/toolgym/toolgym), as a pip-installable plugin.

```bash
pip install -e .
pytest
toolgym {listing}
```
"""


def scaffold(kind: str, name: str, out: Path) -> Path:
    """Write a plugin package for a tool or an environment; returns its directory."""
    if kind not in ("tool", "env"):
        raise ConfigError(f"toolgym new takes 'tool' or 'env', not {kind!r}")
    if not re.fullmatch(r"[a-z][a-z0-9_]{0,40}", name):
        raise ConfigError(f"name {name!r} must be lowercase letters, digits and '_', starting with a letter")
    root = out / f"toolgym-{name.replace('_', '-')}"
    if root.exists():
        raise ConfigError(f"{root} already exists; choose another name or --out")
    pkg = f"toolgym_{name}"
    cls = "".join(p.capitalize() for p in name.split("_")) + "Env"
    what = "A tool" if kind == "tool" else "An environment"
    values = {
        "name": name,
        "pkg": pkg,
        "cls": cls,
        "what": what,
        "listing": "tools list" if kind == "tool" else "envs list",
    }
    files = {
        "pyproject.toml": PYPROJECT,
        "README.md": README,
        f"{pkg}/__init__.py": '"""{what} for toolgym."""\n',
        f"{pkg}/plugin.py": TOOL_PLUGIN if kind == "tool" else ENV_PLUGIN,
        f"tests/test_{name}.py": TOOL_TEST if kind == "tool" else ENV_TEST,
    }
    for rel, template in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(template.format(**values))
    return root
