"""Warm-start recipes and their cache: what a warm start is made of (every number a field of
:class:`WarmStartRecipe`, whose hash names the cache entry), the shipped recipes, and where a built
one lives (``$TOOLGYM_CACHE/warmstart/NAME-HASH``). Building one is :mod:`.build`'s work; the
trainer's ``model.path: warmstart:NAME`` only needs this module to find it.

A build runs a fixed SFT step budget (``sft_max_steps``); validation is a report. The early stop on
validation success that the recipes once used (``sft_target``) is opt-in: on 32 sampled tasks it turned
float noise into another model (a rebuild stopped at 350 instead of 400 steps and scored
42 % held-out instead of 66 %). See docs/notes/warmstart.md, "Determinism".
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from toolgym.core.errors import ConfigError


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
    of the loop a tiny policy falls into, repeating its last action (docs/notes/warmstart.md)."""
    expert_only: bool = False
    """Train only on the expert's own turns: the injected mistakes (random and invalid actions) stay in
    the episodes, so the prompts after them show a mistake and its way out, but are not targets."""
    data_max_steps: int | None = None
    """Step limit of the scripted episodes (None: the environment's, ``env_kwargs``); a longer one
    keeps the episodes whose mistakes cost many steps."""
    think_hint: bool = False
    """Each expert turn starts with a short observable thought, ``<think>cup in reach</think>`` (see
    :func:`toolgym.plugins.alfworld.expert.alfworld_thought`): the object sought and whether the admissible list offers to take it."""
    think_plan: bool = False
    """With ``think_hint``: before each ``go to`` the thought also says whether the next receptacle of
    the kind it stands at is listed, or where it carries the object (:func:`toolgym.plugins.alfworld.expert.alfworld_plan`)."""
    search_order: str = "natural"
    """ALFWorld's searching expert visits receptacles in ``natural`` order (type, then number:
    cabinet 9, cabinet 10) or in the admissible list's string order (``listed``: cabinet 1, cabinet
    10, cabinet 11, …, cabinet 2); see :func:`toolgym.plugins.alfworld.expert.alfworld_searcher`."""
    seed: int = 0
    model: str | None = None
    """A tiny model family to fine-tune (``tiny-vl``: the vision-language model, its own tokenizer and image
    processor; see :mod:`.vision`) instead of a model and tokenizer made from the environment's text (None);
    the model-shape fields below then do not apply."""
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
    sft_freeze_vision: bool = False
    """A vision recipe's SFT trains the text model only, the vision tower keeping its initial weights
    (:func:`toolgym.core.llm.local.vlm.freeze_vision_tower`). Full fine-tuning of ``tiny-qwen3-vl``'s random
    tower on a few hundred screenshot episodes flattens its output (the image tokens stop differing
    between screenshots) before the text model learns to read it; frozen, the text model does."""
    sft_max_steps: int = 600
    """The SFT step budget: a build runs exactly this many steps (fewer only when ``sft_target`` is set and
    reached first). The shipped recipes' budgets are the steps of the builds docs/results.md reports."""
    sft_decay_steps: int = 0
    """The last ``sft_decay_steps`` of ``sft_max_steps`` anneal the learning rate linearly from ``sft_lr`` down
    to ``sft_lr / sft_decay_steps`` (0: a constant rate throughout; see :func:`sft_lr_at`). The steps before
    are the constant-rate recipe's, batch for batch, so a build with decay extends the one without."""
    sft_check_every: int = 50
    """Validation every this many SFT steps. The batches are drawn per such chunk (seed ``seed·1000 +`` its
    first step), so this also fixes which rows each step sees."""
    sft_val_tasks: int = 24
    """Tasks of each validation check (0: no checks); their success is reported in ``warmstart.json``."""
    sft_target: float | None = None
    """Opt-in early stop: end SFT at the first check whose validation success reaches this. None (the
    default): run the whole budget. A check on a few dozen sampled tasks is noisy, and stopping on it
    makes the model depend on that noise (see the module docstring)."""
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

    data_version: int = 0
    """Raised when the environment's tasks or observations for the same seeds change (math-python's splits
    made disjoint by question: version 1; miniwob_screenshot's pages named by site, not by the host's port,
    with the countdown's text fixed: version 1), so that the cache key moves with the data it was built from."""

    def key(self) -> str:
        """The cache key: every field, except that fields added since (:data:`KEYED_WHEN_SET`) count only
        when they differ from their default, so adding a field does not orphan the warm starts built before."""
        fields = {k: v for k, v in asdict(self).items() if k not in KEYED_WHEN_SET or v != KEYED_WHEN_SET[k]}
        return hashlib.sha256(json.dumps({**fields, "v": 1}, sort_keys=True).encode()).hexdigest()[:12]


