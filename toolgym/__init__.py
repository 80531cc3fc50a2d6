"""toolgym: a gym for training tool-using LLM agents with reinforcement learning.

The public API is what ``__all__`` lists; everything else may change without notice. Plugins,
built-in or third-party, import from here (``from toolgym import tool, hookimpl, ConfigError``);
the in-memory test doubles live in :mod:`toolgym.testing`. ``tests/test_public_api.py`` keeps the
built-in plugins on this face and ``__all__`` equal to what the module defines.

Names whose modules ``import toolgym`` would not otherwise load (the HTTP
server helper, sandbox profiles) are imported on first use, so the face costs no import time.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from toolgym.core.commands import AuditCheck, CliCommand
from toolgym.core.env.contract import Env, EpisodeContext, StepResult
from toolgym.core.env.digest import RunningDigest, digest
from toolgym.core.env.draw import split_position
from toolgym.core.env.spec import EnvSpec, load_object, parse_flag
from toolgym.core.env.tool_task import Task, ToolTaskEnv
from toolgym.core.errors import (
    ConfigError,
    LLMError,
    PathOutsideSandboxError,
    PluginError,
    SandboxBrokenError,
    SandboxError,
    ToolArgumentError,
    ToolExecutionError,
    ToolgymError,
    UnknownNameError,
)
from toolgym.core.hookspecs import hookimpl, hookspec
from toolgym.core.llm.base import ChatBackend, LLMBackend, LLMBackendSpec
from toolgym.core.parsing.base import ToolParser
from toolgym.core.registry import Registry, get_registry
from toolgym.core.rollout.config import EngineConfig, SamplingConfig
from toolgym.core.rollout.engine import EngineStats, EpisodeRequest, RolloutEngine, plan_episodes
from toolgym.core.rollout.policies import make_policy
from toolgym.core.rollout.policy import ModelPolicy, ScriptedPolicy
from toolgym.core.sandbox import ImageNeed, PythonResult, Sandbox, SandboxBackend, SandboxBackendSpec
from toolgym.core.tokens.images import image_part, store_image
from toolgym.core.tools import Tool, ToolOutput, tool
from toolgym.core.trajectory import LLMCall, Segment, Status, Step, ToolCallRecord, Trajectory
from toolgym.core.types import (
    Action,
    ActionKind,
    ChatResult,
    ExecResult,
    GenerationRequest,
    GenerationResult,
    Message,
    SamplingParams,
    ToolCall,
)
from toolgym.core.util.threadio import capture_thread_output

if TYPE_CHECKING:
    from toolgym.core.sandbox_profiles import DEFAULT_PROFILES, GiB, SandboxProfile, register_profile
    from toolgym.core.util.http_server import BackgroundServer

__version__ = "0.1.0"

_LAZY = {
    "BackgroundServer": "toolgym.core.util.http_server",
    "DEFAULT_PROFILES": "toolgym.core.sandbox_profiles",
    "GiB": "toolgym.core.sandbox_profiles",
    "SandboxProfile": "toolgym.core.sandbox_profiles",
    "register_profile": "toolgym.core.sandbox_profiles",
}
"""Public name → the module it is imported from on first use (PEP 562)."""


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'toolgym' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "DEFAULT_PROFILES",
    "Action",
    "ActionKind",
    "AuditCheck",
    "BackgroundServer",
    "ChatBackend",
    "ChatResult",
    "CliCommand",
    "ConfigError",
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
