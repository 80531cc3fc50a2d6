"""Continuous batching of decode steps over a Hugging Face causal LM with a KV cache.

``ContinuousBatch`` holds the running rows and their shared ``DynamicCache``. Each ``step``
prefills the newly admitted rows together (left padding, an attention mask and per-row position
ids), samples their first token, concatenates their cache to the running one (left-padding the
shorter history), then runs one decode step for every row. A row that stops is delivered at once;
its slot in the cache stays (decoding a token nobody reads) until a quarter of the slots are such
leftovers or rows join, and only then is the cache compacted and the columns that became padding in
every row cut. Compacting copies the whole cache, so doing it on every stop made the copies cost
more than the leftover rows' compute. Not thread-safe: one worker thread drives it (see
``transformers_backend``).
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from ...types import FinishReason, GenerationRequest, GenerationResult
from .sampling import RowSettings, StopStrings, sample_step
from .vlm import ImageRow, is_vlm

COMPACT_AT = 0.25
"""Compact the cache once this fraction of its slots (or more) hold rows that already stopped."""


@dataclass(eq=False)
class Row:
    """One request in the batch. Only the worker thread mutates it (``cancelled`` aside).

    ``deliver`` is called once, from the worker thread, with the result or the error.
    """

    request: GenerationRequest
    deliver: Callable[[GenerationResult | BaseException], None]
    settings: RowSettings
    stops: StopStrings
    stop_ids: frozenset[int]
    max_new: int
    seed: int
    version: str | None
    enqueued: float
    out_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    top: list[list[tuple[int, float]]] | None = None
    finish: FinishReason | None = None
    matched: int | str | None = None
    cancelled: bool = False
    vision: ImageRow | None = None
    """A vision-language model's inputs for the prompt's images (None: a text prompt)."""


class ContinuousBatch:
    """The running batch of one model. ``steps`` and ``max_rows_seen`` are counters for tests."""

    def __init__(self, model: Any, *, device: torch.device, pad_token_id: int) -> None:
        self.model = model
        self.device = device
        self.pad_token_id = pad_token_id
        params = inspect.signature(model.forward).parameters
        self._keep_kw = (
            "logits_to_keep"
            if "logits_to_keep" in params
            else ("num_logits_to_keep" if "num_logits_to_keep" in params else None)
        )
        self.mrope = is_vlm(model)
        """Qwen-VL's 3D rotary positions: computed per row, shifted after images (``vlm.py``)."""
        self.can_join = not _has_sliding_window(model.config)
        """Whether rows may join a running batch (not with sliding-window caches)."""
        self._slots: list[Row | None] = []
        """The cache's rows in batch order; ``None`` where a row stopped and was delivered."""
        self.version: str | None = None
        self._cache: Any = None
        self._mask: torch.Tensor | None = None
        self.steps = 0
        self.max_rows_seen = 0

    @property
    def rows(self) -> list[Row]:
        """The running rows (not yet delivered)."""
        return [r for r in self._slots if r is not None]

    def reset(self) -> list[Row]:
        """Forget the running rows (after a failure); returns them."""
        rows = self.rows
        self._slots, self._cache, self._mask = [], None, None
        return rows

    def step(self, new: list[Row], version: str | None) -> None:
        """Admit ``new`` (prefill and first token), then one decode step for every running row.

        ``version`` is the weight version now loaded: new rows are stamped with it.
        """
        self.version = version
        self._drop([i for i, r in enumerate(self._slots) if r is not None and r.cancelled])
        if new:
            for row in new:
                row.version = version
            cache, mask, logits = self._prefill(new)
            self._advance(new, logits)
            keep = [i for i, r in enumerate(new) if r.finish is None]
            self._finish([r for r in new if r.finish is not None])
            if keep:
                kv, mask = _select(_kv(cache), mask, keep)
                if self._slots:
                    self._compact()  # the cache is copied to join anyway: leave the stopped rows out
                if self._slots:
                    kv, mask = _concat(_kv(self._cache), self._mask, kv, mask)  # type: ignore[arg-type]
                    cache = self._cache
                _set_kv(cache, kv)
                self._cache, self._mask = cache, mask
                self._slots = [*self._slots, *(new[i] for i in keep)]
        if not self._slots:
            return
        slots, past = self._slots, self._mask
        assert past is not None
        n = past.shape[0]
        tokens = torch.tensor(
            [r.out_ids[-1] if r is not None else self.pad_token_id for r in slots], device=self.device
        )
        positions = torch.tensor(
            [
                len(r.request.input_ids) + len(r.out_ids) - 1 + (r.vision.rope_delta if r.vision else 0)
                if r is not None
                else 0
                for r in slots
            ],
            device=self.device,
        )
        mask = torch.cat([past, past.new_ones(n, 1)], dim=1)
        out = self.model(
            input_ids=tokens[:, None],
            attention_mask=mask,
            position_ids=positions[:, None],
            past_key_values=self._cache,
            use_cache=True,
        )
        self._cache, self._mask = out.past_key_values, mask
        self.steps += 1
        self.max_rows_seen = max(self.max_rows_seen, n)
        live = [(i, r) for i, r in enumerate(slots) if r is not None]
        logits = out.logits[:, -1, :]
        self._advance([r for _, r in live], logits if len(live) == n else logits[[i for i, _ in live]])
        self._drop([i for i, r in live if r.finish is not None])

    def _prefill(self, rows: list[Row]) -> tuple[Any, torch.Tensor, torch.Tensor]:
        from transformers import DynamicCache

        prompts = [r.request.input_ids for r in rows]
        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for i, p in enumerate(prompts):
            ids[i, width - len(p) :] = torch.tensor(p, dtype=torch.long)
            mask[i, width - len(p) :] = 1
        ids, mask = ids.to(self.device), mask.to(self.device)
        positions = (mask.cumsum(-1) - 1).clamp_(min=0)
        extra: dict[str, Any] = {}
        if self.mrope:
            positions, extra = self._vision_inputs(rows, positions)
        try:
            cache = DynamicCache(config=self.model.config)
        except TypeError:  # older transformers
            cache = DynamicCache()
        kwargs: dict[str, Any] = {self._keep_kw: 1} if self._keep_kw else {}
        out = self.model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=positions,
            past_key_values=cache,
            use_cache=True,
            **kwargs,
            **extra,
        )
        self.max_rows_seen = max(self.max_rows_seen, len(prompts))
        return out.past_key_values, mask, out.logits[:, -1, :]

    def _vision_inputs(self, rows: list[Row], text: torch.Tensor) -> tuple[torch.Tensor, dict[str, Any]]:
        """Left-padded 3D positions ``(3, rows, width)`` and the pixel inputs of the rows' images."""
        positions = text[None].repeat(3, 1, 1)
        width = positions.shape[-1]
        for i, row in enumerate(rows):
            if row.vision is not None:
                n = row.vision.positions.shape[-1]
                positions[:, i, width - n :] = row.vision.positions.to(positions.device)
        images = [r.vision for r in rows if r.vision is not None]
        if not images:
            return positions, {}
        return positions, {
            "pixel_values": torch.cat([v.pixel_values for v in images]).to(self.device),
            "image_grid_thw": torch.cat([v.image_grid_thw for v in images]).to(self.device),
        }

    def _advance(self, rows: list[Row], logits: torch.Tensor) -> None:
        """Sample one token for each row, record it and decide whether the row stops."""
        n_top = max(r.request.sampling.top_logprobs for r in rows)
        step = sample_step(logits, [r.settings for r in rows], n_top)
        for i, row in enumerate(rows):
            token = step.token_ids[i]
            row.out_ids.append(token)
            row.logprobs.append(step.logprobs[i])
            if row.top is not None and step.top_ids is not None and step.top_logprobs is not None:
                k = row.request.sampling.top_logprobs
                row.top.append(list(zip(step.top_ids[i][:k], step.top_logprobs[i][:k], strict=True)))
            if token in row.stop_ids:
                row.finish, row.matched = "stop", token
            elif (stop := row.stops.match(row.out_ids)) is not None:
                row.finish, row.matched = "stop", stop
            elif len(row.out_ids) >= row.max_new:
                row.finish = "length"

    def _drop(self, gone: list[int]) -> None:
        """Take rows (finished or cancelled) out of the running batch and deliver the finished; the
        cache is compacted once enough of its slots are leftovers (``COMPACT_AT``)."""
        if not gone:
            return
        leaving = [r for i in gone if (r := self._slots[i]) is not None]
        self._finish([r for r in leaving if r.finish is not None])
        for i in gone:
            self._slots[i] = None
        stopped = sum(r is None for r in self._slots)
        if stopped == len(self._slots):
            self._slots, self._cache, self._mask = [], None, None
        elif stopped >= COMPACT_AT * len(self._slots):
            self._compact()

    def _compact(self) -> None:
        """Drop the stopped rows' slots from the cache and cut the columns now padding in every row."""
        keep = [i for i, r in enumerate(self._slots) if r is not None]
        if len(keep) == len(self._slots):
            return
        self._slots = [self._slots[i] for i in keep]
        if not keep:
            self._cache, self._mask = None, None
            return
        assert self._mask is not None
        kv, mask = _select(_kv(self._cache), self._mask, keep)
        lead = int((mask.sum(0) == 0).long().cumprod(0).sum())  # columns that are padding in every row
        if lead:
            kv, mask = [[k[:, :, lead:], v[:, :, lead:]] for k, v in kv], mask[:, lead:]
        _set_kv(self._cache, kv)
        self._mask = mask

    def _finish(self, rows: list[Row]) -> None:
        now = time.perf_counter()
        for row in rows:
            meta: dict[str, Any] = {"seed": row.seed, "backend": "transformers"}
            if row.matched is not None:
                meta["matched_stop"] = row.matched
            if row.version != self.version:
                meta["weight_version_end"] = self.version
            result = GenerationResult(
                output_ids=row.out_ids,
                logprobs=row.logprobs,
                finish_reason=row.finish or "length",
                top_logprobs=row.top,
                weight_version=row.version,
                prompt_tokens=len(row.request.input_ids),
                latency_s=now - row.enqueued,
                meta=meta,
            )
            row.deliver(result)