KEYED_WHEN_SET: dict[str, Any] = {
    "data_version": 0,
    "context": 1024,
    "vocab_size": 1024,
    "val_env_kwargs": {},
    "whole_names": False,
    "sft_decay_steps": 0,
    "model": None,
    "sft_freeze_vision": False,
}
"""Recipe fields added after the shipped warm starts were keyed, with their defaults."""


RECIPES: dict[str, WarmStartRecipe] = {
    "alfworld": WarmStartRecipe(
        name="alfworld",
        env="alfworld-verl",
        env_kwargs={"history_length": 2, "max_steps": 30, "split": "train"},
        # docs/notes/warmstart.md: the plain recipe (400 episodes, every turn a target, no thought) stayed at 0 % for
        # 600-3,000 SFT steps: teacher-forced it never wrote `take` where the task's object lay (0 of 28); a short
        # observable thought, expert-only targets, rows balanced by action, more episodes and recovery examples
        # after injected slips brought `take` to 64 % and held-out success to 1-7 %; the plan in the thought and 2,800
        # steps to 9.6 % (480 held-out tasks, T = 0.4); 700 more steps whose rate falls linearly to 25.8 % (the first
        # 2,800 are that build's, batch for batch: docs/notes/warmstart.md, 2026-11-27, 86ae433)
        episodes=1200,
        data_max_steps=50,
        expert_only=True,
        invalid_rate=0.3,
        think_hint=True,
        think_plan=True,
        spaced_digits=True,
        sft_balance=0.5,
        sft_max_steps=3500,
        sft_decay_steps=700,
        sft_check_every=700,
        sft_val_temperature=0.4,
        max_tokens_per_turn=32,
    ),
    "webshop": WarmStartRecipe(
        # scripted data on WebShop's 1,000 `eval` goals, validation on the 500 `train` goals it never saw (the RL
        # configs' training tasks); the held-out figures use the `test` goals
        name="webshop",
        env="webshop-verl",
        env_kwargs={"history_length": 2, "max_turns": 15, "split": "eval"},
        val_env_kwargs={"split": "train"},
        # the expert is the page shopper (toolgym.plugins.webshop.expert): the oracle opens the goal's own product, which the page
        # picks out in about a third of the tasks, and its warm start stayed at 0 % (docs/notes/warmstart.md, WebShop)
        # a 4,096-word vocabulary learnt from the catalog keeps the shop's words whole (at 1,024 validation on unseen goals
        # stayed at 0-6 %), and the product ids are whole tokens (without them: 12-28 % after 1,750 steps, 19 % held-out);
        # validation (32 unseen goals, T = 0.4): 0, 6, 28, 19, 41 % at 250-1,250 steps; the page's build stopped there
        # (early stop at 35 %), and 1,250 is now the fixed budget
        vocab_size=4096,
        whole_names=True,
        max_turns=15,
        max_tokens_per_turn=32,
        context=2048,
        episodes=800,
        expert_only=True,
        sft_max_steps=1250,
        sft_check_every=250,
        sft_val_tasks=32,
        sft_val_temperature=0.4,
    ),
    "math_python": WarmStartRecipe(
        # the ARPO-vs-GRPO rows: the expert writes the problem's reference program as a python tool call,
        # then boxes what it printed; the tiny model must pick the program by the question's wording and
        # copy its numbers digit by digit (Qwen isolates digits, so no spaced-digit tokens here)
        name="math_python",
        env="math-python",
        env_kwargs={"split": "train"},
        # validation (32 tasks, T = 0.4) climbs steeply: 0, 3, 12, 16, 22, 50 % at 150-400 steps. The page's build stopped there
        # (early stop at 30 %; 65.6 % held-out); a rebuild elsewhere, its losses 1e-7 off from step 2, stopped at 350
        # (42.2 %). So 400 steps is now the fixed budget
        episodes=800,
        max_turns=4,
        max_tokens_per_turn=256,
        sft_max_steps=400,
        sft_check_every=50,
        sft_val_tasks=32,
        sft_val_temperature=0.4,
        data_version=1,
    ),
    "miniwob_screenshot": WarmStartRecipe(
        # the pixels benchmark (bench/miniwob_pixels.py): tiny-qwen3-vl sees only the task area's screenshot, with
        # no element ids drawn, and acts by coordinates; the scripted solvers click the centre of their element.
        # click-test and focus-text place their one target at random, so a policy that ignores the image hits
        # it only where the random places overlap (the benchmark measures that blind baseline beside it).
        # The tower stays as built (sft_freeze_vision): trained along, it flattened within a few hundred steps and
        # the text model never learned to read it (tiny_vl.py); frozen, the clicks follow the target from about
        # 500 steps on at this rate. tiny-vl (Qwen2.5-VL-shaped) has no position in its features and cannot.
        name="miniwob_screenshot",
        env="miniwob",
        env_kwargs={
            "tasks": "click-test,focus-text",
            "observation": "screenshot",
            "actions": "coordinates",
            "screenshot_scale": 1,
            "max_images": 1,
            "time_limit": 60,
            "max_turns": 3,
        },
        model="tiny-qwen3-vl",
        mistake_rate=0.0,
        episodes=800,
        max_turns=3,
        max_tokens_per_turn=40,
        sft_lr=1e-3,
        sft_weight_decay=0.0,
        sft_batch_size=8,
        sft_freeze_vision=True,
        sft_max_steps=800,
        sft_check_every=400,
        sft_val_tasks=16,
        data_version=1,
    ),
}


