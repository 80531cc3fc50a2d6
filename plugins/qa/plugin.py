"""Registers the tool-use QA tasks."""

from __future__ import annotations

from toolgym import EnvSpec, hookimpl


@hookimpl
def toolgym_envs() -> list[EnvSpec]:
    return [
        EnvSpec(
            "math-python",
            "toolgym.plugins.qa.math.env:MathPythonEnv",
            description="Generated math problems solved with a persistent Python tool; exact-answer reward.",
            tags=("task", "math", "python"),
        ),
    ]
