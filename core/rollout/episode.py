"""One episode from reset to trajectory: the turn loop of the rollout engine.

Token path (model and scripted policies): the assembler holds the exact token sequence; each turn
samples from it, parses the output, steps the environment and appends the observation's delta.
Chat path (black-box APIs): messages in, text out, recorded as not token-faithful.

An episode can also start as an ARPO fork of another one: it copies the parent's assembler and
steps up to a checkpoint taken right after a tool result, rebuilds the environment by replaying the
parent's actions on a fresh instance (so stateful sandboxes are re-created, never shared), and
resamples from there. A replay that does not reproduce the parent's recorded prompt and
observations (a tool that is not deterministic) refuses the fork (``ForkRefused``; see
:mod:`toolgym.core.rollout.branching` for why it is refused rather than patched). Where to fork is decided in :mod:`toolgym.core.rollout.branching`; starting the fork
is the runner's (:attr:`EpisodeSetup.fork`).

An episode knows nothing of the engine that runs it: it is given an :class:`EpisodeSetup` (its
environment's spec and options, the policy, the settings, the tool-call parsers, the live counters
and, under ARPO, the group's branch budget and a way to start forks).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from toolgym.core.deadline import within
from toolgym.core.env.context import EpisodeContext
from toolgym.core.env.contract import Env, StepResult
from toolgym.core.env.digest import digest
from toolgym.core.env.spec import EnvSpec
from toolgym.core.errors import ContextLengthError
from toolgym.core.llm.clients.server_info import fit_context_budget
from toolgym.core.parsing.base import ToolParser
from toolgym.core.rollout.arpo import BranchBudget
from toolgym.core.rollout.branching import Checkpoint, EpisodeBranching, ForkRefused, replay_divergence
from toolgym.core.rollout.config import EngineConfig
from toolgym.core.rollout.policy import ChatPolicy, ModelPolicy, Policy, ScriptedPolicy, TurnFailed
from toolgym.core.rollout.requests import EpisodeRequest, sampling_seed
from toolgym.core.rollout.stats import EngineStats
from toolgym.core.tokens.assembly import TokenAssembler
from toolgym.core.tokens.chat import with_tool_call_ids
from toolgym.core.tokens.images import content_text, has_images, image_refs, limit_images
from toolgym.core.trajectory import LLMCall, Status, Step, Timings, Trajectory
from toolgym.core.types import Action, ActionKind, Message, ToolCall

__all__ = ["Checkpoint", "Episode", "EpisodeSetup", "ForkEpisode"]

ForkEpisode = Callable[["Episode", Checkpoint, int], None]
"""Start a fork of the episode from the checkpoint, as the given sample index of its group."""


@dataclass(frozen=True, slots=True)
class EpisodeSetup:
    """What an episode is run with: everything it uses besides its request and context."""

    spec: EnvSpec
    env_kwargs: Mapping[str, Any]
    policy: Policy
    config: EngineConfig
    parser: Callable[[str], ToolParser]
    """Tool-call parser by name (the environment names its own)."""
    run_id: str
    stats: EngineStats
    """Live counters: the episode counts each model call as it returns."""
    branch_budget: BranchBudget | None = None
    """ARPO: the group's branch budget (None: no branching)."""
    fork: ForkEpisode | None = None
    """ARPO: starts a fork; called from the turn loop when the budget grants one."""