def recipe(name: str, **changes: Any) -> WarmStartRecipe:
    """The shipped recipe ``name`` with ``changes`` applied (unknown fields: one clear error)."""
    if name not in RECIPES:
        raise ConfigError(f"no warm-start recipe for {name!r}; use one of {', '.join(RECIPES)}")
    known = set(WarmStartRecipe.__dataclass_fields__) - {"name"}
    unknown = sorted(set(changes) - known)
    if unknown:
        raise ConfigError(
            f"unknown warm_start key(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}"
        )
    return replace(RECIPES[name], **changes)


def cache_dir(r: WarmStartRecipe) -> Path:
    from toolgym.core.llm.local.tiny import cache_root

    return cache_root() / "warmstart" / f"{r.name}-{r.key()}"


def find_built(r: WarmStartRecipe) -> Path | None:
    """The directory of a built warm start of ``r``, or None: its own cache entry, else (``r`` without an
    early stop) an early-stop build of the same recipe that ran exactly ``r``'s budget, which is the same
    model (validation never touches the weights, and the batches and learning rates of those steps are
    ``r``'s). So the builds made before the budgets were fixed stay in use."""
    path = cache_dir(r)
    if (path / "READY").exists():
        return path
    if r.sft_target is not None or not path.parent.is_dir():
        return None
    for other in sorted(path.parent.glob(f"{r.name}-*")):
        if (other / "READY").exists() and _same_model(r, other / "warmstart.json"):
            return other
    return None


def _same_model(r: WarmStartRecipe, info_path: Path) -> bool:
    try:
        info = json.loads(info_path.read_text())
        built = WarmStartRecipe(**info["recipe"])
    except (OSError, ValueError, KeyError, TypeError):
        return False
    if built.sft_target is None or info.get("sft_steps") != r.sft_max_steps:
        return False
    if built.sft_decay_steps and built.sft_max_steps != r.sft_max_steps:
        return False  # the schedule's ramp ends at the budget: another budget, other rates
    return replace(built, sft_target=None, sft_max_steps=r.sft_max_steps) == r


def cached(name: str) -> Path | None:
    """The directory of a built warm start for recipe ``name`` (shipped settings), or None."""
    return find_built(recipe(name))


def resolve(name: str) -> Path:
    """``warmstart:NAME`` → its built directory; a clear error naming the command when absent."""
    path = cached(name)
    if path is None:
        raise ConfigError(
            f"the {name} warm start is not built yet; run `toolgym warmstart --env {name}` first (about 25 minutes on 2 CPU cores for ALFWorld, cached)"
        )
    return path
