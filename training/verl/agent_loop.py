"""The verl agent loop that runs toolgym's engine: ``toolgym_agent``.

verl calls :meth:`ToolgymAgentLoop.run` once per rollout (``rollout.n`` times per prompt row). The
row names a task instance (``extra_info``: environment, task index, seed); the loop runs one
episode of it with toolgym's engine, generating through verl's ``LLMServerClient``, and returns
the trajectory as verl rows (see :mod:`.rows`): one ``AgentLoopOutput`` in the ``trajectory``
layout with one token sequence, else a list (one per sequence, or one per step). Lists need verl's
V1 trainer (``trainer.use_v1=true``), which ``toolgym train`` selects.

Each output carries ``reward_score`` (the episode return, set here so verl runs no reward
function) and ``extra_fields["toolgym"]`` with the row's GiGPO/ARPO metadata.

A vision-language model (verl hands the loop a processor with an ``image_processor``): prompts
carry each screenshot's expanded image tokens (:class:`~toolgym.core.tokens.vision.VisionInputs`
over that image processor), the server gets the pixels as ``image_data``, episodes store their
screenshots under ``toolgym.images_dir``, and each output's ``multi_modal_data["images"]`` holds
its row's images in the order of their image-token runs, which verl's own post-processing
re-processes into ``multi_modal_inputs`` and M-RoPE position ids.

An episode that fails (model or environment error, untrainable trajectory) raises
:class:`EpisodeFailed`; verl then drops that prompt's group and samples a replacement.
"""

from __future__ import annotations

import asyncio
import json
import logging
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput, register

from toolgym.core.errors import ConfigError, ToolgymError
from toolgym.core.registry import Registry, get_registry
from toolgym.core.rollout.engine import EpisodeRequest, RolloutEngine
from toolgym.core.rollout.policy import ModelPolicy
from toolgym.core.sandbox import NONE, LazySandboxBackend, require_isolation
from toolgym.core.tokens.chat import ChatFormat
from toolgym.core.tokens.images import image_path
from toolgym.core.tokens.vision import VisionInputs
from toolgym.core.trajectory import Trajectory

from .backend import VerlServerBackend, pil_image
from .rows import META_KEY, Layout, trajectory_rows
from .settings import ToolgymSettings, load_settings

log = logging.getLogger("toolgym.verl")

AGENT_NAME = "toolgym_agent"


class EpisodeFailed(ToolgymError):
    """An episode ended without a trainable trajectory; verl resamples the prompt's group."""


