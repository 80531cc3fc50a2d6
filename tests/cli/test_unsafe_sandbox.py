"""An in-process sandbox backend never runs a model's code unless the user says so.

The attack: ``toolgym collect --sandbox-backend memory`` with a model whose tool call reads a
canary ``OPENAI_API_KEY`` from the orchestrator's environment and writes it to a file on the host.
The memory backend runs Python cells inside the orchestrator, so without the check the canary
lands on disk. Now the CLI refuses with one sentence naming the flag; with
``--unsafe-in-process-sandbox`` it runs; ``--model scripted`` (the environment's own solver) needs
no flag; ``--help`` lists the backend with its warning. The Python API (``collect``), the
trainers' checks (``toolgym train``, local and verl) and ``reverify`` refuse it alike, and
``auto`` never picks a backend that does not isolate.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.cli.helpers import Runner
from toolgym import EnvSpec, Task, ToolTaskEnv, hookimpl, tool
from toolgym.core.errors import ConfigError

CANARY = "sk-canary-42-do-not-leak"


@tool(sandbox="python")
async def run_py(code: str, *, sandbox: Any) -> str:
    """Run Python code in the sandbox's session; return what it prints."""
    result = await (await sandbox.python()).execute(code)
    return str(result.stdout) + str(result.error or "")


class LeakEnv(ToolTaskEnv):
    tools = [run_py]
    tasks = [Task("t", "Run some Python, then answer done.", "done")]


class LeakPlugin:
    @hookimpl
    def toolgym_tools(self) -> list[Any]:
        return [run_py]

    @hookimpl
    def toolgym_envs(self) -> list[EnvSpec]:
        return [EnvSpec("leak", LeakEnv)]


def _leak_call(target: Path) -> str:
    code = f"import os, pathlib; pathlib.Path({str(target)!r}).write_text(os.environ.get('OPENAI_API_KEY', 'none')); print('wrote')"
    return "<tool_call>" + json.dumps({"name": "run_py", "arguments": {"code": code}}) + "</tool_call>"


@pytest.fixture
def leak_cli(cli: Runner, monkeypatch: pytest.MonkeyPatch) -> Runner:
    from tests.core.helpers import TestPlugin
    from toolgym.cli import common
    from toolgym.core.builtin import parsers as builtin
    from toolgym.core.registry import Registry
    from toolgym.sandboxes import plugin as sandbox_plugin

    registry = Registry.load(
        entry_points=False,
        plugins=[
            ("parsers", builtin),
            ("sandboxes", sandbox_plugin),
            ("leak", LeakPlugin()),
            ("test", TestPlugin()),
        ],
    )
    monkeypatch.setattr(common, "get_registry", lambda: registry)
    monkeypatch.setenv("OPENAI_API_KEY", CANARY)
    return cli


def _collect(cli: Runner, out: Path, target: Path, *extra: str) -> Any:
    return cli(
        "collect",
        "--env",
        "leak",
        "--model",
        "sim:0",
        "--backend-arg",
        f"text={_leak_call(target)}",
        "--max-turns",
        "1",
        "--sandbox-backend",
        "memory",
        "--no-progress",
        "-n",
        "1",
        "--out",
        out,
        *extra,
    )


def test_collect_refuses_the_memory_backend_for_a_model(leak_cli: Runner, tmp_path: Path) -> None:
    target = tmp_path / "stolen.txt"
    r = _collect(leak_cli, tmp_path / "out", target)
    assert not target.exists(), f"the model's code ran in the orchestrator and wrote {target.read_text()!r}"
    assert r.code == 2, r.text
    assert (
        "sandbox backend 'memory' runs the model's tool calls inside this process with no isolation" in r.text
    )
    assert "--unsafe-in-process-sandbox" in r.text and "use docker or local" in r.text


def test_with_the_unsafe_flag_it_runs(leak_cli: Runner, tmp_path: Path) -> None:
    target = tmp_path / "stolen.txt"
    r = _collect(leak_cli, tmp_path / "out", target, "--unsafe-in-process-sandbox")
    assert r.code == 0, r.text
    assert target.read_text() == CANARY, (
        "told to, the in-process backend ran the model's code (that is what the flag accepts)"
    )


def test_the_scripted_solver_may_use_it_without_the_flag(leak_cli: Runner, tmp_path: Path) -> None:
    r = leak_cli(
        "collect",
        "--env",
        "counter",
        "--model",
        "scripted",
        "--sandbox-backend",
        "memory",
        "--no-progress",
        "-n",
        "1",
        "--out",
        tmp_path / "out",
    )
    assert r.code == 0, r.text


