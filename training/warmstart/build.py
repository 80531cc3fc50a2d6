"""Warm starts built on this machine: a tiny model fine-tuned on scripted trajectories with injected
mistakes, deliberately imperfect so that RL has room to show (``toolgym warmstart --env alfworld``).

Recipe (every number is a field of :class:`WarmStartRecipe`, whose hash names the cache entry):

1. **model**: the demo's tiny Qwen2-style model (:mod:`.models`): a byte-level BPE tokenizer
   trained with the environment's own text (rendered scripted episodes), with ``<action>`` and
   ``</action>`` as whole tokens (``whole_action_tags``: otherwise BPE fuses the tag with the
   action's first word, and the action is no longer a token-for-token copy of the listed
   admissible action), the compact chat template, weights drawn from ``seed``.
2. **data**: the environment's oracle (``Env.scripted_action``: ALFWorld's full-knowledge
   planner, made to search for what it could not see, in natural order, see :func:`alfworld_searcher`; WebShop's
   goal-aware shopper) plays ``episodes`` training-split tasks, but with
   probability ``mistake_rate`` per turn a random admissible action replaces the oracle's (the
   oracle then recovers from wherever that led). Turns are written ``<action>…</action>`` without
   the oracle's reasoning, which names hidden facts (where the object lies) that a policy cannot
   see and costs tokens a tiny model cannot use. The mistaken turns stay in the data (the warm
   start imitates a noisy expert); episodes that fail within the step limit are dropped.
3. **SFT**: cross-entropy on the model-written tokens (optionally plus ``sft_context_weight`` times
   language modelling on the prompts and observations), checked every ``sft_check_every`` steps by
   greedy success on ``sft_val_tasks`` tasks of the *training* split (never the held-out ones),
   stopping once it reaches ``sft_target`` (or after ``sft_max_steps``).

ALFWorld's shipped recipe adds what docs/warmstart.md found the tiny policy needs: a short
observable thought before each action (``think_hint``: ``<think>cup in reach</think>``; with ``think_plan``
also ``cabinet 4 not listed`` or ``to microwave`` before a ``go to``), targets on
the expert's own turns only (``expert_only``), injected slips followed by the expert's way out of
them (``invalid_rate``), rows balanced by action (``sft_balance``) and a space-digit token
(``spaced_digits``).

Why it stays imperfect: the policy sees only the last two steps, so it cannot remember where it
already looked; the mistakes add noise; and SFT stops early. The result is a Hugging Face directory under
``$TOOLGYM_CACHE/warmstart/NAME-HASH`` with ``warmstart.json`` (recipe, losses, validation checks),
built once and reused; ``toolgym train`` takes it as ``model.path: warmstart:NAME``.
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
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from toolgym.core.errors import ConfigError

Progress = Callable[[str, int, int, str], None]
"""(phase, done, total, note) → None."""

_ACTION = re.compile(r"<action>(.*?)</action>", re.S)


@dataclass(frozen=True)
class WarmStartRecipe:
    """Everything that determines a warm start; see the module docstring."""

    name: str
    env: str
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    """Environment options of the scripted data and the validation tasks (training split)."""
    episodes: int = 400
    mistake_rate: float = 0.1
    """Probability per turn that a random admissible action replaces the oracle's."""
    invalid_rate: float = 0.0
    """Probability per turn that the previous action is written again where it is no longer admissible
    (ALFWorld answers "Nothing happens."; the oracle then goes on): the data then shows how to get out
    of the loop a tiny policy falls into, repeating its last action (docs/warmstart.md)."""
    expert_only: bool = False
    """Train only on the expert's own turns: the injected mistakes (random and invalid actions) stay in
    the episodes, so the prompts after them show a mistake and its way out, but are not targets."""
    data_max_steps: int | None = None
    """Step limit of the scripted episodes (None: the environment's, ``env_kwargs``); a longer one
    keeps the episodes whose mistakes cost many steps."""
    think_hint: bool = False
    """Each expert turn starts with a short observable thought, ``<think>cup in reach</think>`` (see
    :func:`alfworld_thought`): the object sought and whether the admissible list offers to take it."""
    think_plan: bool = False
    """With ``think_hint``: before each ``go to`` the thought also says whether the next receptacle of
    the kind it stands at is listed, or where it carries the object (:func:`alfworld_plan`)."""
    search_order: str = "natural"
    """ALFWorld's searching expert visits receptacles in ``natural`` order (type, then number:
    cabinet 9, cabinet 10) or in the admissible list's string order (``listed``: cabinet 1, cabinet
    10, cabinet 11, …, cabinet 2); see :func:`alfworld_searcher`."""
    seed: int = 0
    hidden_size: int = 64
    num_layers: int = 2
    num_heads: int = 2
    context: int = 1024
    """The tiny model's context (``max_position_embeddings``): WebShop's result pages with the history
    window run past 1,024 tokens of the 1,024-word tokenizer."""
    vocab_size: int = 1024
    """The tokenizer's vocabulary, learnt by BPE from the environment's corpus. At 1,024 WebShop's words
    fall apart (``office chair`` is `` of`` ``f`` ``ic`` ``e`` `` ch`` ``a`` ``ir``): the search query the
    policy copies from the instruction is two to three times as many tokens, and every page as long."""
    init_std: float = 0.08
    whole_action_tags: bool = True
    """``<action>`` and ``</action>`` as single tokens (see :data:`.models.ACTION_TAGS`)."""
    spaced_digits: bool = False
    """A space and a digit as one token (see :data:`.models.SPACED_DIGITS`)."""
    whole_names: bool = False
    """The names the environment lists as whole tokens (``whole_token_names()``; WebShop: the catalog's
    product ids), so that clicking a listed result is a one-token copy instead of ten characters."""
    sft_lr: float = 3e-3
    sft_weight_decay: float = 0.1
    sft_batch_size: int = 32
    sft_balance: float = 0.0
    """Rows drawn in proportion to ``count(kind) ** -sft_balance``, the kind being the action's first
    word (see :func:`.sft.balance_weights`; 0: every row alike)."""
    sft_context_weight: float = 0.0
    """Weight of language modelling on the rows' context (prompt and observations) beside the loss on
    the actions; see :meth:`~.trainer.PolicyTrainer.sft_step`."""
    sft_max_steps: int = 600
    sft_decay_steps: int = 0
    """The last ``sft_decay_steps`` of ``sft_max_steps`` anneal the learning rate linearly from ``sft_lr`` down
    to ``sft_lr / sft_decay_steps`` (0: a constant rate throughout; see :func:`sft_lr_at`). The steps before
    are the constant-rate recipe's, batch for batch, so a build with decay extends the one without."""
    sft_check_every: int = 50
    sft_val_tasks: int = 24
    sft_target: float = 0.3
    sft_val_temperature: float = 0.0
    """Sampling temperature of the validation checks (0: greedy; the learning table's held-out
    evaluation samples at 0.4, and a greedy policy with a short history window can loop for ever)."""
    max_turns: int = 30
    max_tokens_per_turn: int = 24
    data_seed: int = 500_000
    """Environment seeds of the scripted tasks start here (RL tasks start at 0: they differ)."""
    val_seed: int = 900_000
    val_env_kwargs: dict[str, Any] = field(default_factory=dict)
    """Environment options of the validation tasks over ``env_kwargs`` (WebShop: another split than the
    scripted data's, so that validation measures goals the warm start has not seen; its training split
    has only 500 goals, and 800 scripted episodes cover most of them)."""

    def key(self) -> str:
        """The cache key: every field, except that fields added since (:data:`KEYED_WHEN_SET`) count only
        when they differ from their default, so adding a field does not orphan the warm starts built before."""
        fields = {k: v for k, v in asdict(self).items() if k not in KEYED_WHEN_SET or v != KEYED_WHEN_SET[k]}
        return hashlib.sha256(json.dumps({**fields, "v": 1}, sort_keys=True).encode()).hexdigest()[:12]


