"""Train, validation and test: the shipped configs validate on each environment's validation split and
name its test splits apart, and the local trainer never reads a test split (a plant there would show)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from toolgym.core.builtin import parsers as builtin
from toolgym.core.env.contract import Env, StepResult
from toolgym.core.env.spec import EnvSpec
from toolgym.core.hookspecs import hookimpl
from toolgym.core.registry import Registry
from toolgym.core.types import Action, Message
from toolgym.training.runner import load_config

CONFIGS = [
    *(f"alfworld_{e}" for e in ("grpo", "gigpo", "graphgpo")),
    *(f"webshop_{e}" for e in ("grpo", "gigpo", "graphgpo")),
    *(f"math_python_{e}" for e in ("grpo", "arpo")),
]
ROLES = {
    "train": "train",
    "validation": "validation",
    "eval_in_distribution": "test",
    "eval_out_of_distribution": "test",
    "test": "test",
}


def _identity(env: str) -> Any:
    """What makes two tasks the same task: ALFWorld's instance content, WebShop's goal, math's seed."""
    if env.startswith("alfworld"):
        from toolgym.plugins.alfworld.generator import generate
        from toolgym.plugins.alfworld.tasks import TASK_TYPES

        return lambda split, seed: generate(split, seed, list(TASK_TYPES.values())).key
    if env.startswith("webshop"):
        from toolgym.plugins.webshop.env import WebShopEnv

        shops: dict[str, Any] = {}
        return lambda split, seed: shops.setdefault(split, WebShopEnv(split=split)).goal_index(seed)
    from toolgym.plugins.qa.math.env import TEST_OFFSET, VALIDATION_SEED

    return lambda split, seed: {"train": 0, "validation": VALIDATION_SEED, "test": TEST_OFFSET}[split] + seed


@pytest.mark.parametrize("config", CONFIGS)
def test_shipped_configs_validate_on_validation_and_keep_test_apart(config: str) -> None:
    tg = load_config(config, [])["toolgym"]
    assert ROLES[tg["train"]["env_kwargs"]["split"]] == "train"
    assert tg["val"]["env_kwargs"]["split"] == "validation"
    assert tg["test"] and all(ROLES[r["env_kwargs"]["split"]] == "test" for r in tg["test"].values())
    same = _identity(tg["env"])
    val = tg["val"]
    validation = {
        same("validation", val["seed"] + i) for i in range(val["first_task"], val["first_task"] + 96)
    }
    for r in tg["test"].values():
        tests = {
            same(r["env_kwargs"]["split"], r["seed"] + i)
            for i in range(r["first_task"], r["first_task"] + 96)
        }
        assert not validation & tests, f"{config}: validation shares tasks with test split {r['env_kwargs']}"
    if not tg["env"].startswith("webshop"):  # seed-carved validation: every training draw stays below it
        from toolgym.plugins.alfworld.generator import VALIDATION_SEED

        # the learning table's seeds k train from 10,000·k, num_tasks tasks each
        assert 9 * 10_000 + tg["train"]["num_tasks"] + tg["train"]["seed"] < VALIDATION_SEED


def test_verl_configs_validate_on_validation_too() -> None:
    from toolgym.training.config_file import VERL_EXAMPLES, compose_file

    for name in ("alfworld_gigpo", "webshop_gigpo", "math_python_arpo"):
        tg = compose_file(name, [], examples=VERL_EXAMPLES).to_dict()["toolgym"]
        assert tg["val"]["env_kwargs"]["split"] == "validation"
        assert all(ROLES[r["env_kwargs"]["split"]] == "test" for r in tg["test"].values())


# -- the attack: a plant in the test split that validation would show ------------------------------

PLANT = "PLANTED-TEST-TASK"


class PlantEnv(Env):
    """One turn. Its test split is planted: every answer scores 1 there and the prompt carries a marker,
    so an evaluation that read a test task would report success and keep the marker in its trajectories."""

    parser = "hermes"
    max_turns = 1
    seen: list[tuple[str, str, int | None]] = []

    def __init__(self, split: str = "train") -> None:
        self.split = split
        PlantEnv.seen.append(("make", split, None))

    async def reset(
        self, *, seed: int, options: Mapping[str, Any] | None = None
    ) -> tuple[list[Message], dict[str, Any]]:
        PlantEnv.seen.append(("reset", self.split, seed))
        word = PLANT if self.split == "test" else "word"
        return [{"role": "user", "content": f"Say a {word}."}], {"split": self.split}

    async def step(self, action: Action) -> StepResult:
        return StepResult(observation=[], reward=float(self.split == "test"), terminated=True)


class PlantPlugin:
    @hookimpl
    def toolgym_envs(self) -> list[EnvSpec]:
        return [EnvSpec("plant", PlantEnv)]


CONFIG = """
toolgym:
  env: plant
  layout: trajectory
  group_size: 2
  advantage: {estimator: grpo}
  engine: {max_turns: 1, max_tokens_per_turn: 4}
  sandbox_backend: none
  train: {num_tasks: 100, first_task: 0, seed: 0, env_kwargs: {split: train}}
  val: {num_tasks: 4, first_task: 0, seed: 0, env_kwargs: {split: validation}}
  test:
    planted: {num_tasks: 4, first_task: 0, seed: 0, env_kwargs: {split: test}}
verl:
  data: {train_batch_size: 2}
  actor_rollout_ref:
    model: {path: tiny}
    actor: {optim: {lr: 1.0e-3}, ppo_mini_batch_size: 2, ppo_micro_batch_size_per_gpu: 4}
  trainer: {total_training_steps: 1, test_freq: 1, save_freq: 0, device: cpu}
"""


def test_the_trainer_validates_on_validation_and_never_reads_a_test_split(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import toolgym.core.registry as registry_module
    from toolgym.training import runner

    registry = Registry.load(entry_points=False, plugins=[("parsers", builtin), ("plant", PlantPlugin())])
    monkeypatch.setattr(registry_module, "get_registry", lambda **_: registry)
    PlantEnv.seen.clear()
    config = tmp_path / "plant.yaml"
    config.write_text(CONFIG)
    out = tmp_path / "run"
    runner.run(str(config), [f"verl.trainer.default_local_dir={out}"])

    splits = {split for _, split, _ in PlantEnv.seen}
    assert splits == {"train", "validation"}, PlantEnv.seen
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    evals = [r["heldout"] for r in records if "heldout" in r]
    assert [r["step"] for r in records if "heldout" in r] == [0, 1]
    assert all(e["success"] == 0.0 and e["episodes"] == 4 for e in evals), evals  # the plant scores 1
    assert PLANT not in (out / "metrics.jsonl").read_text()
    rl = json.loads((out / "run.json").read_text())["rl"]
    assert rl["eval"]["env_kwargs"] == {"split": "validation"} and "planted" not in json.dumps(rl)
