"""Registers the MiniWoB++ environment, as any third-party plugin would."""

from __future__ import annotations

from toolgym import EnvSpec, hookimpl


@hookimpl
def toolgym_envs() -> list[EnvSpec]:
    return [
        EnvSpec(
            "miniwob",
            "toolgym.plugins.miniwob.env:MiniWoBEnv",
            description="MiniWoB++ web tasks (the benchmark's own pages and core.js reward) in a real browser, "
            "through the browser tools; --env-arg task=click-button or tasks=reported.",
            tags=("gui", "browser"),
            scripted_kwargs={"tasks": "solvable"},  # `all` has tasks without a solver
        ),
    ]
