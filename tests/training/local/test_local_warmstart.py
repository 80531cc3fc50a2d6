"""Warm starts: the searching expert uses no hidden knowledge, mistakes are injected at the set rate,
and `toolgym warmstart` builds once, caches and reuses."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from toolgym.cli import app
from toolgym.core.llm.local.tiny import ensure_tiny_model
from toolgym.core.registry import get_registry
from toolgym.core.types import Action, ActionKind
from toolgym.training.local import warmstart


async def _play(seed: int, *, rate: float = 0.0, max_steps: int = 50, invalid: float = 0.0,
                observations: list[str] | None = None) -> tuple[list[str], float, list[str]]:
    """(commands, reward, the receptacles listed at the start) of one noisy-expert episode;
    ``observations`` receives the environment's answer to each command."""
    from transformers import AutoTokenizer

    from toolgym.core.chat import ChatFormat

    tokenizer = AutoTokenizer.from_pretrained(str(ensure_tiny_model("qwen")))
    policy = warmstart.noisy_policy(ChatFormat(tokenizer), rate=rate, seed=3, invalid_rate=invalid)
    env = get_registry().env("alfworld-verl").make(max_steps=max_steps, split="train")
    await env.reset(seed=seed)
    places = sorted((c[len("go to "):] for c in env.admissible if c.startswith("go to ")), key=warmstart.place_order)
    commands, reward = [], 0.0
    for _ in range(max_steps):
        result = await policy.act(env)
        text = tokenizer.decode(result.output_ids, skip_special_tokens=True)
        command = re.search(r"<action>(.*)</action>", text).group(1)  # type: ignore[union-attr]
        commands.append(command)
        step = await env.step(Action(text, ActionKind.COMMAND, command=command))
        reward += step.reward
        if observations is not None:
            observations.append(str(step.observation[-1]["content"]) if step.observation else "")
        if step.terminated or step.truncated:
            break
    return commands, reward, places


def test_places_are_ordered_by_type_then_number() -> None:
    names = ["cabinet 10", "drawer 1", "cabinet 2", "cabinet 1", "countertop 1", "cabinet 9"]
    assert sorted(names, key=warmstart.place_order) == ["cabinet 1", "cabinet 2", "cabinet 9", "cabinet 10", "countertop 1", "drawer 1"]


def test_the_searching_expert_looks_in_natural_order_and_usually_succeeds() -> None:
    async def run() -> list[tuple[list[str], float, list[str]]]:
        return [await _play(seed) for seed in range(24)]

    episodes = asyncio.run(run())
    for commands, _, places in episodes:
        first_take = next((i for i, c in enumerate(commands) if c.startswith("take ")), len(commands))
        visits = [c[len("go to "):] for c in commands[:first_take] if c.startswith("go to ")]
        # where it looks does not depend on where the object is: natural order (type, number), from the start
        assert visits == places[: len(visits)]
    assert sum(r for _, r, _ in episodes) / len(episodes) >= 0.7


def test_mistakes_are_injected_at_about_the_set_rate() -> None:
    async def run(rate: float) -> list[list[str]]:
        return [(await _play(seed, rate=rate, max_steps=12))[0] for seed in range(12)]

    clean, noisy = asyncio.run(run(0.0)), asyncio.run(run(0.5))
    differ = sum(a != b for x, y in zip(clean, noisy, strict=True) for a, b in zip(x, y, strict=False))
    total = sum(min(len(x), len(y)) for x, y in zip(clean, noisy, strict=True))
    assert differ > 0.2 * total
    assert asyncio.run(run(0.0)) == clean  # choices are a function of the seed and the state


def test_invalid_repeats_are_injected_and_the_expert_recovers() -> None:
    async def run(invalid: float) -> tuple[list[list[str]], list[list[str]], float]:
        commands, seen, rewards = [], [], 0.0
        for seed in range(16):
            obs: list[str] = []
            cmds, reward, _ = await _play(seed, max_steps=50, invalid=invalid, observations=obs)
            commands.append(cmds)
            seen.append(obs)
            rewards += reward
        return commands, seen, rewards / 16

    commands, seen, success = asyncio.run(run(0.2))
    repeats = [i for cmds in commands for i in range(1, len(cmds)) if cmds[i] == cmds[i - 1]]
    nothing = sum("Nothing happens" in o for obs in seen for o in obs)
    turns = sum(len(c) for c in commands)
    assert 0.05 * turns < len(repeats) and 0.05 * turns < nothing  # repeats of the last action, answered "Nothing happens."
    clean, _, _ = asyncio.run(run(0.0))
    assert not any(c[i] == c[i - 1] for c in clean for i in range(1, len(c)))  # the expert itself never repeats
    assert success >= 0.5  # and it gets out of the loop: the oracle goes on from where it is


TINY = ["--set", "episodes=6", "--set", "sft_max_steps=2", "--set", "sft_check_every=2", "--set", "sft_val_tasks=2",
        "--set", "max_turns=20", "--set", "env_kwargs={history_length: 2, max_steps: 20, split: train}", "--threads", "1"]


def test_warmstart_command_builds_once_and_is_reused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOLGYM_CACHE", str(tmp_path))
    first = CliRunner().invoke(app, ["warmstart", "--env", "alfworld", *TINY])
    assert first.exit_code == 0, first.output
    out = Path(first.stdout.strip().splitlines()[-1])
    assert (out / "READY").is_file() and (out / "tokenizer.json").is_file() and (out / "config.json").is_file()
    info = json.loads((out / "warmstart.json").read_text())
    assert info["sft_steps"] == 2 and info["recipe"]["episodes"] == 6 and info["validation"]
    stamp = (out / "READY").stat().st_mtime_ns
    again = CliRunner().invoke(app, ["warmstart", "--env", "alfworld", *TINY])
    assert again.exit_code == 0 and "cached" in again.output
    assert (out / "READY").stat().st_mtime_ns == stamp
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".")]  # no half-written build left behind
    bad = CliRunner().invoke(app, ["warmstart", "--env", "alfworld", "--set", "mistake_rat=0.3"])
    assert bad.exit_code != 0 and "unknown warm_start key(s) mistake_rat" in str(bad.exception)


def test_the_action_is_tokenized_as_the_admissible_list_shows_it() -> None:
    """With whole action tags, the ids between <action> and </action> are exactly the ids of the same
    command inside the prompt's admissible list, numbers one digit per token; with BPE-learnt tags
    the tag fuses with the command's first word (the cause of issue 14's miscopied actions)."""
    from toolgym.training.local import models

    spec = get_registry().env("alfworld-verl")
    command = "go to cabinet 13"
    listed = " '" + command + "'\n 'open drawer 2'"
    for whole, copies in ((models.ACTION_TAGS, True), ((), False)):
        tok = models.load_tokenizer(models.demo_model_dir(spec, get_registry(), num_heads=2, whole_tokens=whole))
        action = tok.encode(f"<action>{command}</action>")
        in_list = tok.encode(listed)
        inner = action[1:-1] if whole else action
        found = any(in_list[i : i + len(inner)] == inner for i in range(len(in_list)))
        assert found is copies
        if whole:
            assert [tok.decode([i]) for i in action] == ["<action>", "go", " to", " cabinet", " ", "1", "3", "</action>"]
