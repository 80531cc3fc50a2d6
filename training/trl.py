"""toolgym environments in TRL: a ``rollout_func`` for ``trl.GRPOTrainer`` that plays toolgym episodes.

TRL (≥ 1.16) offers two ways to bring an environment to ``GRPOTrainer``. With ``environment_factory`` TRL
owns the conversation: it renders prompts, parses tool calls with the tokenizer's response schema (JSON
tool calls of the chat templates it knows) and re-renders tool results itself. With ``rollout_func``
(its hook for custom multi-turn generation) the environment's side generates and hands back, per completion,
the prompt ids, the completion ids, their logprobs, an ``env_mask`` (1 on sampled ids, 0 on ids the
environment inserted) and any extra field, which TRL forwards to the reward functions. toolgym takes
the second route, so that everything that makes a toolgym episode stays toolgym's: the environment's
own prompts, tool-call parser (XML tags, Hermes JSON, text actions), tools and sandboxes, byte caps and
timeouts, chat-template deltas appended without re-encoding (token faithfulness), and the reward.

:class:`ToolgymRollout` is the adapter. Per TRL generation round it

1. reads the task each prompt row names (rows come from :meth:`ToolgymRollout.dataset`: TRL repeats
   each row ``num_generations`` times, consecutively, and those copies become one toolgym group —
   same task, same environment seed);
2. runs the episodes with toolgym's :class:`~toolgym.core.rollout.engine.RolloutEngine`, sampling
   from TRL's own model object through an in-process ``TransformersBackend`` at TRL's temperature,
   top-p and top-k (the model TRL updates is the one that samples next round);
3. returns each trajectory's one token sequence as ``prompt_ids`` (the ids before the first sampled
   one), ``completion_ids`` (the rest, tool deltas included), ``env_mask`` (the trajectory's loss
   mask), ``logprobs`` (the sampler's, 0 on environment ids) and ``toolgym_reward`` (the episode's
   return), which :meth:`ToolgymRollout.reward` hands to TRL as the reward.

An episode that fails (a tool's sandbox down, an environment error) or is untrainable still fills its
row, all of it masked, with reward ``None``: TRL leaves it out of its group's baseline and trains on
none of it. Environments that rebuild the prompt every turn (a history window, ``Env.step_prompt``)
make several token sequences per episode; TRL trains one sequence per completion, so they are
refused with a message (use the environment's one-conversation form, or toolgym's own trainers).

    from trl import GRPOConfig, GRPOTrainer
    from toolgym.training.trl import ToolgymRollout

    rollout = ToolgymRollout("keychain", env_kwargs={"min_hops": 1, "max_hops": 3})
    trainer = GRPOTrainer(
        model=model, processing_class=tokenizer,
        args=GRPOConfig(num_generations=8, max_steps=40, ...),
        train_dataset=rollout.dataset(num_tasks=640, seed=10_000),
        rollout_func=rollout, reward_funcs=rollout.reward,
    )
    trainer.train()
    rollout.close()
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from toolgym.core.errors import ConfigError
from toolgym.core.registry import Registry, get_registry
from toolgym.core.rollout.config import EngineConfig
from toolgym.core.rollout.engine import EpisodeRequest, RolloutEngine, trajectory_id
from toolgym.core.rollout.policy import ModelPolicy
from toolgym.core.sandbox import NONE, SandboxBackend, lazy_sandbox_backend, require_isolation
from toolgym.core.tokens.chat import ChatFormat
from toolgym.core.trajectory import Trajectory

if TYPE_CHECKING:
    from datasets import Dataset
    from trl import GRPOTrainer

__all__ = ["ToolgymRollout"]

PROMPT = "toolgym task: env={env} task={task} seed={seed}"
"""The placeholder prompt of a dataset row: it names the task; the environment writes the real prompt."""
_PROMPT_RE = re.compile(r"^toolgym task: env=(?P<env>\S+) task=(?P<task>\d+) seed=(?P<seed>-?\d+)$")

ROLLOUT_TIMEOUT_S = 3600.0
"""The longest one generation round may take (the engine's own timeouts bound each episode)."""


class ToolgymRollout:
    """A TRL ``rollout_func`` (and its reward function and dataset) that plays toolgym episodes.

    ``env``: a registered environment name; ``env_kwargs``: its options. ``engine``: the engine's
    limits (turns, tokens per turn and per trajectory, timeouts); its sampling settings are replaced
    each round by the trainer's (``temperature``, ``top_p``, ``top_k``), which TRL also uses to
    recompute logprobs. ``sandbox_backend``: ``"auto"`` (default: Docker, else bubblewrap, opened only
    when an episode first needs a sandbox), ``"none"``, another registered name or a backend object;
    backends that do not isolate are refused unless ``unsafe_in_process_sandbox``. ``on_trajectory``
    is called with every finished trajectory (a store's append, for instance). ``max_batch_size``:
    rows the sampler decodes together.

    The instance is the ``rollout_func``; :meth:`reward` is the reward function; :meth:`dataset`
    builds the rows. Call :meth:`close` after training (it releases pooled sandboxes).
    """

    def __init__(
        self,
        env: str,
        *,
        env_kwargs: Mapping[str, Any] | None = None,
        engine: EngineConfig | None = None,
        sandbox_backend: str | SandboxBackend | None = "auto",
        unsafe_in_process_sandbox: bool = False,
        registry: Registry | None = None,
        on_trajectory: Callable[[Trajectory], Any] | None = None,
        max_batch_size: int = 128,
    ) -> None:
        self.registry = registry or get_registry()
        self.registry.env(env)  # an unknown name fails here, in one sentence, not in the first round
        self.env = env
        self.env_kwargs = dict(env_kwargs or {})
        self.engine_config = engine or EngineConfig()
        self.on_trajectory = on_trajectory
        self.max_batch_size = max_batch_size
        if isinstance(sandbox_backend, str) or sandbox_backend is None:
            choice = sandbox_backend or NONE
            if not unsafe_in_process_sandbox:
                require_isolation(self.registry, choice, allow="unsafe_in_process_sandbox=True")
            self.sandbox_backend: Any = lazy_sandbox_backend(self.registry, choice)
        else:
            self.sandbox_backend = sandbox_backend
        self.last_trajectories: list[Trajectory] = []
        """The trajectories of the latest round, in the order of its prompts."""
        self._chat: tuple[int, ChatFormat] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    # -- what TRL is given -----------------------------------------------------------------------

    def dataset(self, *, num_tasks: int, seed: int = 0, first_task: int = 0) -> Dataset:
        """TRL's ``train_dataset``: one row per task instance; task ``i`` uses environment seed
        ``seed + i`` (the convention of toolgym's trainers). A row's ``prompt`` only names the task:
        the environment writes the real prompt when the episode starts."""
        from datasets import Dataset

        if num_tasks < 1:
            raise ConfigError(f"num_tasks must be at least 1, got {num_tasks}")
        return Dataset.from_dict(
            {
                "prompt": [
                    PROMPT.format(env=self.env, task=i, seed=seed + i)
                    for i in range(first_task, first_task + num_tasks)
                ]
            }
        )

    def reward(self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
        """TRL's reward function: the toolgym environment's episode return (``None`` for a failed
        episode, which TRL leaves out of the group's baseline)."""
        rewards = kwargs.get("toolgym_reward")
        if rewards is None:
            raise ConfigError(
                "no toolgym_reward in the batch: pass this ToolgymRollout as GRPOTrainer's rollout_func too"
            )
        return [None if r is None else float(r) for r in rewards]

    # TRL logs a reward function under its name: rewards/toolgym_reward/mean
    reward.__name__ = "toolgym_reward"

    def __call__(self, prompts: Sequence[Any], trainer: GRPOTrainer) -> dict[str, list[Any]]:
        """TRL's ``rollout_func``: one toolgym episode per prompt row (see the module docstring)."""
        from trl.models import unwrap_model_for_generation

        requests = self._requests(prompts, trainer)
        tokenizer: Any = trainer.processing_class
        tokenizer = getattr(tokenizer, "tokenizer", tokenizer)  # a processor's text tokenizer
        args: Any = trainer.args  # a GRPOConfig
        with unwrap_model_for_generation(
            trainer.model_wrapped,
            trainer.accelerator,
            gather_deepspeed3_params=args.ds3_gather_for_generation,
        ) as model:
            training = model.training  # the sampler puts the model in eval mode; TRL reads the flag after us
            try:
                trajectories = self._run(self._play(model, tokenizer, requests, self._engine_config(trainer)))
            finally:
                model.train(training)
        self.last_trajectories = trajectories
        eos = self._chat_format(tokenizer).eos_token_ids
        return self._outputs(
            trajectories, tokenizer.eos_token_id if tokenizer.eos_token_id in eos else min(eos)
        )

    def close(self) -> None:
        """Release pooled sandboxes and stop the adapter's event loop thread; safe to call twice."""
        if self._loop is None:
            return
        closer = getattr(self.sandbox_backend, "aclose", None)
        if closer is not None:
            self._run(closer())
        self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(30)
        self._loop = self._thread = None

    # -- one round -------------------------------------------------------------------------------

    def _requests(self, prompts: Sequence[Any], trainer: GRPOTrainer) -> list[EpisodeRequest]:
        """One request per prompt row; the copies of a row are the samples of one group."""
        round_key = _round_key(trainer)
        seen: dict[tuple[int, int], int] = {}
        out = []
        for prompt in prompts:
            text = prompt if isinstance(prompt, str) else _last_content(prompt)
            m = _PROMPT_RE.match(text.strip()) if isinstance(text, str) else None
            if m is None:
                raise ConfigError(
                    f"prompt {str(text)[:80]!r} names no toolgym task; build the train_dataset with "
                    "ToolgymRollout.dataset()"
                )
            if m["env"] != self.env:
                raise ConfigError(
                    f"a dataset row names environment {m['env']!r} but this rollout plays {self.env!r}; "
                    "build the dataset with this ToolgymRollout's dataset()"
                )
            task, seed = int(m["task"]), int(m["seed"])
            sample = seen[task, seed] = seen.get((task, seed), -1) + 1
            group = f"{self.env}/{task}/{seed}/trl-{round_key}"
            out.append(EpisodeRequest(self.env, task, sample, seed, group, trajectory_id(group, sample)))
        return out

    def _engine_config(self, trainer: GRPOTrainer) -> EngineConfig:
        """The engine's limits with TRL's sampling settings, and a base sampling seed per round and process
        (each process of a multi-process run gets its own slice of the rows, and its own samples)."""
        sampling = self.engine_config.sampling.model_copy(
            update={
                "temperature": float(trainer.temperature),
                "top_p": float(trainer.top_p),
                "top_k": int(trainer.top_k or 0),
            }
        )
        digest = hashlib.blake2b(
            f"{trainer.args.seed}/{_round_key(trainer)}".encode(), digest_size=4
        ).digest()
        seed = int.from_bytes(digest, "little")
        return self.engine_config.model_copy(
            update={
                "sampling": sampling,
                "seed": seed,
                "max_llm_calls": max(self.engine_config.max_llm_calls, self.max_batch_size),
                "max_live_episodes": max(self.engine_config.max_live_episodes, self.max_batch_size),
            }
        )

    async def _play(
        self, model: Any, tokenizer: Any, requests: list[EpisodeRequest], config: EngineConfig
    ) -> list[Trajectory]:
        from toolgym.core.llm.local.transformers_backend import TransformersBackend

        backend = TransformersBackend(
            model,
            tokenizer=tokenizer,
            device=str(next(model.parameters()).device),
            max_batch_size=self.max_batch_size,
        )
        got: dict[str, Trajectory] = {}

        def keep(traj: Trajectory) -> None:
            got[traj.trajectory_id] = traj
            if self.on_trajectory is not None:
                self.on_trajectory(traj)

        engine = RolloutEngine(
            registry=self.registry,
            policy=ModelPolicy(backend, config, chat=self._chat_format(tokenizer)),
            config=config,
            sandbox_backend=self.sandbox_backend,
            env_kwargs=self.env_kwargs,
            run_id="trl",
            on_trajectory=keep,
        )
        try:
            await engine.run(requests)
        finally:
            await backend.aclose()
        missing = [r.trajectory_id for r in requests if r.trajectory_id not in got]
        if missing:
            raise RuntimeError(f"{len(missing)} episode(s) of the round returned no trajectory")
        return [got[r.trajectory_id] for r in requests]

    def _outputs(self, trajectories: Sequence[Trajectory], eos: int) -> dict[str, list[Any]]:
        """TRL's rollout output: one row per trajectory (see the module docstring).

        TRL tells a finished completion from a cut one by its last id (``eos``). An episode the
        environment ended (``terminated``) whose last turn stopped on a stop string rather than on
        ``eos`` gets one ``eos`` appended, masked, as the chat template would close the turn; an
        episode a limit cut off (``truncated``) keeps its last id, so that TRL's
        ``mask_truncated_completions`` and ``completions/clipped_ratio`` see it as cut."""
        out: dict[str, list[Any]] = {
            "prompt_ids": [],
            "completion_ids": [],
            "logprobs": [],
            "env_mask": [],
            "toolgym_reward": [],
        }
        for traj in trajectories:
            if traj.num_sequences > 1:
                raise ConfigError(
                    f"environment {traj.env!r} rebuilt its prompt during an episode ({traj.num_sequences} token "
                    "sequences): TRL's GRPOTrainer trains one sequence per completion; use the environment's "
                    "one-conversation form (no history window) or toolgym's own trainers"
                )
            ids: list[int] = []
            mask: list[int] = []
            logps: list[float] = []
            for seg in traj.segments:
                ids += seg.token_ids
                mask += seg.loss_mask
                logps += seg.logprobs if seg.logprobs is not None else [0.0] * len(seg.token_ids)
            start = mask.index(1) if 1 in mask else len(ids)
            prompt, completion = ids[:start], ids[start:]
            env_mask, completion_logps = mask[start:], logps[start:]
            ok = traj.trainable and bool(completion)
            if not ok:  # nothing of it is trained on; TRL needs at least one completion id
                env_mask = [0] * len(completion)
                if not completion:
                    completion, env_mask, completion_logps = [eos], [0], [0.0]
            elif traj.terminated and completion[-1] != eos:
                completion, env_mask, completion_logps = (
                    completion + [eos],
                    env_mask + [0],
                    completion_logps + [0.0],
                )
            if not prompt:  # a row whose prompt is empty cannot be left-padded
                prompt = [eos]
            out["prompt_ids"].append(prompt)
            out["completion_ids"].append(completion)
            out["env_mask"].append(env_mask)
            out["logprobs"].append(
                [lp if m else 0.0 for lp, m in zip(completion_logps, env_mask, strict=True)]
            )
            out["toolgym_reward"].append(float(traj.reward) if ok else None)
        return out

    # -- plumbing --------------------------------------------------------------------------------

    def _chat_format(self, tokenizer: Any) -> ChatFormat:
        if self._chat is None or self._chat[0] != id(tokenizer):
            self._chat = (id(tokenizer), ChatFormat(tokenizer))
        return self._chat[1]

    def _run(self, coro: Any) -> Any:
        """Run ``coro`` on the adapter's own event loop (a daemon thread, kept across rounds so that
        sandbox backends bound to it stay usable) and wait for it."""
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
            self._thread = threading.Thread(target=self._loop.run_forever, name="toolgym-trl", daemon=True)
            self._thread.start()
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(ROLLOUT_TIMEOUT_S)


def _round_key(trainer: GRPOTrainer) -> str:
    """Which generation round this is: optimiser step, train or eval, and process."""
    mode = "train" if trainer.model is not None and trainer.model.training else "eval"
    return f"{trainer.state.global_step}-{mode}-{trainer.accelerator.process_index}"


def _last_content(prompt: Any) -> Any:
    """The text of a conversational row's last message (a row written as chat messages)."""
    if isinstance(prompt, list) and prompt and isinstance(prompt[-1], dict):
        return prompt[-1].get("content")
    return prompt
