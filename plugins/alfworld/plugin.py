"""Registers the ALFWorld environments: built-in (two prompt formats) and the real-engine adapter."""

from __future__ import annotations

from toolgym import EnvSpec, hookimpl


@hookimpl
def toolgym_envs() -> list[EnvSpec]:
    return [
        EnvSpec(
            "alfworld",
            "toolgym.plugins.alfworld.env:AlfworldEnv",
            description="Built-in ALFWorld household tasks (six types, seeded rooms, train/eval splits); one command per turn.",
            tags=("env", "alfworld", "embodied", "text-game"),
        ),
        EnvSpec(
            "alfworld-verl",
            "toolgym.plugins.alfworld.env:AlfworldEnv",
            description="Built-in ALFWorld in verl-agent's prompt format: history window, admissible actions, <think>/<action>.",
            kwargs={"prompt": "verl"},
            tags=("env", "alfworld", "embodied", "text-game", "verl-agent"),
        ),
        EnvSpec(
            "alfworld-real",
            "toolgym.plugins.alfworld.real:RealAlfworldEnv",
            description="The real alfworld/TextWorld engine on ALFWorld game files (needs toolgym[alfworld] and the data).",
            tags=("env", "alfworld", "embodied", "text-game", "external"),
        ),
    ]
