"""Registers the demo's built-in task, ``keychain``."""

from __future__ import annotations

from toolgym import EnvSpec, hookimpl


@hookimpl
def toolgym_envs() -> list[EnvSpec]:
    return [
        EnvSpec(
            "keychain",
            "toolgym.plugins.demo.keychain:KeychainEnv",
            description="Follow a chain of keys with a lookup tool, then answer the value (the demo's task; tiny-model sized).",
            tags=("task", "demo", "multi-turn"),
        ),
    ]