class Episode:
    """The state of one running episode."""

    def __init__(self, setup: EpisodeSetup, req: EpisodeRequest, ctx: EpisodeContext) -> None:
        self.setup = setup
        self.req = req
        self.ctx = ctx
        self.cfg = fit_context_budget(
            setup.config, setup.policy
        )  # the model's context length, when its backend knows it
        self._budget_reason = "context budget (max_tokens_per_trajectory) used up"
        if self.cfg is not setup.config:
            self._budget_reason = (
                f"context budget used up: the model's context of {self.cfg.max_tokens_per_trajectory} tokens "
                f"(below max_tokens_per_trajectory={setup.config.max_tokens_per_trajectory})"
            )
        self.env: Env | None = None
        self.steps: list[Step] = []
        self.actions: list[Action] = []
        self.asm: TokenAssembler | None = None
        self.chat_messages: list[dict[str, Any]] = []
        self.prompt: list[dict[str, Any]] = []
        self.tools: list[dict[str, Any]] = []
        self.reward = 0.0
        self.terminated = False
        self.truncated = False
        self.truncation_reason: str | None = None
        self.error: str | None = None
        self.llm_s = self.env_s = self.tool_s = 0.0
        self.weight_version: str | None = None
        self.info: dict[str, Any] = {}
        self.parent_id: str | None = None
        self.branch_point: int | None = None
        self.lineage: list[list[Any]] = []
        """ARPO: [[parent id, branch point], [grandparent id, parent's branch point], …] up to the root."""
        self.branching: EpisodeBranching | None = None
        if setup.branch_budget is not None and setup.fork is not None:
            self.branching = EpisodeBranching(
                setup.branch_budget, req, seed=self.cfg.seed, fork=self._request_fork
            )
        self._fork_of: tuple[Episode, Checkpoint] | None = None
        self._parser: ToolParser | None = None
        self._tools_by_name: dict[str, Any] = {}
        self._stop: tuple[str, ...] = ()

    @classmethod
    def fork(
        cls, parent: Episode, checkpoint: Checkpoint, req: EpisodeRequest, ctx: EpisodeContext
    ) -> Episode:
        child = cls(parent.setup, req, ctx)
        child._fork_of = (parent, checkpoint)
        child.parent_id = parent.req.trajectory_id
        seq0 = [s for s in checkpoint.asm.segments if s.sequence == 0]
        child.branch_point = sum(len(s.token_ids) for s in seq0)
        child.lineage = [[parent.req.trajectory_id, child.branch_point], *parent.lineage]
        if child.branching is not None:
            child.branching.born_at = checkpoint.turn  # it does not re-branch where it was born
            child.branching.h_initial = parent.branching.h_initial if parent.branching is not None else None
        return child

    def _request_fork(self, checkpoint: Checkpoint, sample_index: int) -> None:
        assert self.setup.fork is not None
        self.setup.fork(self, checkpoint, sample_index)

    def fail(self, reason: str) -> None:
        self.error = reason

    # -- setup ---------------------------------------------------------------------------------

    async def _make_env(self) -> tuple[Env, list[dict[str, Any]], dict[str, Any]]:
        setup, cfg = self.setup, self.cfg
        self.env = env = setup.spec.make(**setup.env_kwargs)
        env.bind(self.ctx)
        start = time.perf_counter()
        messages, info = await asyncio.wait_for(env.reset(seed=self.req.seed), cfg.env_timeout_s)
        self.env_s += time.perf_counter() - start
        self._parser = setup.parser(env.parser)
        self._tools_by_name = {t.name: t for t in env.tools}
        self._stop = tuple(dict.fromkeys((*self._parser.stop_strings(self._tools_by_name), *env.stop)))
        return env, messages, dict(info or {})

    async def play(self) -> None:
        env, messages, info = await self._make_env()
        self.info = info
        self.prompt = [dict(m) for m in messages]
        self.tools = [t.schema for t in env.tools]
        policy = self.setup.policy
        if isinstance(policy, ChatPolicy):
            await self._play_chat(policy, env)
            return
        if self._fork_of is not None:
            await self._resume_fork(env)
            return
        self.asm = TokenAssembler(policy.chat, self.tools or None, on_rewrite=self.cfg.on_rewrite)
        self.asm.start(_bounded(env, self.prompt))
        await self._turns(
            policy, env, start_turn=0, last_obs="\n".join(str(m.get("content", "")) for m in self.prompt)
        )

    async def _resume_fork(self, env: Env) -> None:
        """Replay the parent's actions up to the checkpoint (rebuilding the environment's and the
        sandboxes' state), then sample on from the parent's tokens; raises ``ForkRefused`` when the
        replay does not give back what the parent recorded."""
        parent, cp = self._fork_of  # type: ignore[misc]
        if self.prompt != parent.prompt:
            raise ForkRefused(
                "the environment's reset gave another prompt than the parent's (its reset is not deterministic)"
            )
        for recorded, action in zip(parent.steps[: cp.n_steps], parent.actions[: cp.n_steps], strict=True):
            async with asyncio.timeout(self.cfg.env_timeout_s):
                outcome = await env.step(action)  # replay: rebuilds the environment's (and sandboxes') state
            why = replay_divergence(
                recorded,
                observation_text(outcome.observation),
                float(outcome.reward),
                outcome.valid and action.valid,
                outcome.terminated or outcome.truncated,
            )
            if why is not None:
                raise ForkRefused(why)
        self.actions = list(parent.actions[: cp.n_steps])
        self.steps = [s.model_copy() for s in parent.steps[: cp.n_steps]]
        self.reward = cp.reward
        self.asm = cp.asm.fork()
        await self._turns(self.setup.policy, env, start_turn=cp.turn, last_obs=cp.last_obs)  # type: ignore[arg-type]

    # -- token path ----------------------------------------------------------------------------

    async def _turns(
        self, policy: ModelPolicy | ScriptedPolicy, env: Env, *, start_turn: int, last_obs: str
    ) -> None:
        cfg, req, stats, branching = self.cfg, self.req, self.setup.stats, self.branching
        asm = self.asm
        assert asm is not None and self._parser is not None
        max_turns = env.max_turns if cfg.max_turns is None else min(cfg.max_turns, env.max_turns)
        top_k = max(cfg.sampling.top_logprobs, branching.top_k if branching else 0)
        for turn in range(start_turn, max_turns):
            if turn > 0 and (fresh := env.step_prompt()) is not None:
                asm.restart(_bounded(env, fresh))
            anchor = env.anchor() or digest(last_obs)
            budget = cfg.max_tokens_per_trajectory - len(asm.prompt_ids)
            if budget <= 0:
                self._truncate(self._budget_reason)
                return
            checkpoint = None
            if branching is not None and branching.may_fork(
                turn, bool(self.steps and self.steps[-1].tool_calls)
            ):
                checkpoint = Checkpoint(asm.fork(), len(self.steps), self.reward, last_obs, turn)
            prompt_len = len(asm.prompt_ids)
            prompt_hash = asm.prompt_digest
            t0 = time.perf_counter()
            if isinstance(policy, ScriptedPolicy):
                result, attempts = await policy.act(env), 1
            else:
                seed = sampling_seed(cfg.seed, req.task_index, req.sample_index, turn)
                sampling = cfg.sampling.params(
                    max_new_tokens=min(cfg.max_tokens_per_turn, budget), seed=seed, stop=self._stop
                )
                if top_k != sampling.top_logprobs:
                    sampling = sampling.replace(top_logprobs=top_k)
                try:
                    result, attempts = await policy.generate(
                        asm.prompt_ids, sampling, f"{req.trajectory_id}-{turn}", asm.image_refs
                    )
                except TurnFailed as exc:
                    if not isinstance(exc.__cause__, ContextLengthError):
                        raise
                    # a limit ended the episode, not a fault (the budget missed the model's context)
                    self._truncate(
                        f"context budget used up: the prompt of {prompt_len} tokens does not fit the model's "
                        f"context of {exc.__cause__.limit} tokens"
                    )
                    return
                self.weight_version = result.weight_version or self.weight_version
            self.llm_s += time.perf_counter() - t0
            stats.turn(len(result.output_ids))
            if branching is not None:
                branching.after_generation(turn, result, len(policy.chat.tokenizer), checkpoint)
            completion = asm.add_completion(result)
            llm = LLMCall(
                sequence=completion.sequence,
                prompt_len=prompt_len,
                prompt_sha256=prompt_hash,
                segment=completion.segment,
                completion_tokens=len(result.output_ids),
                finish_reason=result.finish_reason,
                latency_s=result.latency_s,
                attempts=attempts,
                weight_version=result.weight_version,
            )
            action = self._parser.parse(completion.text, self._tools_by_name)
            outcome = await self._env_step(env, action, anchor, llm)
            if outcome is None:
                return
            if isinstance(outcome.observation, str):
                last_obs = outcome.observation
                ended = result.output_ids and result.output_ids[-1] in policy.chat.eos_token_ids
                if ended:  # the model closed its turn: the text comes as a user turn instead
                    asm.add_messages([{"role": "user", "content": outcome.observation}])
                else:
                    asm.add_inline(outcome.observation)
            else:
                last_obs = "\n".join(content_text(m.get("content", "")) for m in outcome.observation)
                new = with_tool_call_ids(outcome.observation, action.tool_calls)
                keep = env.max_images
                if keep is not None and len(asm.image_refs) + len(image_refs(new)) > keep:
                    # the oldest images give way: a fresh render, so a new token sequence
                    asm.restart(limit_images([*asm.messages, *new], keep))
                else:
                    asm.add_messages(new)
            if result.finish_reason == "length" and len(asm.prompt_ids) >= cfg.max_tokens_per_trajectory:
                self._truncate(self._budget_reason)
                return
        self._truncate(f"turn limit ({max_turns}) reached")

    # -- chat path -----------------------------------------------------------------------------

    async def _play_chat(self, policy: ChatPolicy, env: Env) -> None:
        cfg, stats = self.cfg, self.setup.stats
        assert self._parser is not None
        messages = self.chat_messages = [dict(m) for m in self.prompt]
        max_turns = env.max_turns if cfg.max_turns is None else min(cfg.max_turns, env.max_turns)
        last_obs = "\n".join(str(m.get("content", "")) for m in self.prompt)
        for turn in range(max_turns):
            if turn > 0 and (fresh := env.step_prompt()) is not None:
                messages[:] = [dict(m) for m in fresh]
            anchor = env.anchor() or digest(last_obs)
            sampling = cfg.sampling.params(max_new_tokens=cfg.max_tokens_per_turn, seed=None, stop=self._stop)
            messages[:] = _bounded(env, messages)  # the record keeps what the model was sent
            t0 = time.perf_counter()
            result, attempts = await policy.chat(messages, self.tools or None, sampling)
            self.llm_s += time.perf_counter() - t0
            usage = result.usage.get("completion_tokens", 0)
            stats.turn(usage)
            if result.tool_calls:
                result.tool_calls = [
                    c if c.id else replace(c, id=f"call_{i}") for i, c in enumerate(result.tool_calls)
                ]
                action = _structured_action(result.text, result.tool_calls, self._tools_by_name)
                messages.append(
                    {
                        "role": "assistant",
                        "content": result.text,
                        "tool_calls": [
                            {
                                "type": "function",
                                "id": c.id,
                                "function": {"name": c.name, "arguments": c.arguments},
                            }
                            for c in result.tool_calls
                        ],
                    }
                )
            else:
                action = self._parser.parse(result.text, self._tools_by_name)
                messages.append({"role": "assistant", "content": result.text})
            llm = LLMCall(
                prompt_len=0,
                segment=-1,
                completion_tokens=usage,
                finish_reason=result.finish_reason,
                latency_s=result.latency_s,
                attempts=attempts,
            )
            outcome = await self._env_step(env, action, anchor, llm)
            if outcome is None:
                return
            if isinstance(outcome.observation, str):
                last_obs = outcome.observation
                messages.append({"role": "user", "content": outcome.observation})
            else:
                last_obs = "\n".join(content_text(m.get("content", "")) for m in outcome.observation)
                messages.extend(
                    with_tool_call_ids(outcome.observation, result.tool_calls or action.tool_calls)
                )
        self._truncate(f"turn limit ({max_turns}) reached")

    # -- shared --------------------------------------------------------------------------------

    async def _env_step(self, env: Env, action: Action, anchor: str, llm: LLMCall) -> StepResult | None:
        """Apply the action and record the step. Returns None when the episode is over."""
        t0 = time.perf_counter()
        outcome = await within(env.step(action), self.cfg.env_timeout_s)
        env_s = time.perf_counter() - t0
        self.env_s += env_s
        self.tool_s += sum(tc.duration_s for tc in outcome.tool_calls)
        obs_text = observation_text(outcome.observation)
        self.actions.append(action)
        self.steps.append(
            Step(
                index=len(self.steps),
                action=action.text,
                action_kind=action.kind.value,
                observation=obs_text,
                step_reward=float(outcome.reward),
                anchor=anchor,
                valid=outcome.valid and action.valid,
                error=action.error,
                tool_calls=outcome.tool_calls,
                llm=llm,
                env_s=env_s,
                info=jsonable(outcome.info),
            )
        )
        self.reward += float(outcome.reward)
        if outcome.terminated or outcome.truncated:
            self.terminated = outcome.terminated
            if outcome.truncated and not outcome.terminated:
                self._truncate(
                    str(outcome.info.get("truncation_reason", "environment truncated the episode"))
                )
            return None
        return outcome

    def _truncate(self, reason: str) -> None:
        self.truncated = True
        self.truncation_reason = reason

    def build(self, *, total_s: float, sandbox_s: float) -> Trajectory:
        setup, req, policy = self.setup, self.req, self.setup.policy
        status, reason = Status.OK, None
        segments: list[Any] = []
        messages: list[dict[str, Any]] = self.chat_messages
        metadata: dict[str, Any] = {"policy": policy.kind, "run_id": setup.run_id}
        if self.info:
            metadata["env_info"] = jsonable(self.info)
        if self.asm is not None:
            segments = self.asm.to_segments()
            messages = self.asm.messages
            if self.asm.rewrites:
                metadata["template_rewrites"] = self.asm.rewrites
            if self.asm.untrainable_reason:
                status, reason = Status.UNTRAINABLE, self.asm.untrainable_reason
            if has_images(messages):  # what each image part became in the recorded ids
                metadata["image_placeholder"] = self.asm.chat.image_placeholder
                if self.asm.chat.vision is not None:  # expanded image tokens, re-checked by verify
                    metadata["vision"] = {
                        **self.asm.chat.vision.metadata(self.asm.chat.tokenizer),
                        "sequence_images": self.asm.sequence_images,
                    }
        arpo = self.branching.metadata() if self.branching is not None else {}
        if "arpo_initial_entropy" in arpo:
            metadata["arpo_initial_entropy"] = arpo["arpo_initial_entropy"]
        if self.lineage:
            metadata["arpo_lineage"] = self.lineage  # places absent ancestors in ARPO's hard attribution
        if "arpo_branch_decisions" in arpo:
            metadata["arpo_branch_decisions"] = arpo[
                "arpo_branch_decisions"
            ]  # [turn, ΔH, forks made, budget left (0/1)]
        if self.error is not None:
            status, reason = Status.ERROR, self.error
        return Trajectory.model_construct(
            schema_version=1,
            trajectory_id=req.trajectory_id,
            group_id=req.group_id,
            parent_id=self.parent_id,
            branch_point=self.branch_point,
            task=req.env,
            task_index=req.task_index,
            sample_index=req.sample_index,
            seed=req.seed,
            env=req.env,
            model=policy.name,
            sampling=setup.config.sampling.model_dump() if policy.kind != "scripted" else {},
            prompt=self.prompt,
            messages=messages,
            tools=self.tools,
            segments=segments,
            steps=self.steps,
            reward=self.reward,
            terminated=self.terminated,
            truncated=self.truncated,
            truncation_reason=self.truncation_reason,
            status=status,
            status_reason=reason,
            token_faithful=policy.token_faithful,
            timings=Timings(
                total_s=total_s, llm_s=self.llm_s, tool_s=self.tool_s, env_s=self.env_s, sandbox_s=sandbox_s
            ),
            weight_version=self.weight_version,
            created_at=time.time(),
            metadata=metadata,
        )


