"""Warm starts built on this machine: a tiny model fine-tuned on scripted trajectories with injected
mistakes, deliberately imperfect so that RL has room to show (``toolgym warmstart --env alfworld``).

Recipe (every number is a field of :class:`WarmStartRecipe`, whose hash names the cache entry):

1. **model**: the demo's tiny Qwen2-style model (:mod:`.models`): a byte-level BPE tokenizer
   trained with the environment's own text (rendered scripted episodes), with ``<action>`` and
   ``</action>`` as whole tokens (``whole_action_tags``: otherwise BPE fuses the tag with the
   action's first word, and the action is no longer a token-for-token copy of the listed
   admissible action), the compact chat template, weights drawn from ``seed``.
2. **data**: the environment's oracle (``Env.scripted_action``: ALFWorld's full-knowledge
   planner, made to search for what it could not see, in natural order, see :func:`toolgym.plugins.alfworld.expert.alfworld_searcher`; WebShop's
   goal-aware shopper) plays ``episodes`` training-split tasks, but with
   probability ``mistake_rate`` per turn a random admissible action replaces the oracle's (the
   oracle then recovers from wherever that led). Turns are written ``<action>…</action>`` without
   the oracle's reasoning, which names hidden facts (where the object lies) that a policy cannot
   see and costs tokens a tiny model cannot use. The mistaken turns stay in the data (the warm
   start imitates a noisy expert); episodes that fail within the step limit are dropped.
3. **SFT**: cross-entropy on the model-written tokens (optionally plus ``sft_context_weight`` times
   language modelling on the prompts and observations) for a fixed budget of ``sft_max_steps``,
   checked every ``sft_check_every`` steps by success on ``sft_val_tasks`` tasks of the *training*
   split (never the held-out ones); the checks are a report, and stop SFT only when a recipe opts in
   with ``sft_target``.

ALFWorld's shipped recipe adds what docs/notes/warmstart.md found the tiny policy needs: a short
observable thought before each action (``think_hint``: ``<think>cup in reach</think>``; with ``think_plan``
also ``cabinet 4 not listed`` or ``to microwave`` before a ``go to``), targets on
the expert's own turns only (``expert_only``), injected slips followed by the expert's way out of
them (``invalid_rate``), rows balanced by action (``sft_balance``) and a space-digit token
(``spaced_digits``).

Why it stays imperfect: the policy sees only the last two steps, so it cannot remember where it
already looked; the mistakes add noise; and the SFT budget is short. The result is a Hugging Face directory under
``$TOOLGYM_CACHE/warmstart/NAME-HASH`` with ``warmstart.json`` (recipe, losses, validation checks, and
what the floats depended on: torch version, CPU kernels, threads), built once and reused; ``toolgym
train`` takes it as ``model.path: warmstart:NAME``.

Determinism: on one machine, a build is a function of its recipe and ``threads``: the scripted data
draw their mistakes from (seed, state, turn), episodes come back in request order, SFT batches come
from seeded generators, torch runs with a fixed thread count and its deterministic algorithms
(:mod:`.floats`), and validation never touches the weights. Another CPU or torch may round
differently; the fixed step budget keeps such a difference small instead of turning it into
another early stop.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import random
import re
import shutil
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from toolgym.core.errors import ConfigError
from toolgym.training.warmstart.floats import deterministic_torch, float_provenance
from toolgym.training.warmstart.recipe import (  # noqa: F401  (also reachable from the build)
    KEYED_WHEN_SET,
    RECIPES,
    WarmStartRecipe,
    cache_dir,
    cached,
    find_built,
    recipe,
    resolve,
)
from toolgym.training.warmstart.sft import Progress, sft_lr_at, sft_with_checks, validation_engine

_ACTION = re.compile(r"<action>(.*?)</action>", re.S)


# -- scripted data with injected mistakes ----------------------------------------------------------


class NoExpert:
    """The expert of an environment that has none of its own (see :func:`expert_of`): the oracle's
    commands unchanged, the environment's ``admissible`` list, no thoughts, no slips."""

    def __init__(self, env: Any) -> None:
        self.env = env

    def command(self, oracle: str, order: str = "natural") -> str:
        return oracle

    def admissible(self) -> list[str]:
        return [a for a in getattr(self.env, "admissible", None) or [] if a != "help"]

    def thought(self, admissible: list[str]) -> str | None:
        return None

    def plan(self, admissible: list[str], command: str) -> str | None:
        return None

    def slips(self, admissible: list[str]) -> list[list[str]]:
        return []


