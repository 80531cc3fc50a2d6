"""verl's rollout replica ``toolgym_cpu``: generation from toolgym's CPU sampler, weights from the actor.

Three pieces, one per side of verl's rollout contract:

- :class:`ToolgymCPUServer`, a Ray actor around :class:`~toolgym.core.llm.local.transformers_backend.TransformersBackend`
  (continuous batching on the CPU), with the token-in/token-out ``generate`` verl's
  ``LLMServerClient`` calls (``workers/rollout/llm_server.py:150``) and an OpenAI/SGLang-shaped
  HTTP server (``core/llm/serving/server.py``) whose address is the replica's ``server_address``.
- :class:`ToolgymCPUReplica`, the ``RolloutReplica`` verl builds by name
  (``RolloutReplicaRegistry``, ``actor_rollout_ref.rollout.name=toolgym_cpu``): one server actor
  per replica, asking Ray for no CPU of its own (it shares the trainer's).
- :class:`ToolgymCPUServerAdapter`, the ``BaseRollout`` each trainer worker builds
  (``get_rollout_class``, through :func:`.cpu_shims.register_rollout_adapter`): verl's ``naive``
  weight sync (``engine_workers.py:804``, ``self.rollout.update_weights(per_tensor_param, ...)``)
  hands it the actor's tensors, which rank 0 of each replica copies to that replica's server.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any

import ray
from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.replica import RolloutReplica, RolloutReplicaRegistry, TokenOutput

from toolgym.core.errors import ConfigError
from toolgym.core.types import GenerationRequest, SamplingParams

from . import cpu_shims

log = logging.getLogger("toolgym.verl")

REPLICA_NAME = "toolgym_cpu"
"""``actor_rollout_ref.rollout.name`` that selects this replica."""


def server_name(replica_rank: int) -> str:
    """The Ray actor name of replica ``replica_rank``'s server (how the workers find it)."""
    return f"toolgym_cpu_server_{replica_rank}"


class ToolgymCPUServer:
    """One replica's generation server: toolgym's CPU sampler behind verl's server-actor methods."""

    def __init__(
        self,
        model_path: str,
        replica_rank: int,
        response_length: int,
        max_model_len: int,
        max_batch_size: int = 16,
        serve_http: bool = True,
    ) -> None:
        from toolgym.core.llm.local.transformers_backend import TransformersBackend

        self.replica_rank = replica_rank
        self.response_length = response_length
        self.max_model_len = max_model_len
        self.backend = TransformersBackend(model_path, device="cpu", max_batch_size=max_batch_size)
        with self.backend.paused() as model:
            self.param_names = frozenset(model.state_dict())
        self.global_steps: int | None = None
        self.lora: Any = None
        """The rollout's LoRA state once a sync carried a ``peft_config`` (:mod:`.lora_sync`)."""
        self.http: Any = None
        if serve_http:
            from toolgym.core.llm.serving.server import ServerThread

            self.http = ServerThread(self.backend)
            self.http.__enter__()

    def address(self) -> str:
        """``host:port`` of the OpenAI/SGLang-shaped HTTP server (empty without one)."""
        return self.http.url.split("://", 1)[-1].rstrip("/") if self.http is not None else ""

    async def generate(
        self,
        prompt_ids: list[int],
        sampling_params: dict[str, Any],
        request_id: str,
        image_data: Any = None,
        video_data: Any = None,
        **_: Any,
    ) -> TokenOutput:
        """verl's token-in/token-out call; ``sampling_params`` as verl's agent loops build them."""
        if image_data is not None or video_data is not None:
            raise ConfigError(
                "the toolgym_cpu rollout generates from text tokens only; drop images/videos or use vllm/sglang"
            )
        params = dict(sampling_params)
        max_new = params.pop("max_tokens", params.pop("max_new_tokens", self.response_length))
        max_new = max(1, min(int(max_new), self.response_length, self.max_model_len - len(prompt_ids)))
        top_k = int(params.get("top_k", 0) or 0)
        sampling = SamplingParams(
            max_new_tokens=max_new,
            temperature=float(params.get("temperature", 1.0)),
            top_p=float(params.get("top_p", 1.0)),
            top_k=max(top_k, 0),
            seed=params.get("seed"),
            stop=tuple(params.get("stop") or ()),
            stop_token_ids=tuple(params.get("stop_token_ids") or ()),
        )
        result = await self.backend.generate(GenerationRequest(list(prompt_ids), sampling, request_id))
        return TokenOutput(
            token_ids=list(result.output_ids),
            log_probs=list(result.logprobs)
            if params.get("logprobs") and result.logprobs is not None
            else None,
            stop_reason="completed",
            extra_fields={"global_steps": self.global_steps},
        )

    async def update_weights(
        self, state_dict: dict[str, Any], global_steps: int | None = None, peft_config: Any = None
    ) -> int:
        """Load the actor's tensors (HF names, CPU); returns how many were loaded. With a ``peft_config``
        (LoRA, ``lora.merge: false``) the first sync injects the adapter and later ones carry it alone
        (:class:`toolgym.training.verl.lora_sync.RolloutLora`)."""
        version = global_steps if global_steps is not None else self.backend.weight_version
        if peft_config is not None or self.lora is not None:
            from toolgym.training.verl.lora_sync import RolloutLora

            def load() -> int:
                with self.backend.paused() as model:
                    if self.lora is None:
                        self.lora = RolloutLora(model)
                    return self.lora.load(state_dict, peft_config)

            loaded = await asyncio.to_thread(load)
            self.backend.set_weight_version(version)
            self.global_steps = global_steps
            return loaded
        unknown = sorted(set(state_dict) - self.param_names)
        if unknown:
            raise ConfigError(
                f"the actor sent weights the rollout model does not have ({unknown[:3]}...): "
                "actor and rollout must load the same model"
            )
        # strict=False: tied weights (lm_head of a tied model) may arrive under one name only
        await asyncio.to_thread(self.backend.load_state_dict, state_dict, version=version, strict=False)
        self.global_steps = global_steps
        return len(state_dict)

    # verl calls these around weight syncs and partial rollouts; a CPU sampler keeps its weights and
    # holds no KV cache between requests, so there is nothing to free or restore
    async def wake_up(self) -> None: ...
    async def sleep(self) -> None: ...
    async def clear_kv_cache(self) -> None: ...
    async def release_kv_cache(self) -> None: ...
    async def resume_kv_cache(self) -> None: ...
    async def abort_all_requests(self, reject_request: bool = False) -> None: ...
    async def resume_generation(self) -> None: ...
    async def start_profile(self, **kwargs: Any) -> None: ...
    async def stop_profile(self) -> None: ...


