"""Warm starts: the searching expert uses no hidden knowledge, mistakes are injected at the set rate,
and `toolgym warmstart` builds once, caches and reuses."""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from toolgym.cli import app
from toolgym.core.errors import ConfigError
from toolgym.core.llm.local.tiny import ensure_tiny_model
from toolgym.core.registry import get_registry
from toolgym.core.types import Action, ActionKind
from toolgym.plugins.alfworld.expert import place_order
from toolgym.training.warmstart import build as warmstart


async def _play(
    seed: int,
    *,
    rate: float = 0.0,
    max_steps: int = 50,
    invalid: float = 0.0,
    observations: list[str] | None = None,
    think: bool = False,
    plan: bool = False,
    turns: list[tuple[str, list[str]]] | None = None,
) -> tuple[list[str], float, list[str]]:
    """(commands, reward, the receptacles listed at the start) of one noisy-expert episode;
    ``observations`` receives the environment's answer to each command, ``turns`` each turn's
    written text with the admissible list it was written against."""
    from transformers import AutoTokenizer

    from toolgym.core.tokens.chat import ChatFormat

    tokenizer = AutoTokenizer.from_pretrained(str(ensure_tiny_model("qwen")))
    policy = warmstart.noisy_policy(
        ChatFormat(tokenizer), rate=rate, seed=3, invalid_rate=invalid, think=think, plan=plan
    )
    env = get_registry().env("alfworld-verl").make(max_steps=max_steps, split="train")
    await env.reset(seed=seed)
    places = sorted((c[len("go to ") :] for c in env.admissible if c.startswith("go to ")), key=place_order)
    commands, reward = [], 0.0
    for _ in range(max_steps):
        result = await policy.act(env)
        text = tokenizer.decode(result.output_ids, skip_special_tokens=True)
        if turns is not None:
            turns.append((text, list(env.admissible)))
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
    assert sorted(names, key=place_order) == [
        "cabinet 1",
        "cabinet 2",
        "cabinet 9",
        "cabinet 10",
        "countertop 1",
        "drawer 1",
    ]


def test_the_searching_expert_looks_in_natural_order_and_usually_succeeds() -> None:
    async def run() -> list[tuple[list[str], float, list[str]]]:
        return [await _play(seed) for seed in range(24)]

    episodes = asyncio.run(run())
    for commands, _, places in episodes:
        first_take = next((i for i, c in enumerate(commands) if c.startswith("take ")), len(commands))
        visits = [c[len("go to ") :] for c in commands[:first_take] if c.startswith("go to ")]
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

    commands, seen, success = asyncio.run(run(0.3))
    repeats = [i for cmds in commands for i in range(1, len(cmds)) if cmds[i] == cmds[i - 1]]
    nothing = sum("Nothing happens" in o for obs in seen for o in obs)
    turns = sum(len(c) for c in commands)
    # repeats of the last action and miscopied numbers, answered "Nothing happens."
    assert 0.04 * turns < len(repeats) and 0.1 * turns < nothing
    clean, _, _ = asyncio.run(run(0.0))
    assert not any(
        c[i] == c[i - 1] for c in clean for i in range(1, len(c))
    )  # the expert itself never repeats
    assert success >= 0.5  # and it gets out of the loop: the oracle goes on from where it is


TINY = [
    "--set",
    "episodes=6",
    "--set",
    "sft_max_steps=2",
    "--set",
    "sft_check_every=2",
    "--set",
    "sft_val_tasks=2",
    "--set",
    "max_turns=20",
    "--set",
    "env_kwargs={history_length: 2, max_steps: 20, split: train}",
    "--threads",
    "1",
]


