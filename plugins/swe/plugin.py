"""Registers the ``swe`` environment (its editor, search and submit tools travel with it)."""

from __future__ import annotations

from toolgym import CliCommand, EnvSpec, hookimpl


@hookimpl
def toolgym_envs() -> list[EnvSpec]:
    return [
        EnvSpec(
            "swe",
            "toolgym.plugins.swe.env:SWEEnv",
            description="Fix an issue in a repository in a sandbox (bash, editor, search, submit); graded by the "
            "FAIL_TO_PASS/PASS_TO_PASS tests as SWE-bench does. Shipped bugs, or dataset=<SWE-bench/Gym/smith file>.",
            tags=("env", "swe", "code", "sandbox"),
        ),
    ]


@hookimpl
def toolgym_cli_commands() -> list[CliCommand]:
    return [
        CliCommand(
            "swe",
            "toolgym.plugins.swe.cli:app",
            "SWE tasks: list, build and prune the per-instance images a task file needs.",
        )
    ]
