"""Plugins: a throw-away plugin package installed for real, broken plugins isolated, the public API."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import toolgym
from toolgym import hookimpl, tool
from toolgym.core.registry import Registry

REPO = Path(__file__).resolve().parents[2]

PLUGIN_CODE = '''\
from toolgym import hookimpl, tool


@tool
def shout(text: str, times: int = 1) -> str:
    """Repeat text in capitals."""
    return " ".join([text.upper()] * times)


@hookimpl
def toolgym_tools():
    return [shout]
'''


def _make_plugin_package(root: Path, name: str, code: str) -> Path:
    pkg = root / name
    (pkg / name).mkdir(parents=True)
    (pkg / name / "__init__.py").write_text(code)
    (pkg / "pyproject.toml").write_text(
        textwrap.dedent(f"""\
        [build-system]
        requires = ["setuptools>=61"]
        build-backend = "setuptools.build_meta"

        [project]
        name = "{name}"
        version = "0.0.1"

        [project.entry-points.toolgym]
        {name} = "{name}"
    """)
    )
    return pkg


def test_third_party_plugin_package_is_found_and_callable(tmp_path: Path) -> None:
    pkg = _make_plugin_package(tmp_path, "toolgym_shout", PLUGIN_CODE)
    site = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(site),
            str(pkg),
        ],
        check=True,
        capture_output=True,
    )
    env = {**os.environ, "PYTHONPATH": str(site)}
    listed = subprocess.run(
        [sys.executable, "-m", "toolgym", "tools", "list", "--json"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    tools = {t["name"]: t for t in json.loads(listed.stdout)}
    assert tools["shout"]["plugin"] == "toolgym_shout"
    assert tools["shout"]["schema"]["function"]["parameters"]["required"] == ["text"]
    tried = subprocess.run(
        [sys.executable, "-m", "toolgym", "tools", "try", "shout", "--args", '{"text": "hi", "times": 2}'],
        env=env,
        capture_output=True,
        text=True,
    )
    assert tried.returncode == 0 and tried.stdout.strip() == "HI HI", tried.stderr
    assert "ok in" in tried.stderr


def _module(name: str, **attrs: object) -> types.ModuleType:
    mod = types.ModuleType(name)
    for k, v in attrs.items():
        setattr(mod, k, v)
    return mod


@tool
def dup() -> str:
    """A tool."""
    return "a"


def test_broken_plugins_are_isolated_and_named(tmp_path: Path) -> None:
    @hookimpl
    def good_tools() -> list:
        return [dup]

    @hookimpl
    def also_dup() -> list:
        return [dup]

    @hookimpl
    def raises() -> list:
        raise ValueError("bad config")

    @hookimpl
    def not_tools() -> list:
        return ["not a tool"]

    good = _module("good", toolgym_tools=good_tools)
    dupe = _module("dupe", toolgym_tools=also_dup)
    boom = _module("boom", toolgym_tools=raises)
    junk = _module("junk", toolgym_tools=not_tools)
    reg = Registry.load(
        entry_points=False, plugins=[("good", good), ("dupe", dupe), ("boom", boom), ("junk", junk)]
    )
    assert list(reg.tools) == ["dup"] and reg.tools["dup"].plugin == "good"
    errors = {e.plugin: e.reason for e in reg.errors}
    assert set(errors) == {"dupe", "boom", "junk"}
    assert "already provided by plugin 'good'" in errors["dupe"]
    assert "toolgym_tools() raised ValueError: bad config" in errors["boom"]
    assert "not a Tool (decorate the function with @tool)" in errors["junk"]


def test_import_error_and_bad_schema_via_cli(tmp_path: Path) -> None:
    (tmp_path / "broken_import.py").write_text("import does_not_exist\n")
    (tmp_path / "bad_schema.py").write_text(
        textwrap.dedent('''\
        from toolgym import hookimpl, tool

        class Opaque:
            pass

        @tool
        def weird(x: Opaque) -> str:
            """Takes an opaque thing."""

        @hookimpl
        def toolgym_tools():
            return [weird]
    ''')
    )
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "TOOLGYM_PLUGINS": "broken_import,bad_schema"}
    res = subprocess.run(
        [sys.executable, "-m", "toolgym", "tools", "list", "--json"], env=env, capture_output=True, text=True
    )
    assert res.returncode == 0, res.stderr
    assert (
        "plugin 'broken_import': could not be loaded" in res.stderr
        and "No module named 'does_not_exist'" in res.stderr
    )
    assert "plugin 'bad_schema'" in res.stderr and "an argument type has no JSON schema" in res.stderr
    names = {t["name"] for t in json.loads(res.stdout)}
    assert "weird" not in names  # the other plugins still load (their tools are listed)


PUBLIC_API = sorted(
    [
        "Action",
        "ActionKind",
        "AuditCheck",
        "BackgroundServer",
        "ChatBackend",
        "ChatResult",
        "CliCommand",
        "ConfigError",
        "DEFAULT_PROFILES",
        "EngineConfig",
        "EngineStats",
        "Env",
        "EnvSpec",
        "EpisodeContext",
        "EpisodeRequest",
        "ExecResult",
        "GenerationRequest",
        "GenerationResult",
        "GiB",
        "ImageNeed",
        "LLMBackend",
        "LLMBackendSpec",
        "LLMCall",
        "LLMError",
        "Message",
        "ModelPolicy",
        "PathOutsideSandboxError",
        "PluginError",
        "PythonResult",
        "Registry",
        "RolloutEngine",
        "RunningDigest",
        "SamplingConfig",
        "SamplingParams",
        "Sandbox",
        "SandboxBackend",
        "SandboxBackendSpec",
        "SandboxBrokenError",
        "SandboxError",
        "SandboxProfile",
        "ScriptedPolicy",
        "Segment",
        "Status",
        "Step",
        "StepResult",
        "Task",
        "Tool",
        "ToolArgumentError",
        "ToolCall",
        "ToolCallRecord",
        "ToolExecutionError",
        "ToolOutput",
        "ToolParser",
        "ToolTaskEnv",
        "ToolgymError",
        "Trajectory",
        "UnknownNameError",
        "__version__",
        "capture_thread_output",
        "digest",
        "get_registry",
        "hookimpl",
        "hookspec",
        "image_part",
        "load_object",
        "make_policy",
        "parse_flag",
        "plan_episodes",
        "register_profile",
        "split_position",
        "store_image",
        "tool",
    ]
)


def test_public_api_surface_is_deliberate() -> None:
    """Fails when the public surface changes by accident: update PUBLIC_API on purpose."""
    assert sorted(toolgym.__all__) == PUBLIC_API
    for name in toolgym.__all__:
        assert hasattr(toolgym, name)