def test_warmstart_command_builds_once_and_is_reused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOLGYM_CACHE", str(tmp_path))
    first = CliRunner().invoke(app, ["warmstart", "--env", "alfworld", *TINY])
    assert first.exit_code == 0, first.output
    out = Path(first.stdout.strip().splitlines()[-1])
    assert (
        (out / "READY").is_file() and (out / "tokenizer.json").is_file() and (out / "config.json").is_file()
    )
    info = json.loads((out / "warmstart.json").read_text())
    assert info["sft_steps"] == 2 and info["recipe"]["episodes"] == 6 and info["validation"]
    stamp = (out / "READY").stat().st_mtime_ns
    again = CliRunner().invoke(app, ["warmstart", "--env", "alfworld", *TINY])
    assert again.exit_code == 0 and "cached" in again.output
    assert (out / "READY").stat().st_mtime_ns == stamp
    assert not [
        p for p in out.parent.iterdir() if p.name.startswith(".")
    ]  # no half-written build left behind
    bad = CliRunner().invoke(app, ["warmstart", "--env", "alfworld", "--set", "mistake_rat=0.3"])
    assert bad.exit_code != 0 and "unknown warm_start key(s) mistake_rat" in str(bad.exception)


def test_warmstart_command_prints_every_validation_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Progress lines come every 10 % of SFT, and each validation check gets its own line even where
    it falls between them (checks every 5 steps of 20: lines every 2 steps would show only 10 and 20)."""
    monkeypatch.setenv("TOOLGYM_CACHE", str(tmp_path))
    tiny = [
        *TINY,
        "--set",
        "sft_max_steps=20",
        "--set",
        "sft_check_every=5",
        "--set",
        "sft_val_tasks=1",
        "--set",
        "sft_target=1.1",
    ]
    done = CliRunner().invoke(app, ["warmstart", "--env", "alfworld", *tiny])
    assert done.exit_code == 0, done.output
    checked = [
        line.split()[1]
        for line in done.output.splitlines()
        if line.startswith("sft:") and " · validation" in line
    ]
    assert checked == ["5/20", "10/20", "15/20", "20/20"]


def test_the_action_is_tokenized_as_the_admissible_list_shows_it() -> None:
    """With whole action tags, the ids between <action> and </action> are exactly the ids of the same
    command inside the prompt's admissible list, numbers one digit per token; with BPE-learnt tags
    the tag fuses with the command's first word (the cause of issue 14's miscopied actions)."""
    from toolgym.training.local import models

    spec = get_registry().env("alfworld-verl")
    command = "go to cabinet 13"
    listed = " '" + command + "'\n 'open drawer 2'"
    for whole, copies in (
        (models.ACTION_TAGS, True),
        ((), False),
        (models.ACTION_TAGS + models.SPACED_DIGITS, True),
    ):
        tok = models.load_tokenizer(
            models.demo_model_dir(spec, get_registry(), num_heads=2, whole_tokens=whole)
        )
        action = tok.encode(f"<action>{command}</action>")
        in_list = tok.encode(listed)
        inner = action[1:-1] if whole else action
        found = any(in_list[i : i + len(inner)] == inner for i in range(len(in_list)))
        assert found is copies
        if whole == models.ACTION_TAGS:
            assert [tok.decode([i]) for i in action] == [
                "<action>",
                "go",
                " to",
                " cabinet",
                " ",
                "1",
                "3",
                "</action>",
            ]
        elif whole:  # a space and a digit as one token: the number after a name is a one-token copy
            assert [tok.decode([i]) for i in action] == [
                "<action>",
                "go",
                " to",
                " cabinet",
                " 1",
                "3",
                "</action>",
            ]
            assert tok.decode(tok.encode("a cellphone 2, step 22")) == "a cellphone 2, step 22"


def test_invalid_variants_are_inadmissible_repeats_and_miscopied_numbers() -> None:
    listed = ["take cellphone 2 from desk 1", "take pen 1 from desk 1", "go to drawer 1", "go to desk 2"]
    kinds = warmstart.invalid_variants("take cellphone 2 from desk 1", "go to desk 1", listed)
    assert kinds[0] == ["go to desk 1"]  # at the desk, going there again does nothing
    miscopied = kinds[1]
    assert "take cellphone 1 from desk 1" in miscopied and "take cellphone 2 from desk 3" in miscopied
    assert not set(miscopied) & set(listed) and "take cellphone 2 from desk 1" not in miscopied
    assert warmstart.invalid_variants("look", "go to drawer 1", listed) == []  # nothing inadmissible to write


def test_expert_only_clears_the_loss_on_injected_turns_and_keeps_them_as_context() -> None:
    from transformers import AutoTokenizer

    from toolgym.core.rollout.config import EngineConfig
    from toolgym.core.rollout.engine import RolloutEngine, plan_episodes
    from toolgym.core.tokens.chat import ChatFormat
    from toolgym.training.local.loop import run_episodes
    from toolgym.training.local.sft import sft_rows

    tokenizer = AutoTokenizer.from_pretrained(str(ensure_tiny_model("qwen")))
    policy = warmstart.noisy_policy(ChatFormat(tokenizer), rate=0.3, seed=1, invalid_rate=0.2)
    engine = RolloutEngine(
        registry=get_registry(),
        policy=policy,
        config=EngineConfig(max_turns=40, seed=0),
        env_kwargs={"history_length": 2, "max_steps": 40, "split": "train"},
    )
    trajs = asyncio.run(
        run_episodes(engine, plan_episodes("alfworld-verl", num_tasks=4, group_size=1, seed=11))
    )
    injected = [(t, s.index) for t in trajs for s in t.steps if (s.anchor, s.index) in policy.injected]
    assert injected  # the policy records what it injected
    for traj in trajs:
        kept = warmstart.expert_turns_only(traj, policy.injected)
        rows, before = sft_rows([kept]), sft_rows([traj])
        marked = {i for t, i in injected if t is traj}
        assert len(before) == len(traj.steps)  # one row per turn (verl format)
        expert = [old for i, old in enumerate(before) if i not in marked]
        assert len(rows) == len(
            expert
        )  # only the expert's own turns are targets (rows without one are dropped)
        for row, old in zip(rows, expert, strict=True):
            assert list(row.input_ids) == list(
                old.input_ids
            )  # the mistakes stay in the context of later turns
            assert list(row.loss_mask) == list(old.loss_mask)
    assert sum(len(sft_rows([t])) for t in trajs) == sum(
        len(t.steps) for t in trajs
    )  # the originals are untouched


def test_balance_weights_even_out_rare_and_frequent_actions() -> None:
    from toolgym.core.errors import ConfigError
    from toolgym.training.local.sft import balance_weights, run_sft

    kinds = ["go"] * 90 + ["take"] * 10
    for power, share in ((0.0, 0.1), (0.5, 10**0.5 / (10**0.5 + 90**0.5)), (1.0, 0.5)):
        w = balance_weights(kinds, power)
        assert sum(w[90:]) / sum(w) == pytest.approx(share)
    with pytest.raises(ConfigError):
        balance_weights(kinds, -1.0)

    class Recorder:
        def __init__(self) -> None:
            self.seen: list[int] = []

        def sft_step(self, rows, context_weight=0.0):  # type: ignore[no-untyped-def]
            self.seen += [int(r) for r in rows]
            return {"loss": 0.0}

    rec = Recorder()
    run_sft(rec, list(range(100)), steps=50, batch_size=20, weights=balance_weights(kinds, 1.0))  # type: ignore[arg-type]
    rare = sum(i >= 90 for i in rec.seen) / len(rec.seen)
    assert 0.4 < rare < 0.6  # drawn about half the time instead of a tenth
    with pytest.raises(ConfigError):
        run_sft(rec, list(range(100)), steps=1, batch_size=2, weights=[1.0])  # type: ignore[arg-type]


def test_the_thought_says_what_is_sought_and_whether_the_list_offers_it() -> None:
    async def run() -> list[tuple[str, list[str]]]:
        turns: list[tuple[str, list[str]]] = []
        for seed in range(8):
            await _play(seed, think=True, turns=turns)
        return turns

    turns = asyncio.run(run())
    takes = 0
    for text, listed in turns:
        found = re.fullmatch(r"<think>(.*)</think><action>(.*)</action>", text)
        assert found, text
        thought, command = found.groups()
        sought = re.fullmatch(r"(\w+) (in|not in) reach|holding (\w+)", thought)
        assert sought, thought
        if sought.group(1):  # checkable against the prompt: the list offers to take (or use) it, or not
            offered = any(
                a.split(" ")[0] in ("take", "use") and a.split(" ")[1] == sought.group(1) for a in listed
            )
            assert offered is (sought.group(2) == "in"), (thought, listed)
        if command.startswith("take "):
            takes += 1
            assert (
                thought == f"{command.split(' ')[1]} in reach"
            )  # the expert takes what it said was in reach
    assert takes >= 8


def test_the_plan_says_whether_the_next_receptacle_is_listed_and_where_the_object_goes() -> None:
    async def run() -> list[tuple[str, list[str]]]:
        turns: list[tuple[str, list[str]]] = []
        for seed in range(8):
            await _play(seed, think=True, plan=True, turns=turns)
        return turns

    checked = carried = 0
    for text, listed in asyncio.run(run()):
        thought, command = re.fullmatch(r"<think>(.*)</think><action>(.*)</action>", text).groups()  # type: ignore[union-attr]
        _, comma, plan = thought.partition(", ")
        assert bool(comma) is (command.startswith("go to ") and plan != ""), text
        if found := re.fullmatch(r"(\w+ \d+) (listed|not listed)", plan):
            checked += 1
            assert (f"go to {found.group(1)}" in listed) is (found.group(2) == "listed"), (plan, listed)
            if found.group(2) == "listed":
                assert command == f"go to {found.group(1)}"  # the search goes on to the listed next one
        elif plan:
            carried += 1
            assert plan.startswith("to ") and command.startswith(f"go to {plan[3:]} ")
    assert checked >= 20 and carried >= 4


def test_math_python_warm_start_runs_its_expert_through_the_sandboxed_tool(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ARPO rows' warm start: the expert's tool calls run in a sandbox while the data is made, and
    the tokenizer corpus holds whole scripted episodes (tool call, tool output, boxed answer)."""
    monkeypatch.setenv("TOOLGYM_CACHE", str(tmp_path))
    tiny = [
        "--set",
        "episodes=4",
        "--set",
        "sft_max_steps=2",
        "--set",
        "sft_check_every=2",
        "--set",
        "sft_val_tasks=2",
        "--threads",
        "1",
    ]
    done = CliRunner().invoke(app, ["warmstart", "--env", "math_python", *tiny])
    assert done.exit_code == 0, done.output
    out = Path(done.stdout.strip().splitlines()[-1])
    info = json.loads((out / "warmstart.json").read_text())
    assert info["scripted_success"] == 1.0 and info["rows"] == 4, (
        info
    )  # every program ran and printed the answer
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(out))
    call = '<tool_call>\n{"name": "python", "arguments": {"code": "import math\\nprint(math.comb(45, 12))"}}\n</tool_call>'
    assert (
        len(tokenizer(call)["input_ids"]) <= 40
    )  # merges learnt from the tool calls (a byte-level split is ~100)