def expert_of(env: Any) -> Any:
    """The warm-start expert an environment provides through its ``warmstart_expert()`` method (ALFWorld's
    searcher that cannot see inside receptacles, WebShop's shopper that knows only what pages show),
    else :class:`NoExpert`. An expert has ``command(oracle, order)``, ``admissible()``,
    ``thought(admissible)``, ``plan(admissible, command)`` and ``slips(admissible)``."""
    make = getattr(env, "warmstart_expert", None)
    return make() if callable(make) else NoExpert(env)


def invalid_variants(command: str, previous: str | None, admissible: list[str]) -> list[list[str]]:
    """Inadmissible actions of the kinds a tiny policy writes (docs/notes/warmstart.md), one list per
    kind: its previous action again where that no longer applies, and the expert's command with one
    number miscopied (``take cellphone 1`` where ``cellphone 2`` lies there). Empty kinds are left out."""
    listed = set(admissible)
    repeat = [previous] if previous and previous not in listed else []
    miscopied = []
    for m in re.finditer(r"\d+", command):
        for n in range(1, 10):
            wrong = f"{command[: m.start()]}{n}{command[m.end() :]}"
            if wrong != command and wrong not in listed and wrong != previous:
                miscopied.append(wrong)
    return [kind for kind in (repeat, miscopied) if kind]


def noisy_policy(
    chat: Any,
    *,
    rate: float,
    seed: int,
    order: str = "natural",
    invalid_rate: float = 0.0,
    think: bool = False,
    plan: bool = False,
) -> Any:
    """A scripted policy that writes ``<action>CMD</action>`` from the oracle's command (for
    ALFWorld, through its searcher: see :func:`expert_of`), replaced with probability ``rate`` by a random
    admissible action. Choices are a function of (seed,
    environment anchor, turn), so the data does not depend on scheduling order."""
    from toolgym.core.rollout.policy import ScriptedPolicy
    from toolgym.core.types import GenerationResult

    class NoisyScripted(ScriptedPolicy):
        name = "scripted-noisy"

        def __init__(self, chat: Any) -> None:
            super().__init__(chat)
            self.injected: set[tuple[str, int]] = set()
            """(anchor, turn) of every turn whose action was injected (see :func:`expert_turns_only`)."""

        async def act(self, env: Any) -> GenerationResult:
            text = await env.scripted_action()
            if text is None:
                from toolgym.core.rollout.policy import TurnFailed

                raise TurnFailed(f"environment {type(env).__name__} has no scripted policy for this state")
            found = _ACTION.search(text)
            if found is None:  # free text (a tool call, a final answer): the expert's own words, no injection
                return GenerationResult(
                    output_ids=self.chat.encode(text) + self._eos, logprobs=None, finish_reason="stop"
                )
            expert = expert_of(env)
            command = expert.command(found.group(1).strip(), order)
            listed, anchor = expert.admissible(), env.anchor()
            turn = len(getattr(env, "history", ()) or ())
            key = hashlib.sha256(f"{seed}|{anchor}|{turn}|{command}".encode()).digest()
            rng = random.Random(int.from_bytes(key[:8], "little"))
            if rng.random() < rate:
                others = [a for a in listed if a != command]
                if others:
                    command = rng.choice(others)
                    self.injected.add((anchor, turn))
            elif invalid_rate and rng.random() < invalid_rate:
                history = getattr(env, "history", None) or []
                previous = history[-1][1] if history else None
                wrong = invalid_variants(command, previous, listed) + expert.slips(listed)
                if wrong:
                    command = rng.choice(rng.choice(wrong))
                    self.injected.add((anchor, turn))
            thought = expert.thought(listed) if think else None
            step_plan = expert.plan(listed, command) if thought and plan else None
            thought = f"{thought}, {step_plan}" if step_plan else thought
            out = (f"<think>{thought}</think>" if thought else "") + f"<action>{command}</action>"
            return GenerationResult(
                output_ids=self.chat.encode(out) + self._eos, logprobs=None, finish_reason="stop"
            )

    return NoisyScripted(chat)


def expert_turns_only(traj: Any, injected: set[tuple[str, int]]) -> Any:
    """``traj`` with the loss mask cleared on the turns whose action was injected (``injected``
    holds their (anchor, turn)): they stay in the context of later turns but are not targets. The
    k-th assistant segment is the k-th step's action (one model call per turn)."""
    marked = {s.index for s in traj.steps if (s.anchor, s.index) in injected}
    if not marked:
        return traj
    segments, k = [], 0
    for seg in traj.segments:
        if seg.role == "assistant":
            if k in marked:
                seg = seg.model_copy(update={"loss_mask": [0] * len(seg.loss_mask)})
            k += 1
        segments.append(seg)
    return traj.model_copy(update={"segments": segments})