def test_help_lists_the_backend_with_its_warning(leak_cli: Runner, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "400")
    r = leak_cli("collect", "--help")
    assert (
        "memory (in-process test double: NO isolation" in r.text and "--unsafe-in-process-sandbox" in r.text
    ), r.text


def _api(tmp_path: Path, target: Path, **options: Any) -> Any:
    from toolgym.collect.run import CollectOptions, collect
    from toolgym.core.builtin import parsers as builtin
    from toolgym.core.llm.local.tiny import load_tiny_tokenizer
    from toolgym.core.llm.testing import MockLLMBackend
    from toolgym.core.registry import Registry
    from toolgym.core.rollout.config import EngineConfig
    from toolgym.core.rollout.policy import ModelPolicy, ScriptedPolicy
    from toolgym.core.tokens.chat import ChatFormat
    from toolgym.sandboxes import plugin as sandbox_plugin

    registry = Registry.load(
        entry_points=False,
        plugins=[("parsers", builtin), ("sandboxes", sandbox_plugin), ("leak", LeakPlugin())],
    )
    cfg = EngineConfig(max_turns=1)
    tok = load_tiny_tokenizer("qwen")
    scripted = options.pop("scripted", False)
    policy = (
        ScriptedPolicy(ChatFormat(tok))
        if scripted
        else ModelPolicy(MockLLMBackend(tok, lambda _p, _i: _leak_call(target)), cfg)
    )
    opts = CollectOptions(
        env="leak", out=tmp_path / "out", episodes=1, engine=cfg, sandbox_backend="memory", **options
    )
    return asyncio.run(collect(opts, registry=registry, policy=policy))


def test_the_python_api_refuses_it_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", CANARY)
    target = tmp_path / "stolen.txt"
    with pytest.raises(ConfigError, match="unsafe_in_process_sandbox=True in CollectOptions"):
        _api(tmp_path, target)
    assert not target.exists()
    result = _api(tmp_path, target, unsafe_in_process_sandbox=True)
    assert result.written == 1 and target.read_text() == CANARY
    _api(tmp_path / "scripted", target, scripted=True)  # the env's own solver: allowed


def test_train_refuses_it_unless_the_setting_says_so() -> None:
    from toolgym.training.local.config import RLConfig
    from toolgym.training.runner import check_environment as local_check
    from toolgym.training.verl.compose import check_environment as verl_check
    from toolgym.training.verl.settings import ToolgymSettings

    rl = RLConfig(env="math-python")
    with pytest.raises(ConfigError, match=r"toolgym\.unsafe_in_process_sandbox=true"):
        local_check(rl, "memory")
    local_check(rl, "memory", unsafe_in_process=True)
    with pytest.raises(ConfigError, match=r"toolgym\.unsafe_in_process_sandbox=true"):
        verl_check(ToolgymSettings(env="math-python", sandbox_backend="memory"))
    verl_check(ToolgymSettings(env="math-python", sandbox_backend="memory", unsafe_in_process_sandbox=True))


def test_reverify_refuses_it(leak_cli: Runner, tmp_path: Path) -> None:
    done = leak_cli(
        "collect",
        "--env",
        "counter",
        "--model",
        "scripted",
        "--sandbox-backend",
        "none",
        "--no-progress",
        "-n",
        "1",
        "--out",
        tmp_path / "out",
    )
    assert done.code == 0, done.text
    r = leak_cli("reverify", tmp_path / "out", "--sandbox-backend", "memory")
    assert r.code == 2 and "--unsafe-in-process-sandbox" in r.text, r.text


def test_auto_never_picks_a_backend_that_does_not_isolate() -> None:
    from toolgym.core.registry import Registry
    from toolgym.core.sandbox import SandboxBackendSpec, open_sandbox_backend

    class Fake:
        @hookimpl
        def toolgym_sandbox_backends(self) -> list[SandboxBackendSpec]:
            return [
                SandboxBackendSpec(
                    name="inproc", factory=lambda **_: "inproc", priority=1000, isolates=False
                ),
                SandboxBackendSpec(name="isolated", factory=lambda **_: "isolated", priority=0),
            ]

    registry = Registry.load(entry_points=False, plugins=[("fake", Fake())])
    assert open_sandbox_backend(registry, "auto") == "isolated"  # type: ignore[comparison-overlap]
    assert open_sandbox_backend(registry, "inproc") == "inproc", "by name it still opens (the callers decide)"  # type: ignore[comparison-overlap]
    assert os.environ.get("OPENAI_API_KEY") != CANARY