async def test_the_expert_leaves_free_text_turns_as_the_env_wrote_them() -> None:
    """Mistakes are injected into ``<action>`` commands only; a tool call or a final answer goes out as
    the environment's scripted solver wrote it, whatever the rates."""
    from transformers import AutoTokenizer

    from toolgym.core.rollout.config import EngineConfig
    from toolgym.core.rollout.engine import RolloutEngine, plan_episodes
    from toolgym.core.sandbox import LazySandboxBackend
    from toolgym.core.tokens.chat import ChatFormat

    tokenizer = AutoTokenizer.from_pretrained(str(ensure_tiny_model("qwen")))
    policy = warmstart.noisy_policy(ChatFormat(tokenizer), rate=0.9, seed=1, invalid_rate=0.9)
    out: list = []
    sandboxes = LazySandboxBackend(get_registry(), "auto")
    engine = RolloutEngine(
        registry=get_registry(),
        policy=policy,
        config=EngineConfig(max_turns=4),
        on_trajectory=out.append,
        sandbox_backend=sandboxes,
    )
    try:
        await engine.run(plan_episodes("math-python", num_tasks=4, group_size=1))
    finally:
        await sandboxes.aclose()
    assert len(out) == 4 and all(t.reward == 1.0 for t in out), [t.status_reason for t in out]
    assert all([s.action_kind for s in t.steps] == ["tool_calls", "answer"] for t in out)
    assert not policy.injected