# -- KV cache surgery (DynamicCache across transformers versions) -------------------------------


def _kv(cache: Any) -> list[list[torch.Tensor]]:
    if hasattr(cache, "layers"):
        return [[layer.keys, layer.values] for layer in cache.layers]
    return [[k, v] for k, v in zip(cache.key_cache, cache.value_cache, strict=True)]


def _set_kv(cache: Any, kv: list[list[torch.Tensor]]) -> None:
    if hasattr(cache, "layers"):
        for layer, (k, v) in zip(cache.layers, kv, strict=True):
            layer.keys, layer.values = k, v
    else:
        cache.key_cache[:] = [k for k, _ in kv]
        cache.value_cache[:] = [v for _, v in kv]


def _select(
    kv: list[list[torch.Tensor]], mask: torch.Tensor, rows: list[int]
) -> tuple[list[list[torch.Tensor]], torch.Tensor]:
    if len(rows) == mask.shape[0]:
        return kv, mask
    idx = torch.tensor(rows, device=mask.device)
    return [[k.index_select(0, idx), v.index_select(0, idx)] for k, v in kv], mask.index_select(0, idx)


def _concat(
    kv_a: list[list[torch.Tensor]], mask_a: torch.Tensor, kv_b: list[list[torch.Tensor]], mask_b: torch.Tensor
) -> tuple[list[list[torch.Tensor]], torch.Tensor]:
    """Stack two batches, left-padding the shorter history (padding is masked out)."""
    width = max(mask_a.shape[1], mask_b.shape[1])
    pa, pb = width - mask_a.shape[1], width - mask_b.shape[1]
    kv = [
        [
            torch.cat([F.pad(ka, (0, 0, pa, 0)), F.pad(kb, (0, 0, pb, 0))]),
            torch.cat([F.pad(va, (0, 0, pa, 0)), F.pad(vb, (0, 0, pb, 0))]),
        ]
        for (ka, va), (kb, vb) in zip(kv_a, kv_b, strict=True)
    ]
    return kv, torch.cat([F.pad(mask_a, (pa, 0)), F.pad(mask_b, (pb, 0))])


def _has_sliding_window(config: Any) -> bool:
    types = getattr(config, "layer_types", None) or []
    if any("sliding" in str(t) or "chunked" in str(t) for t in types):
        return True
    return bool(getattr(config, "use_sliding_window", False) and getattr(config, "sliding_window", None))