class ToolgymCPUReplica(RolloutReplica):
    """verl's rollout replica ``toolgym_cpu``: one :class:`ToolgymCPUServer` actor per replica."""

    def rollout_worker_use_gpu(self) -> bool:
        return False

    async def launch_servers(self) -> None:
        # a DictConfig here (HFModelConfig in the workers): local_path is set only on the dataclass
        model_path = _get(self.model_config, "local_path") or _get(self.model_config, "path")
        server_cls: Any = ray.remote(ToolgymCPUServer)  # ray's stubs type the handle as the class
        actor: Any = server_cls.options(
            name=server_name(self.replica_rank),
            num_cpus=0,
            max_concurrency=self.max_concurrency,
        ).remote(
            model_path,
            self.replica_rank,
            self.config.response_length,
            self.config.max_model_len or (self.config.prompt_length + self.config.response_length),
        )
        self.servers = [actor]
        self._server_handle = actor
        self._server_address = await actor.address.remote()


class ToolgymCPUServerAdapter(BaseRollout):
    """The trainer worker's side: forwards the actor's weights to its replica's server."""

    def __init__(self, config: Any, model_config: Any, device_mesh: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(config, model_config, device_mesh, *args, **kwargs)
        import torch.distributed as dist

        size = self.config.tensor_model_parallel_size * self.config.pipeline_model_parallel_size
        rank = dist.get_rank() if dist.is_initialized() else 0
        self.replica_rank, self.sends = rank // size, rank % size == 0
        self.sleep_level = 0

    async def update_weights(
        self, weights: Iterable[Any], wire_format: str = "named_tensors", **kwargs: Any
    ) -> None:
        if wire_format != "named_tensors":
            raise ConfigError(
                f"the toolgym_cpu rollout takes full tensors, not {wire_format!r}: "
                "set actor_rollout_ref.rollout.checkpoint_engine.backend=naive"
            )
        state = {}
        for name, tensor in weights:  # every rank iterates: FSDP gathers are collective
            full = tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor
            if self.sends:
                state[name] = full.detach().to("cpu").clone()
        if self.sends:
            server = ray.get_actor(server_name(self.replica_rank))
            peft_config = kwargs.get("peft_config")  # peft's LoraConfig from verl's FSDP engine
            if peft_config is not None and hasattr(peft_config, "to_dict"):
                peft_config = peft_config.to_dict()
            await server.update_weights.remote(state, kwargs.get("global_steps"), peft_config)

    async def resume(self, tags: list[str]) -> None: ...

    async def release(self) -> None: ...


def _get(config: Any, key: str) -> Any:
    return config.get(key) if hasattr(config, "get") else getattr(config, key, None)


def check_replica_name(name: str) -> None:
    """Raise one sentence listing the known replicas when ``name`` is not one (loads none of them:
    verl's ``vllm`` entry imports vLLM)."""
    known = sorted(RolloutReplicaRegistry._registry)
    if name not in known:
        raise ConfigError(
            f"unknown rollout replica {name!r}: actor_rollout_ref.rollout.name must be one of {', '.join(known)}"
        )


def replica_class(name: str) -> type[RolloutReplica]:
    """verl's replica class for ``name``; an unknown name raises one sentence listing the known ones."""
    check_replica_name(name)
    return RolloutReplicaRegistry.get(name)


def register_with_verl() -> None:
    """:mod:`.plugin`'s hook: the replica by name, its worker-side adapter, the CPU resource check."""
    RolloutReplicaRegistry.register(REPLICA_NAME, lambda: ToolgymCPUReplica)
    cpu_shims.register_rollout_adapter(REPLICA_NAME, f"{__name__}.ToolgymCPUServerAdapter")
    cpu_shims.patch_resource_check()