def action_kind(tokenizer: Any, row: Any) -> str:
    """What a row's target does: the first word of its action (``go``, ``take``, ``click[…``)."""
    import numpy as np

    text = tokenizer.decode(row.input_ids[np.asarray(row.loss_mask, dtype=bool)], skip_special_tokens=True)
    found = _ACTION.search(text)
    words = (found.group(1) if found else text).split()
    return words[0].split("[")[0] if words else ""


# -- build -------------------------------------------------------------------------------------------


def build(
    r: WarmStartRecipe,
    *,
    progress: Progress | None = None,
    threads: int = 2,
    force: bool = False,
    device: str = "cpu",
) -> Path:
    """Build (once; cached under :func:`cache_dir`) the warm start of recipe ``r``; returns its
    directory. A partial build never becomes visible: it is written aside and renamed.

    ``device`` (``cpu`` or ``cuda``) is where SFT and the validation rollouts run; it is not part of
    the recipe (the cache key): a GPU build follows the same recipe with other floating-point rounding.
    """
    out = cache_dir(r)
    built = find_built(r)
    if built is not None and not force:
        return built
    sft_lr_at(r, 0)  # a bad schedule fails here, before minutes of scripted data
    if r.sft_freeze_vision and r.model is None:
        raise ConfigError(
            f"sft_freeze_vision applies to a vision-language warm start (model: tiny-qwen3-vl or tiny-vl); the {r.name} recipe builds a text model"
        )
    if r.sft_target is not None and r.sft_val_tasks < 1:
        raise ConfigError(
            "sft_target stops SFT on validation success, which needs sft_val_tasks of 1 or more"
        )
    device = _device(device)
    with deterministic_torch(threads, device):
        if r.model is not None:  # a vision-language model from screenshots (training.warmstart.vision)
            from toolgym.training.warmstart.vision import build_vision, check

            check(r)
            made = asyncio.run(build_vision(r, progress or (lambda *a: None), threads, device))
            _publish(made["model"].cpu(), made["tokenizer"], made["info"], out, made["processor"])
            return out
        return asyncio.run(_build(r, out, progress or (lambda *a: None), threads, device))


def _device(name: str) -> str:
    import torch

    if name not in ("cpu", "cuda") and not name.startswith("cuda:"):
        raise ConfigError(f"device must be cpu or cuda, got {name!r}")
    if name != "cpu" and not torch.cuda.is_available():
        raise ConfigError(f"device {name!r} asked for, but torch sees no CUDA GPU here")
    return name


async def _build(
    r: WarmStartRecipe, out: Path, progress: Progress, threads: int, device: str = "cpu"
) -> Path:
    from toolgym.core.registry import get_registry
    from toolgym.core.sandbox import LazySandboxBackend

    sandboxes = LazySandboxBackend(
        get_registry(), "auto"
    )  # opened only when the env's tools need one (math-python)
    try:
        return await _build_in(r, out, progress, threads, device, sandboxes)
    finally:
        await sandboxes.aclose()