KEYED_WHEN_SET: dict[str, Any] = {"context": 1024, "vocab_size": 1024, "val_env_kwargs": {}, "whole_names": False, "sft_decay_steps": 0}
"""Recipe fields added after the shipped warm starts were keyed, with their defaults."""


RECIPES: dict[str, WarmStartRecipe] = {
    "alfworld": WarmStartRecipe(
        name="alfworld", env="alfworld-verl", env_kwargs={"history_length": 2, "max_steps": 30, "split": "train"},
        # docs/warmstart.md: the plain recipe (400 episodes, every turn a target, no thought) stayed at 0 % for
        # 600-3,000 SFT steps: teacher-forced it never wrote `take` where the task's object lay (0 of 28); a short
        # observable thought, expert-only targets, rows balanced by action, more episodes and recovery examples
        # after injected slips brought `take` to 64 % and held-out success to 1-7 %; the plan in the thought and 2,800
        # steps to 9.6 % (480 held-out tasks, T = 0.4); 700 more steps whose rate falls linearly to 25.8 % (the first
        # 2,800 are that build's, batch for batch: docs/warmstart.md, thirteenth session)
        episodes=1200, data_max_steps=50, expert_only=True, invalid_rate=0.3, think_hint=True, think_plan=True,
        spaced_digits=True, sft_balance=0.5, sft_max_steps=3500, sft_decay_steps=700, sft_check_every=700, sft_target=0.9,
        sft_val_temperature=0.4,
        max_tokens_per_turn=32,
    ),
    "webshop": WarmStartRecipe(
        # scripted data on WebShop's 1,000 `eval` goals, validation on the 500 `train` goals it never saw (the RL
        # configs' training tasks); the held-out figures use the `test` goals
        name="webshop", env="webshop-verl", env_kwargs={"history_length": 2, "max_turns": 15, "split": "eval"},
        val_env_kwargs={"split": "train"},
        # the expert is the page shopper (webshop_shopper): the oracle opens the goal's own product, which the page
        # picks out in about a third of the tasks, and its warm start stayed at 0 % (docs/warmstart.md, WebShop)
        # a 4,096-word vocabulary learnt from the catalog keeps the shop's words whole (at 1,024 validation on unseen goals
        # stayed at 0-6 %), and the product ids are whole tokens (without them: 12-28 % after 1,750 steps, 19 % held-out);
        # validation (32 unseen goals, T = 0.4): 0, 6, 28, 19, 41 % at 250-1,250 steps, where it stops
        vocab_size=4096, whole_names=True, max_turns=15, max_tokens_per_turn=32, context=2048, episodes=800, expert_only=True,
        sft_max_steps=3000, sft_check_every=250, sft_val_tasks=32, sft_target=0.35, sft_val_temperature=0.4,
    ),
    "math_python": WarmStartRecipe(
        # the ARPO-vs-GRPO rows: the expert writes the problem's reference program as a python tool call,
        # then boxes what it printed; the tiny model must pick the program by the question's wording and
        # copy its numbers digit by digit (Qwen isolates digits, so no spaced-digit tokens here)
        name="math_python", env="math-python", env_kwargs={"split": "train"},
        # validation (32 tasks, T = 0.4) climbs steeply: 0, 6, 22, 69 % at 100-400 steps; checked every 50 steps it
        # stops inside 20-60 %
        episodes=800, max_turns=4, max_tokens_per_turn=256, sft_max_steps=1200, sft_check_every=50, sft_val_tasks=32,
        sft_target=0.3, sft_val_temperature=0.4,
    ),
}