def test_a_field_added_later_keys_only_when_set() -> None:
    """Adding a recipe field must not orphan warm starts built before it (25 minutes each for ALFWorld):
    a field in KEYED_WHEN_SET at its default leaves the key as it was."""
    from toolgym.training.local.models import demo_spec

    shipped = warmstart.recipe("alfworld")
    # the key the page's ALFWorld warm start was built under, with an early stop that never fired (so
    # find_built still finds it for the fixed-budget recipe: test_warmstart_determinism.py)
    assert replace(shipped, sft_target=0.9).key() == "2713dcb8768c"
    assert (
        warmstart.recipe("alfworld", context=1024).key()
        == shipped.key()
        != warmstart.recipe("alfworld", context=2048).key()
    )
    assert warmstart.RECIPES["webshop"].context == 2048
    assert (
        demo_spec(context=2048).max_position_embeddings == 2048
        and demo_spec().max_position_embeddings == 1024
    )


def test_new_fields_key_only_when_set_and_reach_the_tokenizer() -> None:
    """``vocab_size`` and ``val_env_kwargs`` joined the recipe after the ALFWorld warm start was built:
    at their defaults they leave its key alone; ``vocab_size`` sizes the tiny model's vocabulary."""
    from toolgym.training.local.models import demo_spec

    shipped = warmstart.recipe("alfworld")
    assert (
        warmstart.recipe("alfworld", vocab_size=1024, val_env_kwargs={}, whole_names=False).key()
        == shipped.key()
    )
    assert warmstart.recipe("alfworld", whole_names=True).key() != shipped.key()
    assert warmstart.recipe("alfworld", vocab_size=2048).key() != shipped.key()
    assert warmstart.recipe("alfworld", val_env_kwargs={"split": "eval"}).key() != shipped.key()
    assert demo_spec(vocab_size=4096).vocab_size == 4096 and demo_spec().vocab_size == 1024
    with pytest.raises(Exception, match="vocab_size must be at least 512"):
        demo_spec(vocab_size=100)


