"""Token sampling for in-process backends: one step for a batch of rows, each with its own settings.

Contracts (shared by every in-process backend and the test server):

- **Logprobs** are of the sampled token under ``log_softmax(logits / temperature)``: the
  temperature-scaled distribution *before* top-p/top-k truncation, which is what a trainer
  recomputes from the same weights. With ``temperature == 0`` (greedy) they are of the raw
  distribution ``log_softmax(logits)``. ``top_logprobs`` are the k best entries of that same
  distribution, best first.
- **Seeded sampling**: each row draws exactly one uniform number per step from its own
  ``torch.Generator`` and picks the token by inverse CDF. The computation of a row reads only
  that row's logits and settings, so a row samples the same token whatever else is in the batch.
- Greedy rows take the argmax and draw nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch


@dataclass(slots=True)
class RowSettings:
    """Sampling settings of one row. ``top_k == 0`` and ``top_p == 1`` disable truncation."""

    temperature: float
    top_p: float
    top_k: int
    generator: torch.Generator | None

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0

    @property
    def truncates(self) -> bool:
        return not self.greedy and (self.top_k > 0 or self.top_p < 1.0)


@dataclass(slots=True)
class StepOutput:
    """What one sampling step produced, one entry per row."""

    token_ids: list[int]
    logprobs: list[float]
    top_ids: list[list[int]] | None
    top_logprobs: list[list[float]] | None


def sample_step(logits: torch.Tensor, rows: Sequence[RowSettings], n_top: int = 0) -> StepOutput:
    """Sample one token per row from ``logits`` (shape ``[rows, vocab]``).

    ``n_top`` is how many alternatives per row to return (the largest any row asked for).
    """
    logits = logits.float()
    n, vocab = logits.shape
    scale = torch.tensor(
        [r.temperature if r.temperature > 0 else 1.0 for r in rows], dtype=logits.dtype, device=logits.device
    )
    logp = torch.log_softmax(logits / scale[:, None], dim=-1)
    chosen = torch.empty(n, dtype=torch.long, device=logits.device)

    greedy = [i for i, r in enumerate(rows) if r.greedy]
    plain = [i for i, r in enumerate(rows) if not r.greedy and not r.truncates]
    truncated = [i for i, r in enumerate(rows) if r.truncates]
    if greedy:
        idx = torch.tensor(greedy, device=logits.device)
        chosen[idx] = logits[idx].argmax(dim=-1)
    if plain:
        idx = torch.tensor(plain, device=logits.device)
        u = _uniforms([rows[i] for i in plain], logits.device)
        cdf = torch.cumsum(logp[idx].exp(), dim=-1)
        pick = torch.searchsorted(cdf, (u * cdf[:, -1]).unsqueeze(-1).contiguous(), right=True).squeeze(-1)
        chosen[idx] = pick.clamp_(max=vocab - 1)
    if truncated:
        chosen_t = _sample_truncated(
            logp[torch.tensor(truncated, device=logits.device)], [rows[i] for i in truncated]
        )
        chosen[torch.tensor(truncated, device=logits.device)] = chosen_t

    token_lp = logp.gather(-1, chosen.unsqueeze(-1)).squeeze(-1)
    top_ids = top_lps = None
    if n_top > 0:
        values, indices = torch.topk(logp, min(n_top, vocab), dim=-1)
        top_ids, top_lps = indices.tolist(), values.tolist()
    return StepOutput(chosen.tolist(), token_lp.tolist(), top_ids, top_lps)


def _uniforms(rows: Sequence[RowSettings], device: torch.device) -> torch.Tensor:
    draws = [torch.rand((), generator=r.generator, dtype=torch.float64).item() for r in rows]
    return torch.tensor(draws, dtype=torch.float32, device=device)


def _sample_truncated(logp: torch.Tensor, rows: Sequence[RowSettings]) -> torch.Tensor:
    """Top-k then top-p (nucleus) truncation over the scaled distribution, then one draw per row."""
    n, vocab = logp.shape
    sorted_lp, order = torch.sort(logp, dim=-1, descending=True, stable=True)
    probs = sorted_lp.exp()
    rank = torch.arange(vocab, device=logp.device).expand(n, vocab)
    top_k = torch.tensor([r.top_k if r.top_k > 0 else vocab for r in rows], device=logp.device)
    keep = rank < top_k[:, None]
    top_p = torch.tensor([r.top_p for r in rows], dtype=probs.dtype, device=logp.device)
    # Keep a token while the mass strictly before it is below top_p; the first token always stays.
    before = torch.cumsum(probs, dim=-1) - probs
    keep &= (before < top_p[:, None]) | (rank == 0)
    probs = probs.masked_fill(~keep, 0.0)
    cdf = torch.cumsum(probs, dim=-1)
    u = _uniforms(rows, logp.device)
    pick = torch.searchsorted(cdf, (u * cdf[:, -1]).unsqueeze(-1).contiguous(), right=True).squeeze(-1)
    last_kept = keep.sum(dim=-1) - 1
    pick = torch.minimum(pick, last_kept)
    return order.gather(-1, pick.unsqueeze(-1)).squeeze(-1)


class StopStrings:
    """Detects stop strings in a row's generated ids by decoding only a tail window.

    A stop string of ``c`` characters spans at most ``4c`` byte-level tokens, so decoding the last
    ``4c + 4`` ids finds any occurrence completed by the newest token.
    """

    def __init__(self, decode: object, stops: Sequence[str]) -> None:
        self._decode = decode
        self.stops = tuple(s for s in stops if s)
        self.window = 4 * max((len(s) for s in self.stops), default=0) + 4

    def match(self, ids: Sequence[int]) -> str | None:
        """The stop string the generated ids now contain, or None.

        Called after every new token, so the first match found is the one the newest token
        completed (an earlier one would have stopped generation already).
        """
        if not self.stops:
            return None
        text = self._decode(list(ids[-self.window :]))  # type: ignore[operator]
        for stop in self.stops:
            if stop in text:
                return stop
        return None