def recipe(name: str, **changes: Any) -> WarmStartRecipe:
    """The shipped recipe ``name`` with ``changes`` applied (unknown fields: one clear error)."""
    if name not in RECIPES:
        raise ConfigError(f"no warm-start recipe for {name!r}; use one of {', '.join(RECIPES)}")
    known = set(WarmStartRecipe.__dataclass_fields__) - {"name"}
    unknown = sorted(set(changes) - known)
    if unknown:
        raise ConfigError(f"unknown warm_start key(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    return replace(RECIPES[name], **changes)


def cache_dir(r: WarmStartRecipe) -> Path:
    from toolgym.core.llm.local.tiny import cache_root

    return cache_root() / "warmstart" / f"{r.name}-{r.key()}"


def cached(name: str) -> Path | None:
    """The directory of a built warm start for recipe ``name`` (shipped settings), or None."""
    path = cache_dir(recipe(name))
    return path if (path / "READY").exists() else None


def resolve(name: str) -> Path:
    """``warmstart:NAME`` → its built directory; a clear error naming the command when absent."""
    path = cached(name)
    if path is None:
        raise ConfigError(f"the {name} warm start is not built yet; run `toolgym warmstart --env {name}` first (about 25 minutes on 2 CPU cores for ALFWorld, cached)")
    return path


# -- scripted data with injected mistakes ----------------------------------------------------------


def admissible_actions(env: Any) -> list[str]:
    """The actions an environment lists as admissible now (ALFWorld: ``env.admissible``; WebShop:
    its session's clickables and search)."""
    listed = getattr(env, "admissible", None)
    if listed:
        return [a for a in listed if a != "help"]
    session = getattr(env, "session", None)
    if session is not None and hasattr(session, "available_actions"):
        avail = session.available_actions()
        out = [f"click[{c}]" for c in avail.get("clickables", [])]
        if avail.get("has_search_bar"):
            out.append("search[item]")
        return out
    return []


def alfworld_searcher(env: Any, oracle: str, order: str = "natural") -> str:
    """What an expert that cannot see inside receptacles does where ALFWorld's full-knowledge
    oracle would walk straight to a hidden object (or lamp): look in receptacles one after another
    in ``order`` (after the current one, wrapping round; see :func:`place_order`), opening
    closed ones, and take a goal object as soon as one is in view. Every other step is the oracle's.
    A policy that sees only observations can learn this; it cannot learn the oracle's shortcut."""
    world, goal = getattr(env, "world", None), getattr(env, "goal", None)
    if world is None or goal is None or not oracle.startswith("go to "):
        return oracle
    here = world.receptacles.get(world.at) if world.at else None
    if world.holding is None:
        wanted = [n for n in (world.contents[here.name] if here else ())
                  if world.items[n].otype == goal.obj and (goal.recep is None or here is None or here.rtype != goal.recep)]
        if here is not None and wanted and (here.opened or not here.openable):
            return f"take {wanted[0]} from {here.name}"
        if here is not None and here.openable and not here.opened and (goal.recep is None or here.rtype != goal.recep):
            return f"open {here.name}"
    elif goal.toggle is None:
        return oracle  # carrying to a named appliance or receptacle: nothing hidden
    elif here is not None and any(world.items[n].otype == goal.toggle for n in world.contents[here.name]):
        return oracle
    key = place_order if order == "natural" else _listed
    places = sorted((c[len("go to "):] for c in world.admissible_commands() if c.startswith("go to ")), key=key)
    if not places:
        return oracle
    after = [p for p in places if world.at is None or key(p) > key(world.at)]
    return f"go to {(after or places)[0]}"


def webshop_shopper(env: Any, oracle: str) -> str:
    """WebShop's command from a shopper that knows only what the pages show (see
    :func:`toolgym.plugins.webshop.oracle.shopper_step`) where the oracle would open the goal's own
    product, which the page rarely singles out; other environments: ``oracle``."""
    from toolgym.plugins.webshop.oracle import shopper_step
    from toolgym.plugins.webshop.session import ShopSession

    session = getattr(env, "session", None)
    if not isinstance(session, ShopSession):
        return oracle
    step = shopper_step(session)
    return step[0] if step is not None else oracle


def place_order(name: str) -> tuple[str, int]:
    """Receptacles in natural order: by type, then by number ("cabinet 2" before "cabinet 10"), so
    the next place is the same type with its number plus one, or the next type's first. (The
    admissible list's string order jumps cabinet 1 → cabinet 10 and cabinet 19 → cabinet 2.)"""
    kind, _, number = name.rpartition(" ")
    return (kind, int(number)) if number.isdigit() else (name, 0)


def _listed(name: str) -> tuple[str, int]:
    return (name, 0)


def alfworld_thought(env: Any, admissible: list[str]) -> str | None:
    """A thought a policy can check against its own prompt: what it is after and whether it is in
    reach now: ``cup in reach`` when the admissible list offers ``take cup …``, ``cup not in reach``
    while it searches, ``desklamp in reach`` once it holds the object of a look task and a lamp is
    there to use, ``holding cup`` while it carries the object on. The decision that a tiny policy
    misses without it ("take the object the task names when it is listed") becomes two one-step
    matches: copy the object's name from the task, then find it after ``take`` in the list."""
    world, goal = getattr(env, "world", None), getattr(env, "goal", None)
    if world is None or goal is None:
        return None
    held = world.items[world.holding] if world.holding else None
    if held is not None and held.otype == goal.obj:
        if goal.toggle is None:
            return f"holding {goal.obj}"
        sought, verb = goal.toggle, "use"
    else:
        sought, verb = goal.obj, "take"
    reach = any(a.startswith(f"{verb} {sought} ") for a in admissible)
    return f"{sought} {'in' if reach else 'not in'} reach"


def alfworld_plan(env: Any, admissible: list[str], command: str) -> str | None:
    """What :func:`alfworld_thought` adds with ``think_plan`` before a ``go to``: while searching,
    whether the next receptacle of the kind it stands at is listed (``cabinet 4 listed`` /
    ``cabinet 4 not listed``: in the second case the search moves on to the next kind); while
    carrying, where to (``to microwave``). Each is a one-step check against the prompt, like
    ``in reach``, instead of the lookup a tiny policy gets wrong (docs/warmstart.md)."""
    world, goal = getattr(env, "world", None), getattr(env, "goal", None)
    if world is None or goal is None or not command.startswith("go to "):
        return None
    held = world.items[world.holding] if world.holding else None
    if held is not None and held.otype == goal.obj:
        return "to " + command[len("go to "):].rpartition(" ")[0]
    candidate = _next_of_kind(world.at)
    if candidate is None:
        return None
    return f"{candidate} {'listed' if f'go to {candidate}' in admissible else 'not listed'}"


def _next_of_kind(place: str | None) -> str | None:
    """``cabinet 3`` → ``cabinet 4`` (listed or not); None for no place or one without a number."""
    kind, _, number = (place or "").rpartition(" ")
    return f"{kind} {int(number) + 1}" if number.isdigit() else None


def invalid_variants(command: str, previous: str | None, admissible: list[str]) -> list[list[str]]:
    """Inadmissible actions of the kinds a tiny policy writes (docs/warmstart.md), one list per
    kind: its previous action again where that no longer applies, and the expert's command with one
    number miscopied (``take cellphone 1`` where ``cellphone 2`` lies there). Empty kinds are left out."""
    listed = set(admissible)
    repeat = [previous] if previous and previous not in listed else []
    miscopied = []
    for m in re.finditer(r"\d+", command):
        for n in range(1, 10):
            wrong = f"{command[:m.start()]}{n}{command[m.end():]}"
            if wrong != command and wrong not in listed and wrong != previous:
                miscopied.append(wrong)
    return [kind for kind in (repeat, miscopied) if kind]


def alfworld_slips(env: Any, admissible: list[str]) -> list[list[str]]:
    """The two inadmissible actions a tiny ALFWorld policy was seen to loop on (docs/warmstart.md),
    one list per kind: going on to the next number of the receptacle it stands at where there is no
    such receptacle (``go to cabinet 4`` in a room with three), and taking the object the task names
    where none lies (``take cup 1 from cabinet 3``). In the data, the expert's next turn then shows
    that the same action is not tried again."""
    world, goal = getattr(env, "world", None), getattr(env, "goal", None)
    if world is None or goal is None or world.at is None:
        return []
    listed = set(admissible)
    out = []
    if (candidate := _next_of_kind(world.at)) is not None and f"go to {candidate}" not in listed:
        out.append([f"go to {candidate}"])
    if world.holding is None and not any(a.startswith(f"take {goal.obj} ") for a in listed):
        out.append([f"take {goal.obj} {n} from {world.at}" for n in (1, 2, 3)])
    return out


def noisy_policy(chat: Any, *, rate: float, seed: int, order: str = "natural", invalid_rate: float = 0.0, think: bool = False,
                 plan: bool = False) -> Any:
    """A scripted policy that writes ``<action>CMD</action>`` from the oracle's command (for
    ALFWorld, through :func:`alfworld_searcher`), replaced with probability ``rate`` by a random
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
                return GenerationResult(output_ids=self.chat.encode(text) + self._eos, logprobs=None, finish_reason="stop")
            command = webshop_shopper(env, alfworld_searcher(env, found.group(1).strip(), order))
            listed, anchor = admissible_actions(env), env.anchor()
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
                wrong = invalid_variants(command, previous, listed) + alfworld_slips(env, listed)
                if wrong:
                    command = rng.choice(rng.choice(wrong))
                    self.injected.add((anchor, turn))
            thought = alfworld_thought(env, listed) if think else None
            step_plan = alfworld_plan(env, listed, command) if thought and plan else None
            thought = f"{thought}, {step_plan}" if step_plan else thought
            out = (f"<think>{thought}</think>" if thought else "") + f"<action>{command}</action>"
            return GenerationResult(output_ids=self.chat.encode(out) + self._eos, logprobs=None, finish_reason="stop")

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


def build(r: WarmStartRecipe, *, progress: Progress | None = None, threads: int = 2, force: bool = False, device: str = "cpu") -> Path:
    """Build (once; cached under :func:`cache_dir`) the warm start of recipe ``r``; returns its
    directory. A partial build never becomes visible: it is written aside and renamed.

    ``device`` (``cpu`` or ``cuda``) is where SFT and the validation rollouts run; it is not part of
    the recipe (the cache key): a GPU build follows the same recipe with other floating-point rounding.
    """
    out = cache_dir(r)
    if (out / "READY").exists() and not force:
        return out
    sft_lr_at(r, 0)  # a bad schedule fails here, before minutes of scripted data
    return asyncio.run(_build(r, out, progress or (lambda *a: None), threads, _device(device)))


def _device(name: str) -> str:
    import torch

    if name not in ("cpu", "cuda") and not name.startswith("cuda:"):
        raise ConfigError(f"device must be cpu or cuda, got {name!r}")
    if name != "cpu" and not torch.cuda.is_available():
        raise ConfigError(f"device {name!r} asked for, but torch sees no CUDA GPU here")
    return name


async def _build(r: WarmStartRecipe, out: Path, progress: Progress, threads: int, device: str = "cpu") -> Path:
    from toolgym.core.registry import get_registry
    from toolgym.core.sandbox import LazySandboxBackend

    sandboxes = LazySandboxBackend(get_registry(), "auto")  # opened only when the env's tools need one (math-python)
    try:
        return await _build_in(r, out, progress, threads, device, sandboxes)
    finally:
        await sandboxes.aclose()


async def _build_in(r: WarmStartRecipe, out: Path, progress: Progress, threads: int, device: str, sandboxes: Any) -> Path:
    import torch

    from toolgym.core.llm.local.transformers_backend import TransformersBackend
    from toolgym.core.registry import get_registry
    from toolgym.core.rollout.config import EngineConfig, SamplingConfig
    from toolgym.core.rollout.engine import RolloutEngine, plan_episodes
    from toolgym.core.rollout.policy import ModelPolicy
    from toolgym.core.tokens.chat import ChatFormat
    from toolgym.training.local import models
    from toolgym.training.local.config import EvalConfig, OptimConfig, PPOConfig
    from toolgym.training.local.loop import evaluate, run_episodes
    from toolgym.training.local.sft import balance_weights, run_sft, sft_rows
    from toolgym.training.local.stops import StopAtBackend, action_stops
    from toolgym.training.local.trainer import PolicyTrainer

    started = time.perf_counter()
    torch.set_num_threads(max(1, threads))
    registry = get_registry()
    spec = registry.env(r.env)
    progress("model", 0, 1, "tokenizer and tiny model")
    whole = ((models.ACTION_TAGS if r.whole_action_tags else ()) + (models.THINK_TAGS if r.think_hint else ())
             + (models.SPACED_DIGITS if r.spaced_digits else ()) + (models.whole_names(spec) if r.whole_names else ()))
    model_dir = models.demo_model_dir(spec, registry, hidden_size=r.hidden_size, num_layers=r.num_layers, num_heads=r.num_heads,
                                      context=r.context, vocab_size=r.vocab_size, whole_tokens=whole)
    tokenizer = models.load_tokenizer(model_dir)
    progress("model", 1, 1, str(model_dir.name))

    engine_cfg = EngineConfig(max_turns=r.max_turns, max_tokens_per_turn=r.max_tokens_per_turn, seed=r.seed,
                              max_live_episodes=64, max_llm_calls=64)
    data_cfg, data_kwargs = engine_cfg, r.env_kwargs
    if r.data_max_steps is not None:
        limit = next((k for k in ("max_steps", "max_turns") if k in r.env_kwargs), "max_steps")
        data_cfg = engine_cfg.model_copy(update={"max_turns": r.data_max_steps})
        data_kwargs = {**r.env_kwargs, limit: r.data_max_steps}
    if r.search_order not in ("natural", "listed"):
        raise ConfigError(f"search_order must be natural or listed, got {r.search_order!r}")
    expert = noisy_policy(ChatFormat(tokenizer), rate=r.mistake_rate, seed=r.seed, order=r.search_order, invalid_rate=r.invalid_rate,
                          think=r.think_hint, plan=r.think_plan)
    scripted = RolloutEngine(registry=registry, policy=expert, config=data_cfg, env_kwargs=data_kwargs, sandbox_backend=sandboxes)
    done = {"n": 0}

    def counted(_: Any) -> None:
        done["n"] += 1
        progress("data", done["n"], r.episodes, "")

    requests = plan_episodes(r.env, num_tasks=r.episodes, group_size=1, seed=r.data_seed)
    trajs = await run_episodes(scripted, requests, counted)
    data_success = sum(t.reward >= 1.0 - 1e-9 for t in trajs) / max(len(trajs), 1)
    if r.expert_only:
        trajs = [expert_turns_only(t, expert.injected) for t in trajs]
    rows = [row for row in sft_rows(trajs, min_reward=1.0 - 1e-9) if row.num_tokens > 0]
    if not rows:
        raise ConfigError(f"none of the {len(trajs)} scripted {r.env} episodes succeeded within the step limit; raise episodes or max_steps")
    progress("data", r.episodes, r.episodes, f"{len(rows)} rows · scripted success {data_success:.0%}")

    weights = balance_weights([action_kind(tokenizer, row) for row in rows], r.sft_balance) if r.sft_balance else None
    model = models.fresh_model(model_dir, seed=r.seed, init_std=r.init_std).to(device)
    backend = TransformersBackend(model, tokenizer=tokenizer, device=device, max_batch_size=64, model_name=f"warmstart-{r.name}")
    stops = action_stops(registry, r.env, r.env_kwargs)
    sampler = StopAtBackend(backend, stops) if stops else backend
    sft = PolicyTrainer(model, optim=OptimConfig(lr=r.sft_lr, weight_decay=r.sft_weight_decay), ppo=PPOConfig(micro_batch_size=32),
                        pad_token_id=tokenizer.pad_token_id, device=device)
    val = EvalConfig(num_tasks=r.sft_val_tasks, seed=r.val_seed, temperature=r.sft_val_temperature)
    greedy = engine_cfg.model_copy(update={"sampling": SamplingConfig(temperature=r.sft_val_temperature), "seed": r.val_seed})
    val_engine = RolloutEngine(registry=registry, policy=ModelPolicy(sampler, greedy), config=greedy, env_kwargs={**r.env_kwargs, **r.val_env_kwargs},
                               sandbox_backend=sandboxes)
    losses: list[float] = []
    checks: list[tuple[int, float]] = []
    sft.set_lr(sft_lr_at(r, 0))
    try:
        while len(losses) < r.sft_max_steps:
            n = min(r.sft_check_every, r.sft_max_steps - len(losses))
            base = len(losses)
            note = f" · last validation {checks[-1][1]:.0%}" if checks else ""  # a check's own line says " · validation"

            def report(i: int, metrics: dict[str, Any], base: int = base, note: str = note) -> None:
                sft.set_lr(sft_lr_at(r, base + i + 1))  # the rate of the next step
                progress("sft", base + i + 1, r.sft_max_steps, f"loss {metrics['loss']:.3f}{note}")

            losses += run_sft(sft, rows, steps=n, batch_size=r.sft_batch_size, seed=r.seed * 1_000 + base, on_step=report, weights=weights,
                              context_weight=r.sft_context_weight)
            result = await evaluate(val_engine, r.env, val)
            checks.append((len(losses), result.success))
            progress("sft", len(losses), r.sft_max_steps, f"loss {losses[-1]:.3f} · validation {result.success:.0%}")
            if result.success >= r.sft_target:
                break
    finally:
        await backend.aclose()
    info = {"recipe": asdict(r), "model_dir": str(model_dir), "rows": len(rows), "scripted_success": data_success,
            "sft_steps": len(losses), "sft_losses": losses, "validation": checks, "seconds": time.perf_counter() - started,
            "device": device}
    _publish(model.cpu(), tokenizer, info, out)
    return out


def sft_lr_at(r: WarmStartRecipe, step: int) -> float:
    """The SFT learning rate of step ``step`` (0-based): ``sft_lr``, then over the last ``sft_decay_steps``
    (all of them when ``sft_max_steps`` is fewer, e.g. a shortened build) a linear ramp down to
    ``sft_lr / N`` at the final step, N being the steps of the ramp."""
    if r.sft_decay_steps < 0:
        raise ConfigError(f"sft_decay_steps must be 0 (a constant rate) or more, got {r.sft_decay_steps}")
    ramp = min(r.sft_decay_steps, r.sft_max_steps)
    left = r.sft_max_steps - step  # steps left, this one included
    if ramp == 0 or left > ramp:
        return r.sft_lr
    return r.sft_lr * max(left, 1) / ramp


def _publish(model: Any, tokenizer: Any, info: dict[str, Any], out: Path) -> None:
    """Write the warm start aside and rename it into place (a half-written one is never seen)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        model.save_pretrained(str(tmp), safe_serialization=True)
        tokenizer.save_pretrained(str(tmp))
        (tmp / "warmstart.json").write_text(json.dumps(info, indent=2))
        (tmp / "READY").write_text("ok\n")
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
