"""A short on-policy run on the tiny model: rewarded actions become more likely."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from toolgym.core.builtin import parsers as builtin
from toolgym.core.env.contract import Env, StepResult
from toolgym.core.env.spec import EnvSpec
from toolgym.core.hookspecs import hookimpl
from toolgym.core.registry import Registry
from toolgym.core.tokens.chat import ChatFormat
from toolgym.core.types import Action, Message
from toolgym.training.local.config import EvalConfig, OptimConfig, PPOConfig, RLConfig
from toolgym.training.local.loop import RLLoop
from toolgym.training.local.trainer import PolicyTrainer

PROMPT: list[Message] = [{"role": "user", "content": "Say a word."}]


def rewarded(text: str) -> bool:
    return "e" in text.strip()


class SayEnv(Env):
    """One turn, one token: reward 1 when the word contains an 'e'."""

    parser = "hermes"
    max_turns = 1

    async def reset(
        self, *, seed: int, options: Mapping[str, Any] | None = None
    ) -> tuple[list[Message], dict[str, Any]]:
        return [dict(m) for m in PROMPT], {}

    async def step(self, action: Action) -> StepResult:
        return StepResult(observation=[], reward=float(rewarded(action.answer or "")), terminated=True)


class SayPlugin:
    @hookimpl
    def toolgym_envs(self) -> list[EnvSpec]:
        return [EnvSpec("say", SayEnv)]


def rewarded_mass(model: Any, chat: ChatFormat) -> float:
    ids = chat.encode(chat.render(PROMPT, add_generation_prompt=True))
    with torch.no_grad():
        probs = torch.softmax(model(torch.tensor([ids])).logits[0, -1].float(), -1)
    good = [i for i in range(probs.numel()) if i not in chat.eos_token_ids and rewarded(chat.decode([i]))]
    return float(probs[good].sum())


async def test_five_grpo_steps_make_rewarded_tokens_more_likely() -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from toolgym.core.llm.local.tiny import ensure_tiny_model
    from toolgym.core.llm.local.transformers_backend import TransformersBackend

    torch.manual_seed(0)
    path = ensure_tiny_model("qwen")
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    model = AutoModelForCausalLM.from_pretrained(str(path)).float().eval()
    chat = ChatFormat(tokenizer)
    registry = Registry.load(entry_points=False, plugins=[("parsers", builtin), ("say", SayPlugin())])
    config = RLConfig(
        env="say",
        estimator="grpo",
        group_size=8,
        tasks_per_step=4,
        steps=5,
        seed=3,
        engine={"max_turns": 1, "max_tokens_per_turn": 1},
        optim=OptimConfig(lr=6e-2),
        ppo=PPOConfig(mini_batch_size=32, micro_batch_size=32),
        eval=EvalConfig(num_tasks=4, every=0),
    )
    backend = TransformersBackend(model, tokenizer=tokenizer, max_batch_size=32)
    trainer = PolicyTrainer(
        model, optim=config.optim, ppo=config.ppo, pad_token_id=tokenizer.pad_token_id, backend=backend
    )
    seen = []
    loop = RLLoop(config, trainer=trainer, backend=backend, registry=registry, on_trajectory=seen.append)
    before = rewarded_mass(model, chat)
    try:
        history = await loop.train()
    finally:
        await backend.aclose()
    after = rewarded_mass(model, chat)
    assert len(history) == 5 and len(seen) == 5 * 32
    assert after > before + 0.3, (before, after)
    assert history[-1].success > history[0].success
    assert trainer.step == 5 and backend.weight_version == "5"
    assert {t.weight_version for t in seen} == {
        "0",
        "1",
        "2",
        "3",
        "4",
    }  # each step sampled the weights of the one before
    assert all(h.metrics["tokens"] > 0 for h in history)


async def test_a_step_where_every_episode_fails_stops_the_run_with_the_reason() -> None:
    import pytest
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from toolgym.core.errors import LLMError, ToolgymError
    from toolgym.core.llm.local.tiny import ensure_tiny_model
    from toolgym.core.llm.local.transformers_backend import TransformersBackend

    path = ensure_tiny_model("qwen")
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    model = AutoModelForCausalLM.from_pretrained(str(path)).float().eval()
    registry = Registry.load(entry_points=False, plugins=[("parsers", builtin), ("say", SayPlugin())])
    config = RLConfig(
        env="say",
        estimator="grpo",
        group_size=2,
        tasks_per_step=2,
        steps=1,
        seed=3,
        engine={"max_turns": 1, "max_tokens_per_turn": 1},
        eval=EvalConfig(num_tasks=2, every=0),
    )
    backend = TransformersBackend(model, tokenizer=tokenizer, max_batch_size=4)

    async def broken(
        request: Any,
    ) -> Any:  # every call fails, as with a crashed server or a GPU out of memory
        raise LLMError("CUDA out of memory (simulated)")

    backend.generate = broken  # type: ignore[method-assign]
    trainer = PolicyTrainer(model, optim=config.optim, ppo=config.ppo, pad_token_id=tokenizer.pad_token_id)
    loop = RLLoop(config, trainer=trainer, backend=backend, registry=registry)
    try:
        with pytest.raises(
            ToolgymError, match=r"every one of the 4 episodes of RL step 1 failed.*CUDA out of memory"
        ):
            await loop.step()
        with pytest.raises(ToolgymError, match="every one of the 2 episodes of the evaluation failed"):
            await loop.evaluate()
    finally:
        await backend.aclose()
    assert trainer.step == 0  # nothing was "trained" on the failed step
