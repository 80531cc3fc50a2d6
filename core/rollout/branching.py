"""ARPO branching inside one episode: where it may fork, and the forks it asks for.

The turn loop asks :meth:`EpisodeBranching.may_fork` before each model call; when it may, it
takes a :class:`Checkpoint` (the token state right after the last tool result) and, once the
call has returned, hands the result to :meth:`EpisodeBranching.after_generation`, which measures
the entropy of the new tokens against the episode's first turn, lets the group's
:class:`~toolgym.core.rollout.arpo.BranchBudget` decide, and calls ``fork`` once per fork granted. The
entropy rule and the budget are in :mod:`toolgym.core.rollout.arpo`; starting a fork is the caller's.

A fork rebuilds its environment (and stateful sandboxes) by replaying the parent's actions on a
fresh instance, and keeps the parent's recorded tokens as its prefix. Where a tool is not
deterministic (the time, a random number, a server that changed), the replayed state is not the
one the recorded observations describe. :func:`replay_divergence` compares each replayed step with
the recorded one (the reset's prompt, each observation's text, step reward, validity, and that the
replay did not end the episode) and the fork is refused (:class:`ForkRefused`) at the first
difference: the episode it came from goes on unforked, the fork's budget slot goes back to the
group (``fill_budget`` may fill it with a fresh rollout), and the engine counts it
(``EngineStats.forks_refused``). Refusing, rather than taking the replayed observations, is what
token faithfulness requires: the recorded prefix is what the model was conditioned on when it
sampled every action of that prefix, and what the fork shares with its parent (``branch_point``,
ARPO's shared-prefix advantage attribution); splicing the replayed observations in would make a
prefix no model call ever saw, with actions sampled under another context. Images are not
compared (a re-rendered screenshot of the same state may differ in pixels); their text is.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from toolgym.core.rollout.arpo import BranchBudget, turn_entropy
from toolgym.core.rollout.requests import EpisodeRequest, sampling_seed
from toolgym.core.tokens.assembly import TokenAssembler
from toolgym.core.trajectory import Step
from toolgym.core.types import GenerationResult


class ForkRefused(Exception):
    """A fork whose replay did not reproduce its parent's recorded prefix (the reason says where);
    the engine drops it without a trajectory and counts it."""


def replay_divergence(
    recorded: Step, observation: str, reward: float, valid: bool, ended: bool
) -> str | None:
    """Why a replayed step disagrees with the ``recorded`` one, or None when it matches: its
    ``observation`` text, step ``reward`` and validity must be the recorded ones, and it must not
    end the episode (the parent went on after it)."""
    where = f"replaying step {recorded.index}"
    if observation != recorded.observation:
        at = next(
            (i for i, (a, b) in enumerate(zip(observation, recorded.observation, strict=False)) if a != b),
            min(len(observation), len(recorded.observation)),
        )
        return (
            f"{where} gave another observation than the parent's (first difference at character {at}: "
            f"{recorded.observation[at : at + 40]!r} recorded, {observation[at : at + 40]!r} now): a tool or the "
            "environment is not deterministic"
        )
    if reward != recorded.step_reward:
        return f"{where} gave step reward {reward:g}, the parent's was {recorded.step_reward:g}"
    if valid != recorded.valid:
        return f"{where} judged the action {'valid' if valid else 'invalid'}, unlike the parent's"
    if ended:
        return f"{where} ended the episode, which the parent's did not"
    return None


@dataclass(slots=True)
class Checkpoint:
    """An episode's state right after a tool result, before its next model call."""

    asm: TokenAssembler
    n_steps: int
    reward: float
    last_obs: str
    turn: int


ForkRequest = Callable[[Checkpoint, int], None]
"""Start a fork of the episode from the checkpoint, as the given sample index of its group."""


class EpisodeBranching:
    """The ARPO state of one episode: its initial entropy and the branch decisions it made.

    ``born_at``: for a fork, the turn it was forked at (it does not branch there again);
    ``h_initial``: a fork inherits its parent's initial entropy.
    """

    def __init__(
        self,
        budget: BranchBudget,
        req: EpisodeRequest,
        *,
        seed: int,
        fork: ForkRequest,
        born_at: int | None = None,
        h_initial: float | None = None,
    ) -> None:
        self.budget = budget
        self.req = req
        self.seed = seed
        self.fork = fork
        self.born_at = born_at
        self.h_initial = h_initial
        self.decisions: list[list[float]] = []
        """[turn, ΔH, forks made, budget left (0/1)] per decision (trajectory metadata)."""

    @property
    def top_k(self) -> int:
        """Alternatives per token the entropy needs from the backend."""
        return self.budget.config.entropy_top_k

    def may_fork(self, turn: int, after_tool_result: bool) -> bool:
        """Whether to take a checkpoint before this turn's model call: right after a tool result,
        not where a fork was born, while the group has budget left."""
        if self.born_at is not None and turn <= self.born_at:
            return False
        return after_tool_result and self.budget.used(self.req.group_id) < self.budget.config.budget

    def after_generation(
        self, turn: int, result: GenerationResult, vocab_size: int, checkpoint: Checkpoint | None
    ) -> None:
        """Measure the turn's entropy; from a checkpoint, decide and start the forks granted."""
        cfg, req = self.budget.config, self.req
        if turn == 0 and self.h_initial is None:
            self.h_initial = self._entropy(result, vocab_size)
            return
        if checkpoint is None:
            return
        h_t = self._entropy(result, vocab_size)
        rng = random.Random(sampling_seed(self.seed, req.task_index, req.sample_index, 10_000 + turn))
        room = self.budget.used(req.group_id) < cfg.budget  # other episodes may have used the budget up since
        forks = self.budget.decide(req.group_id, h_t, self.h_initial, rng)
        if h_t is not None and self.h_initial is not None:
            self.decisions.append([turn, h_t - self.h_initial, len(forks), int(room)])
        for index in forks:
            self.fork(checkpoint, index)

    def _entropy(self, result: GenerationResult, vocab_size: int) -> float | None:
        cfg = self.budget.config
        return turn_entropy(result.top_logprobs, result.logprobs, cfg.entropy_k, vocab_size, cfg.entropy)

    def metadata(self) -> dict[str, Any]:
        """What the trajectory records of the branching (empty when there is nothing)."""
        out: dict[str, Any] = {}
        if self.h_initial is not None:
            out["arpo_initial_entropy"] = self.h_initial
        if self.decisions:
            out["arpo_branch_decisions"] = self.decisions
        return out