def task_of(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The task instance a dataset row names (``extra_info`` written by :mod:`.dataset`)."""
    info = kwargs.get("extra_info")
    if not isinstance(info, dict) or "toolgym_env" not in info:
        raise ConfigError(
            "the dataset row has no toolgym task (extra_info.toolgym_env); build the dataset with "
            "`toolgym train` (or toolgym.training.verl.dataset.write_task_files)"
        )
    env_kwargs = info.get("env_kwargs_json") or "{}"
    return {
        "env": str(info["toolgym_env"]),
        "task_index": int(info["task_index"]),
        "seed": int(info["seed"]),
        "env_kwargs": json.loads(env_kwargs) if isinstance(env_kwargs, str) else dict(env_kwargs),
    }


@register(AGENT_NAME)
class ToolgymAgentLoop(AgentLoopBase):
    """Runs one toolgym episode per call and returns it as verl rows."""

    registry_factory: Callable[[], Registry] = staticmethod(get_registry)
    """Where environments are looked up by name; tests swap in their own registry."""
    _sandboxes: dict[int, Any] = {}
    """One lazily opened sandbox backend per event loop (per verl agent-loop worker). Sandboxes are
    released after each episode; leftovers of a killed worker carry toolgym's labels and TTL, and
    ``toolgym sandbox gc`` removes them."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.pop("tools", None)  # verl's own tool list; toolgym environments bring their tools
        super().__init__(*args, **kwargs)
        self.settings: ToolgymSettings = load_settings(self.config.get("toolgym"))
        self.prompt_length = int(self.rollout_config.prompt_length)
        self.response_length = int(self.rollout_config.response_length)
        self.engine_config = self.settings.engine_config(
            max_prompt_len=self.prompt_length, max_response_len=self.response_length
        )
        image_processor = getattr(getattr(self, "processor", None), "image_processor", None)
        self.images_dir: str | None = None
        vision = None
        if image_processor is not None:  # a vision-language model
            self.images_dir = self.settings.images_dir or tempfile.mkdtemp(prefix="toolgym-verl-images-")
            vision = VisionInputs(image_processor, root=self.images_dir)
        self.chat = ChatFormat(self.tokenizer, vision=vision)
        if self.settings.arpo is not None:
            # one call runs the task's whole ARPO group: N initial rollouts plus their forks
            self.engine_config = self.engine_config.model_copy(
                update={"arpo": self.settings.arpo.engine_arpo()}
            )

    async def run(  # type: ignore[override]  # verl's V1 workers take lists
        self, sampling_params: dict[str, Any], **kwargs: Any
    ) -> AgentLoopOutput | list[AgentLoopOutput]:
        task = task_of(kwargs)
        uid, session = kwargs.get("uid"), kwargs.get("session_id")
        trajectory_id = f"{uid}-{session}" if uid is not None and session is not None else uuid.uuid4().hex
        group_id = f"{task['env']}/{task['task_index']}/{task['seed']}"
        backend = VerlServerBackend(
            self.server_manager,
            self.tokenizer,
            sampling_params,
            request_id=trajectory_id,
            rollout_name=str(self.rollout_config.name),
            eos_token_ids=self.chat.eos_token_ids,
            priority=int(kwargs.get("priority", 0) or 0),
            model_name=str(self.config.actor_rollout_ref.model.path),
        )
        engine = RolloutEngine(
            registry=self.registry_factory(),
            policy=ModelPolicy(backend, self.engine_config, chat=self.chat),
            config=self.engine_config,
            sandbox_backend=self._sandbox_backend(),
            env_kwargs={**self.settings.env_kwargs, **task["env_kwargs"]},
            run_id=str(uid or "verl"),
            # screenshots are stored in the artifacts directory's parent, where VisionInputs reads them
            artifacts_dir=str(Path(self.images_dir) / "artifacts") if self.images_dir else None,
        )
        if self.settings.arpo is not None:
            return await self._run_arpo_group(engine, task, group_id, trajectory_id, backend)
        request = EpisodeRequest(
            task["env"], task["task_index"], int(session or 0), task["seed"], group_id, trajectory_id
        )
        trajectory = await engine.run_episode(request)
        engine.registry.notify_trajectory_done(trajectory)
        try:
            outputs = agent_loop_outputs(
                trajectory,
                self.settings.layout,
                max_prompt_len=self.prompt_length,
                max_response_len=self.response_length,
                # read after the episode: the versions are those of the calls that answered it
                global_steps=(backend.min_global_steps, backend.max_global_steps),
                num_preempted=backend.num_preempted,
                images_root=self.images_dir,
            )
        except ConfigError as exc:
            raise EpisodeFailed(f"episode {trajectory_id} of {group_id}: {exc}") from None
        return outputs[0] if len(outputs) == 1 and self.settings.layout == "trajectory" else outputs

    async def _run_arpo_group(
        self,
        engine: RolloutEngine,
        task: dict[str, Any],
        group_id: str,
        call_id: str,
        backend: VerlServerBackend,
    ) -> list[AgentLoopOutput]:
        """ARPO: N initial rollouts of the task and the forks the engine branches from them (at
        most M trajectories), all returned as rows of this one call. Failed or untrainable
        members are left out; the call fails only when none is trainable."""
        assert self.settings.arpo is not None
        done: list[Trajectory] = []
        engine.on_trajectory = done.append
        initial = self.settings.arpo.initial_rollouts
        requests = [
            EpisodeRequest(task["env"], task["task_index"], k, task["seed"], group_id, f"{call_id}-{k}")
            for k in range(initial)
        ]
        await engine.run(requests)
        outputs: list[AgentLoopOutput] = []
        problems = []
        for trajectory in done:
            try:
                outputs += agent_loop_outputs(
                    trajectory,
                    self.settings.layout,
                    max_prompt_len=self.prompt_length,
                    max_response_len=self.response_length,
                    global_steps=(backend.min_global_steps, backend.max_global_steps),
                    num_preempted=backend.num_preempted,
                    images_root=self.images_dir,
                )
            except ConfigError as exc:
                problems.append(str(exc))
        if not outputs:
            raise EpisodeFailed(
                f"no trainable trajectory in the ARPO group {group_id}: {'; '.join(problems[:3])}"
            )
        return outputs

    def _sandbox_backend(self) -> Any:
        choice = self.settings.sandbox_backend
        if choice == NONE:
            return None
        key = id(asyncio.get_running_loop())
        if key not in self._sandboxes:
            if not self.settings.unsafe_in_process_sandbox:  # verl started without `toolgym train`'s checks
                require_isolation(
                    self.registry_factory(), choice, allow="toolgym.unsafe_in_process_sandbox=true"
                )
            self._sandboxes[key] = LazySandboxBackend(self.registry_factory, choice)
        return self._sandboxes[key]


def agent_loop_outputs(
    trajectory: Trajectory,
    layout: Layout = "trajectory",
    *,
    max_prompt_len: int | None = None,
    max_response_len: int | None = None,
    global_steps: tuple[int | None, int | None] = (None, None),
    num_preempted: int = 0,
    images_root: str | Path | None = None,
) -> list[AgentLoopOutput]:
    """``trajectory`` as verl ``AgentLoopOutput`` rows (see :func:`.rows.trajectory_rows`).

    ``reward_score`` is the episode return on every row; ``extra_fields`` carry the row's
    :class:`~.rows.RowMeta` under ``"toolgym"``, ``reward_extra_info`` (episode reward, steps,
    terminated: verl's validation metrics), ``turn_scores`` (step rewards) and, when known, the
    weight versions that generated it (``min_global_steps`` / ``max_global_steps``). A row with
    images (a vision-language model's trajectory) carries them, read from ``images_root`` (the
    dataset directory that holds ``images/``), as ``multi_modal_data["images"]``: RGB PIL images
    in the order of the row's image-token runs, as verl's multimodal post-processing takes them.
    Raises ``ConfigError`` when the trajectory is not trainable or its images cannot be read.
    """
    rows = trajectory_rows(
        trajectory, layout, max_prompt_len=max_prompt_len, max_response_len=max_response_len
    )
    timings = trajectory.timings
    outputs = []
    for row in rows:
        extra: dict[str, Any] = {
            META_KEY: row.meta.to_dict(),
            "reward_extra_info": {
                "episode_reward": float(trajectory.reward),
                "num_steps": len(trajectory.steps),
                "terminated": float(trajectory.terminated),
            },
            "turn_scores": [float(s.step_reward) for s in trajectory.steps],
            "tool_rewards": [],
        }
        if global_steps[0] is not None:
            extra["min_global_steps"], extra["max_global_steps"] = global_steps
        media = {"multi_modal_data": {"images": _images(row.images, images_root)}} if row.images else {}
        outputs.append(
            AgentLoopOutput(
                **media,
                prompt_ids=row.prompt_ids,
                response_ids=row.response_ids,
                response_mask=row.response_mask,
                response_logprobs=row.response_logprobs,
                reward_score=float(trajectory.reward),
                num_turns=row.num_turns,
                metrics=AgentLoopMetrics(
                    generate_sequences=timings.llm_s,
                    tool_calls=timings.env_s + timings.sandbox_s,
                    num_preempted=num_preempted,
                ),
                extra_fields=extra,
            )
        )
    return outputs


def _images(refs: list[str], root: str | Path | None) -> list[Any]:
    if root is None:
        raise ConfigError(
            "the trajectory's rows hold images but no images_root was given; pass the dataset "
            "directory that holds images/"
        )
    out = []
    for ref in refs:
        try:
            out.append(pil_image(image_path(root, ref).read_bytes()))
        except OSError as exc:
            raise ConfigError(f"image {ref} cannot be read under {root} ({exc})") from None
    return out