def observation_text(observation: str | list[dict[str, Any]]) -> str:
    """What a step records of an observation: the text, or its messages' texts joined by newlines."""
    if isinstance(observation, str):
        return observation
    return "\n".join(content_text(m.get("content", "")) for m in observation)


def _structured_action(text: str, calls: list[ToolCall], tools: Mapping[str, Any]) -> Action:
    for call in calls:
        tool = tools.get(call.name)
        if tool is None:
            return Action(text, ActionKind.INVALID, error=f"unknown tool {call.name!r}")
        try:
            tool.validate(call.arguments)
        except Exception as exc:
            return Action(text, ActionKind.INVALID, error=str(exc))
    return Action(text, ActionKind.TOOL_CALLS, tool_calls=list(calls))


def jsonable(obj: Any) -> Any:
    """A copy of ``obj`` made of JSON values (what a trajectory's ``Step.info`` and ``env_info`` hold):
    mappings and sequences copied, other objects as their ``str``."""
    if isinstance(obj, Mapping):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if obj is None or isinstance(obj, (str, int, float, bool)):
        return obj
    return str(obj)


def _bounded(env: Env, messages: list[Message]) -> list[Message]:
    """``messages`` within the environment's image limit (``Env.max_images``)."""
    return list(messages) if env.max_images is None else limit_images(messages, env.max_images)
