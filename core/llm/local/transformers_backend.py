"""In-process Hugging Face ``transformers`` backend: the embedded default, CPU first.

One worker thread owns the model and runs continuous batching: requests that arrive while others
decode join the running batch at the next step (their prompts are prefilled together, their KV
cache is left-padded and concatenated to the running one), and each row leaves the batch as soon
as it stops. The event loop never runs a forward pass; it only enqueues requests and awaits
futures the worker resolves.

Every row stops on its own: the model's EOS ids, ``stop_token_ids``, stop strings (found by
decoding the row's newest ids; the tokens that complete a stop string are kept, they were
sampled), ``max_new_tokens`` or the model's context length. Sampling and logprob conventions are
those of :mod:`toolgym.core.llm.local.sampling`.

An in-process trainer updates the weights through :meth:`TransformersBackend.paused` (or
:meth:`load_state_dict`), which waits for the current decode step to end and holds generation
until the update is done; calling :meth:`set_weight_version` inside that block stamps every
request admitted afterwards. Rows in flight keep the KV cache computed with the old weights;
their result carries the version they were admitted under in ``weight_version`` and, when it
changed meanwhile, the new one in ``meta["weight_version_end"]``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import queue
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from ...errors import ConfigError, ContextLengthError, LLMError
from ...tokens.vision import load_image_processor
from ...types import GenerationRequest, GenerationResult
from ..base import LLMBackend
from .batching import ContinuousBatch, Row
from .sampling import RowSettings, StopStrings
from .vlm import image_row, is_vlm

log = logging.getLogger("toolgym.llm.transformers")


class TransformersBackend(LLMBackend):
    """Token-in/token-out generation with a local Hugging Face causal LM.

    ``model`` is a model directory or an already loaded ``PreTrainedModel`` (shared with a
    trainer); ``tokenizer`` a tokenizer object or directory (default: the model's own).
    ``max_batch_size`` bounds the rows decoded together; ``batch_window_s`` is how long an idle
    worker waits for companions of a first request before prefilling.
    """

    name = "transformers"

    def __init__(
        self,
        model: str | os.PathLike[str] | Any,
        *,
        tokenizer: Any = None,
        device: str = "cpu",
        dtype: str | torch.dtype | None = None,
        max_batch_size: int = 16,
        batch_window_s: float = 0.002,
        num_threads: int | None = None,
        model_name: str | None = None,
        weight_version: str | None = "0",
        image_processor: Any = None,
    ) -> None:
        from transformers import AutoModelForCausalLM, AutoModelForImageTextToText, AutoTokenizer

        if max_batch_size < 1:
            raise ConfigError(f"max_batch_size must be at least 1, got {max_batch_size}")
        if num_threads:
            torch.set_num_threads(int(num_threads))
        self.device = torch.device(device)
        if isinstance(model, (str, os.PathLike)):
            path = Path(model).expanduser()
            if not (path / "config.json").is_file():
                raise ConfigError(
                    f"{str(path)!r} is not a Hugging Face model directory (no config.json); give the folder a model was saved to"
                )
            torch_dtype = _dtype(dtype)
            auto = AutoModelForImageTextToText if _has_vision(path) else AutoModelForCausalLM
            with _quiet_loading():
                try:
                    loaded = auto.from_pretrained(str(path), dtype=torch_dtype)
                except TypeError:  # transformers < 4.56 names it torch_dtype
                    loaded = auto.from_pretrained(str(path), torch_dtype=torch_dtype)
            self.model = loaded.to(self.device)  # type: ignore[arg-type]
            self.model_path: str | None = str(path)
            tokenizer = tokenizer if tokenizer is not None else str(path)
        else:
            self.model = model
            self.model_path = getattr(getattr(model, "config", None), "_name_or_path", None) or None
            if tokenizer is None:
                raise ConfigError("a TransformersBackend built from a model object needs tokenizer=")
        if isinstance(tokenizer, (str, os.PathLike)):
            tokenizer = AutoTokenizer.from_pretrained(str(tokenizer))
        self.model.eval()
        self.tokenizer = tokenizer
        self.model_name = model_name or (
            Path(self.model_path).name if self.model_path else type(self.model).__name__
        )
        self.max_batch_size = max_batch_size
        self.batch_window_s = batch_window_s
        self.eos_token_ids = _eos_ids(self.model, tokenizer)
        self.vocab_size = int(self.model.get_input_embeddings().weight.shape[0])
        config = self.model.config
        self.max_context: int | None = getattr(config, "max_position_embeddings", None) or getattr(
            getattr(config, "text_config", None), "max_position_embeddings", None
        )
        self.image_processor = image_processor
        """A vision-language model's image processor (default: the one saved with the model)."""
        if is_vlm(self.model) and image_processor is None and self.model_path:
            self.image_processor = load_image_processor(self.model_path)
        pad = getattr(tokenizer, "pad_token_id", None)
        self.pad_token_id = pad if pad is not None else min(self.eos_token_ids, default=0)
        self._fast = getattr(tokenizer, "backend_tokenizer", None)
        self._batch = ContinuousBatch(self.model, device=self.device, pad_token_id=self.pad_token_id)
        self._version = weight_version
        self._queue: queue.Queue[Row | None] = queue.Queue()
        self._cond = threading.Condition()
        self._pausers = 0
        self._in_step = False
        self._closed = False
        self._thread: threading.Thread | None = None

    # -- public API ---------------------------------------------------------------------------

    @property
    def steps(self) -> int:
        """Decode steps run so far (a counter for tests and benchmarks)."""
        return self._batch.steps

    @property
    def max_rows_seen(self) -> int:
        """The largest batch decoded so far."""
        return self._batch.max_rows_seen

    @property
    def weight_version(self) -> str | None:
        return self._version

    @property
    def max_context_len(self) -> int | None:
        """The model's positions (``max_context``): the engine's context budget is capped to it."""
        return self.max_context

    @max_context_len.setter
    def max_context_len(self, value: int | None) -> None:
        self.max_context = value

    def set_weight_version(self, version: str | int | None) -> None:
        """Stamp results of requests admitted from now on with ``version``."""
        self._version = None if version is None else str(version)

    @contextmanager
    def paused(self) -> Iterator[Any]:
        """Hold generation (after the current step) while the block runs; yields the model.

        For a trainer that shares ``backend.model``: run the optimizer step (or copy weights) in
        this block. Blocks the calling thread briefly; from async code use :meth:`update_weights`.
        """
        with self._cond:
            self._pausers += 1
            while self._in_step:
                self._cond.wait()
        try:
            yield self.model
        finally:
            with self._cond:
                self._pausers -= 1
                self._cond.notify_all()

    def load_state_dict(
        self, state_dict: Mapping[str, Any], *, version: str | int | None = None, strict: bool = True
    ) -> None:
        """Copy new weights in with generation paused, then set the weight version."""
        with self.paused() as model, torch.no_grad():
            model.load_state_dict(dict(state_dict), strict=strict)
        if version is not None:
            self.set_weight_version(version)

    async def update_weights(
        self, state_dict: Mapping[str, Any], *, version: str | int | None = None
    ) -> None:
        """:meth:`load_state_dict` run off the event loop."""
        await asyncio.to_thread(self.load_state_dict, state_dict, version=version)

    async def generate(self, request: GenerationRequest) -> GenerationResult:
        sp = request.sampling
        ids = list(request.input_ids)
        self._check_prompt(ids)
        max_new = sp.max_new_tokens
        if self.max_context is not None:
            max_new = min(max_new, self.max_context - len(ids))
        if max_new <= 0:
            return GenerationResult(
                [], [], "length", [] if sp.top_logprobs else None, self._version, len(ids)
            )
        if self._closed:
            raise LLMError("the transformers backend is closed; create a new one")
        vision = None
        if request.images:
            if self.image_processor is None or not is_vlm(self.model):
                raise LLMError(
                    f"the prompt has {len(request.images)} image(s) but {self.model_name} is not a vision-language "
                    "model with an image processor; use a VLM (e.g. --model tiny-vl) or drop the images"
                )
            vision = await asyncio.to_thread(image_row, self.model, self.image_processor, ids, request.images)
        seed = sp.seed if sp.seed is not None else int.from_bytes(os.urandom(8), "little") >> 1
        generator = None
        if sp.temperature > 0:
            # on the CPU whatever the model's device: the sampler draws one CPU scalar per token (inverse
            # CDF), so a seeded request samples the same tokens on a GPU as on the CPU
            generator = torch.Generator()
            generator.manual_seed(seed)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[GenerationResult] = loop.create_future()
        row = Row(
            request=request,
            deliver=_deliverer(loop, future),
            settings=RowSettings(sp.temperature, sp.top_p, sp.top_k, generator),
            stops=StopStrings(self._decode, sp.stop),
            stop_ids=self.eos_token_ids | frozenset(sp.stop_token_ids),
            max_new=max_new,
            seed=seed,
            version=self._version,
            enqueued=time.perf_counter(),
            top=[] if sp.top_logprobs else None,
            vision=vision,
        )
        future.add_done_callback(lambda f: setattr(row, "cancelled", f.cancelled()))
        self._ensure_worker()
        self._queue.put(row)
        return await future

    async def aclose(self) -> None:
        """Stop the worker; requests still queued or running fail with a non-transient LLMError."""
        self._closed = True
        self._queue.put(None)
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join, 30)
        self._fail(self._drain(), LLMError("the transformers backend was closed"))

    # -- request checks ------------------------------------------------------------------------

    def _check_prompt(self, ids: list[int]) -> None:
        if not ids:
            raise LLMError("empty prompt: give at least one input token id")
        bad = [t for t in ids if not 0 <= t < self.vocab_size]
        if bad:
            raise LLMError(
                f"input token id {bad[0]} is outside the model's vocabulary (0..{self.vocab_size - 1}); was the prompt tokenized with another tokenizer?"
            )
        if self.max_context is not None and len(ids) >= self.max_context:
            raise ContextLengthError(
                f"prompt of {len(ids)} tokens does not fit the model's context of {self.max_context}; shorten it",
                limit=self.max_context,
            )

    def _decode(self, ids: list[int]) -> str:
        if self._fast is not None:
            return self._fast.decode(ids, skip_special_tokens=False)
        return self.tokenizer.decode(ids, skip_special_tokens=False)

    # -- worker --------------------------------------------------------------------------------

    def _ensure_worker(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            with self._cond:
                if self._thread is None or not self._thread.is_alive():
                    self._thread = threading.Thread(
                        target=self._work, name="toolgym-transformers", daemon=True
                    )
                    self._thread.start()

    def _work(self) -> None:
        with torch.inference_mode():
            while True:
                new = self._collect()
                if new is None:
                    return
                with self._cond:
                    while self._pausers:
                        self._cond.wait()
                    self._in_step = True
                try:
                    self._batch.step(new, self._version)
                except Exception as exc:  # a failed forward must not leave callers waiting
                    log.exception("generation step failed")
                    rows = [*self._batch.reset(), *(r for r in new if r.finish is None)]
                    self._fail(rows, LLMError(f"generation failed: {type(exc).__name__}: {exc}"))
                finally:
                    with self._cond:
                        self._in_step = False
                        self._cond.notify_all()

    def _collect(self) -> list[Row] | None:
        """New rows to admit now (maybe none); None when the backend is closing."""
        running = self._batch.rows
        capacity = self.max_batch_size - len(running)
        if running and not self._batch.can_join:
            capacity = 0
        new: list[Row] = []
        if not running:
            while True:  # idle: block until a first request, then gather its companions
                try:
                    first = self._queue.get(timeout=0.5)
                except queue.Empty:
                    continue
                if first is None:
                    return None
                if not first.cancelled:
                    new.append(first)
                    break
            deadline = time.perf_counter() + self.batch_window_s
            while len(new) < capacity and (left := deadline - time.perf_counter()) > 0:
                try:
                    item = self._queue.get(timeout=left)
                except queue.Empty:
                    break
                if item is None:
                    self._queue.put(None)
                    break
                if not item.cancelled:
                    new.append(item)
            return new
        while len(new) < capacity:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is None:
                self._fail(new, LLMError("the transformers backend was closed"))
                return None
            if not item.cancelled:
                new.append(item)
        return new

    def _drain(self) -> list[Row]:
        rows = self._batch.reset()
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return rows
            if item is not None:
                rows.append(item)

    @staticmethod
    def _fail(rows: list[Row], error: LLMError) -> None:
        for row in rows:
            row.deliver(error)


def _deliverer(loop: asyncio.AbstractEventLoop, future: asyncio.Future[GenerationResult]) -> Any:
    """A thread-safe way to complete ``future`` (on its own loop) with a result or an error."""

    def settle(outcome: GenerationResult | BaseException) -> None:
        if future.done():
            return
        if isinstance(outcome, BaseException):
            future.set_exception(outcome)
        else:
            future.set_result(outcome)

    def deliver(outcome: GenerationResult | BaseException) -> None:
        try:
            loop.call_soon_threadsafe(settle, outcome)
        except RuntimeError:  # the caller's loop is closed: nobody is waiting
            pass

    return deliver


def _has_vision(path: Path) -> bool:
    import json

    try:
        return "vision_config" in json.loads((path / "config.json").read_text())
    except (OSError, ValueError):
        return False


def _eos_ids(model: Any, tokenizer: Any) -> frozenset[int]:
    ids: set[int] = set()
    for value in (
        getattr(tokenizer, "eos_token_id", None),
        getattr(getattr(model, "generation_config", None), "eos_token_id", None),
    ):
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, (list, tuple)):
            ids.update(int(v) for v in value)
    return frozenset(ids)


def _dtype(dtype: str | torch.dtype | None) -> torch.dtype | str:
    if dtype is None:
        return torch.float32
    if isinstance(dtype, torch.dtype) or dtype == "auto":
        return dtype
    try:
        value = getattr(torch, str(dtype))
    except AttributeError:
        value = None
    if not isinstance(value, torch.dtype):
        raise ConfigError(f"unknown dtype {dtype!r}; use float32, bfloat16, float16 or auto")
    return value


@contextlib.contextmanager
def _quiet_loading() -> Iterator[None]:
    """No "Loading weights" bar from transformers: a local model of a few MB loads in milliseconds,
    and the bar is noise in every collection's output (toolgym shows its own progress)."""
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()