def test_webshop_warm_start_validates_on_goals_its_data_never_saw() -> None:
    """The WebShop training split has only 500 goals, so validating on it while the scripted data
    came from it measured memorised goals (25-34 % there, 6 % on the held-out test goals). The data
    come from one split and validation from another, and neither is the held-out test split."""
    from toolgym.plugins.webshop.goals import split_indices

    r = warmstart.RECIPES["webshop"]
    data, val = r.env_kwargs["split"], {**r.env_kwargs, **r.val_env_kwargs}["split"]
    assert data != val and "test" not in (data, val)
    assert not set(split_indices(2000, data)) & set(split_indices(2000, val))


def test_validation_runs_on_the_validation_split(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A build's validation episodes take ``val_env_kwargs``: a split that does not exist stops the
    build at its first check, after the scripted data (which use ``env_kwargs``) went through."""
    from toolgym.core.errors import ToolgymError

    monkeypatch.setenv("TOOLGYM_CACHE", str(tmp_path))
    r = warmstart.recipe(
        "webshop",
        episodes=4,
        sft_max_steps=1,
        sft_check_every=1,
        sft_val_tasks=1,
        val_env_kwargs={"split": "nowhere"},
    )
    stages: list[str] = []
    with pytest.raises(ToolgymError, match="unknown WebShop split 'nowhere'"):
        warmstart.build(r, threads=1, progress=lambda stage, *a: stages.append(stage))
    assert "data" in stages and "sft" in stages
    assert not (warmstart.cache_dir(r) / "READY").exists()


def test_whole_names_make_a_product_click_a_one_token_copy_of_the_page(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``whole_names`` the catalog's ids are single tokens: the id inside ``click[...]`` is the very
    token the results page shows; without them it is ten one-character tokens."""
    from toolgym.training.local import models

    monkeypatch.setenv("TOOLGYM_CACHE", str(tmp_path))
    spec = get_registry().env("webshop-verl")
    names = models.whole_names(spec)
    assert len(names) == 400 and all(len(n) == 10 for n in names)
    assert models.whole_names(get_registry().env("alfworld-verl")) == ()
    asin = names[0]
    for whole in (names, ()):
        tok = models.load_tokenizer(
            models.demo_model_dir(
                spec, get_registry(), num_heads=2, vocab_size=2048, whole_tokens=models.ACTION_TAGS + whole
            )
        )
        action = tok.encode(f"<action>click[{asin}]</action>")
        page = tok.encode(f"[SEP] {asin} [SEP] Voltix Pro Phone Charger [SEP] $10.36")
        copied = [t for t in action if t in page and tok.decode([t]).strip() == asin]
        assert (len(copied) == 1) is bool(whole), [tok.decode([t]) for t in action]


def test_sft_decay_anneals_the_last_steps_and_keeps_the_rest() -> None:
    """``sft_decay_steps``: the rate is the constant one until the last N steps, then falls linearly to
    ``sft_lr / N`` at the final step; unset, the key (and the build) is the constant-rate one."""
    shipped = warmstart.recipe("alfworld")
    constant = warmstart.recipe("alfworld", sft_max_steps=2800, sft_decay_steps=0)
    assert (
        replace(constant, sft_target=0.9).key() == "a399db02dfd8"
    )  # the constant-rate build before the field came kept its key (it had an early stop at 90 %)
    annealed = warmstart.recipe("alfworld", sft_max_steps=10, sft_decay_steps=4, sft_lr=1.0)
    assert (
        annealed.key() != warmstart.recipe("alfworld", sft_max_steps=10, sft_decay_steps=0, sft_lr=1.0).key()
    )
    assert [warmstart.sft_lr_at(annealed, s) for s in range(10)] == [1.0] * 6 + [1.0, 0.75, 0.5, 0.25]
    assert {warmstart.sft_lr_at(constant, s) for s in range(constant.sft_max_steps)} == {constant.sft_lr}
    rates = [warmstart.sft_lr_at(shipped, s) for s in range(shipped.sft_max_steps)]
    assert rates[:2801] == [constant.sft_lr] * 2801 and rates[-1] == pytest.approx(
        constant.sft_lr / 700
    )  # the shipped build
    short = warmstart.recipe(
        "alfworld", sft_max_steps=4, sft_decay_steps=700, sft_lr=1.0
    )  # a shortened shipped build
    assert [warmstart.sft_lr_at(short, s) for s in range(4)] == [1.0, 0.75, 0.5, 0.25]
    with pytest.raises(ConfigError, match="sft_decay_steps must be 0"):
        warmstart.sft_lr_at(warmstart.recipe("alfworld", sft_decay_steps=-1), 0)


def test_a_build_applies_the_decay_and_refuses_a_bad_one_before_its_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from toolgym.training.local.trainer import PolicyTrainer

    monkeypatch.setenv("TOOLGYM_CACHE", str(tmp_path))
    rates: list[float] = []
    set_lr = PolicyTrainer.set_lr
    monkeypatch.setattr(PolicyTrainer, "set_lr", lambda self, lr: (rates.append(lr), set_lr(self, lr))[1])
    small = {
        "episodes": 6,
        "sft_check_every": 2,
        "sft_val_tasks": 1,
        "max_turns": 20,
        "env_kwargs": {"history_length": 2, "max_steps": 20, "split": "train"},
        "sft_target": 1.1,
    }
    stages: list[str] = []
    with pytest.raises(ConfigError, match="sft_decay_steps"):
        warmstart.build(
            warmstart.recipe("alfworld", **small, sft_max_steps=2, sft_decay_steps=-3),
            threads=1,
            progress=lambda stage, *a: stages.append(stage),
        )
    assert not stages  # refused before the tokenizer and the scripted data
    out = warmstart.build(
        warmstart.recipe("alfworld", **small, sft_max_steps=4, sft_decay_steps=2, sft_lr=0.004), threads=1
    )
    assert json.loads((out / "warmstart.json").read_text())["sft_steps"] == 4
    assert rates == pytest.approx(
        [0.004, 0.004, 0.004, 0.002, 0.002]
    )  # before step 0, then after each step the next one's