async def _build_in(
    r: WarmStartRecipe, out: Path, progress: Progress, threads: int, device: str, sandboxes: Any
) -> Path:
    from toolgym.core.llm.local.transformers_backend import TransformersBackend
    from toolgym.core.registry import get_registry
    from toolgym.core.rollout.config import EngineConfig
    from toolgym.core.rollout.engine import RolloutEngine, plan_episodes
    from toolgym.core.tokens.chat import ChatFormat
    from toolgym.training.local import models
    from toolgym.training.local.config import OptimConfig, PPOConfig
    from toolgym.training.local.loop import run_episodes
    from toolgym.training.local.sft import balance_weights, sft_rows
    from toolgym.training.local.stops import StopAtBackend, action_stops
    from toolgym.training.local.trainer import PolicyTrainer

    started = time.perf_counter()
    registry = get_registry()
    spec = registry.env(r.env)
    progress("model", 0, 1, "tokenizer and tiny model")
    whole = (
        (models.ACTION_TAGS if r.whole_action_tags else ())
        + (models.THINK_TAGS if r.think_hint else ())
        + (models.SPACED_DIGITS if r.spaced_digits else ())
        + (models.whole_names(spec) if r.whole_names else ())
    )
    model_dir = models.demo_model_dir(
        spec,
        registry,
        hidden_size=r.hidden_size,
        num_layers=r.num_layers,
        num_heads=r.num_heads,
        context=r.context,
        vocab_size=r.vocab_size,
        whole_tokens=whole,
    )
    tokenizer = models.load_tokenizer(model_dir)
    progress("model", 1, 1, str(model_dir.name))

    engine_cfg = EngineConfig(
        max_turns=r.max_turns,
        max_tokens_per_turn=r.max_tokens_per_turn,
        seed=r.seed,
        max_live_episodes=64,
        max_llm_calls=64,
    )
    data_cfg, data_kwargs = engine_cfg, r.env_kwargs
    if r.data_max_steps is not None:
        limit = next((k for k in ("max_steps", "max_turns") if k in r.env_kwargs), "max_steps")
        data_cfg = engine_cfg.model_copy(update={"max_turns": r.data_max_steps})
        data_kwargs = {**r.env_kwargs, limit: r.data_max_steps}
    if r.search_order not in ("natural", "listed"):
        raise ConfigError(f"search_order must be natural or listed, got {r.search_order!r}")
    expert = noisy_policy(
        ChatFormat(tokenizer),
        rate=r.mistake_rate,
        seed=r.seed,
        order=r.search_order,
        invalid_rate=r.invalid_rate,
        think=r.think_hint,
        plan=r.think_plan,
    )
    scripted = RolloutEngine(
        registry=registry, policy=expert, config=data_cfg, env_kwargs=data_kwargs, sandbox_backend=sandboxes
    )
    done = {"n": 0}

    def counted(_: Any) -> None:
        done["n"] += 1
        progress("data", done["n"], r.episodes, "")

    requests = plan_episodes(r.env, num_tasks=r.episodes, group_size=1, seed=r.data_seed)
    trajs = await run_episodes(scripted, requests, counted)
    data_success = sum(t.reward >= 1.0 - 1e-9 for t in trajs) / max(len(trajs), 1)
    # an errored episode (a tool call past its timeout on a loaded machine) drops out of the data: counted,
    # since two builds differ where it happened
    data_errors = sum(t.status.value == "error" for t in trajs)
    if r.expert_only:
        trajs = [expert_turns_only(t, expert.injected) for t in trajs]
    rows = [row for row in sft_rows(trajs, min_reward=1.0 - 1e-9) if row.num_tokens > 0]
    if not rows:
        raise ConfigError(
            f"none of the {len(trajs)} scripted {r.env} episodes succeeded within the step limit; raise episodes or max_steps"
        )
    errors = f" · {data_errors} episode(s) ended in an error" if data_errors else ""
    progress(
        "data", r.episodes, r.episodes, f"{len(rows)} rows · scripted success {data_success:.0%}{errors}"
    )

    weights = (
        balance_weights([action_kind(tokenizer, row) for row in rows], r.sft_balance)
        if r.sft_balance
        else None
    )
    model = models.fresh_model(model_dir, seed=r.seed, init_std=r.init_std).to(device)
    backend = TransformersBackend(
        model, tokenizer=tokenizer, device=device, max_batch_size=64, model_name=f"warmstart-{r.name}"
    )
    stops = action_stops(registry, r.env, r.env_kwargs)
    sampler = StopAtBackend(backend, stops) if stops else backend
    sft = PolicyTrainer(
        model,
        optim=OptimConfig(lr=r.sft_lr, weight_decay=r.sft_weight_decay),
        ppo=PPOConfig(micro_batch_size=32),
        pad_token_id=tokenizer.pad_token_id,
        device=device,
    )
    val_engine = validation_engine(r, registry, sampler, engine_cfg, sandboxes)
    try:
        losses, checks = await sft_with_checks(
            r, sft, rows, val_engine, progress, weights=weights, context_weight=r.sft_context_weight
        )
    finally:
        await backend.aclose()
    info = {
        "recipe": asdict(r),
        "model_dir": str(model_dir),
        "rows": len(rows),
        "scripted_success": data_success,
        "scripted_errors": data_errors,
        "sft_steps": len(losses),
        "sft_losses": losses,
        "validation": checks,
        "seconds": time.perf_counter() - started,
        "device": device,
        "floats": float_provenance(threads, device),
    }
    _publish(model.cpu(), tokenizer, info, out)
    return out


def _publish(
    model: Any, tokenizer: Any, info: dict[str, Any], out: Path, image_processor: Any = None
) -> None:
    """Write the warm start aside and rename it into place (a half-written one is never seen); a
    vision-language model's image processor goes beside it (``preprocessor_config.json``)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        model.save_pretrained(str(tmp), safe_serialization=True)
        tokenizer.save_pretrained(str(tmp))
        if image_processor is not None:
            image_processor.save_pretrained(str(tmp))
        (tmp / "warmstart.json").write_text(json.dumps(info, indent=2))
        (tmp / "READY").write_text("ok\n")
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
