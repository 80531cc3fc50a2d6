"""The optimisation side of the local trainer: logprobs, PPO and SFT updates, checkpoints.

``PolicyTrainer`` owns a Hugging Face causal LM (the same object a ``TransformersBackend`` samples
from, when the two share it), an AdamW optimiser and, optionally, a frozen reference copy for a KL
penalty. An update takes rows (:mod:`.batch`), splits them into ``mini_batch_size`` rows per
optimiser step and each of those into ``micro_batch_size`` rows per forward pass, accumulates
gradients (normalised per mini-batch, so the result equals one big pass), clips the global
gradient norm and steps. With a backend attached, every optimiser step runs inside
``backend.paused()`` and bumps its weight version, so samples say which weights made them. With a
LoRA adapter (``adapter``, see :mod:`.lora`) only the adapter's parameters are in the optimiser and
in checkpoints; the model object, adapter layers inside, is still the one the backend samples from.

Logprobs are computed only where they are needed: the decoder's hidden states at positions that
predict a loss-masked token go through the LM head, not the whole ``[B, T, vocab]`` block.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
import random
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import numpy as np
import torch

from toolgym.core.errors import ConfigError
from toolgym.core.llm.local.vlm import image_row

from .batch import MicroBatch, Row, collate, micro_batches
from .config import OptimConfig, PPOConfig
from .loss import Aggregation, kl_penalty, ppo_clip_loss, sft_loss, tis_weights

CHECKPOINT_STATE = "trainer_state.pt"


def token_logprobs(
    model: Any, mb: MicroBatch, *, temperature: float = 1.0, with_entropy: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Logprobs of ``mb.targets`` under ``model`` at ``temperature`` (flat, one per target token),
    and optionally the entropy of each of those next-token distributions."""
    # Two shortcuts that change no target's logprob (attention is causal): positions after the last
    # one that predicts a target are not computed (in SFT and RL rows the prompt's tail, e.g. the next
    # observation), and the padding mask is left out, since ``collate`` pads on the right only, where
    # no real position can see it; without a mask, attention runs as one fused causal kernel.
    cols = torch.nonzero(mb.target_mask.any(0))
    end = int(cols.max()) + 1 if len(cols) else 1
    if mb.vision is not None:  # every image token must stay: the pixels fill all of them
        end = mb.input_ids.shape[1]
    out = model.base_model(input_ids=mb.input_ids[:, :end], use_cache=False, **(mb.vision or {}))
    hidden = out.last_hidden_state[:, : mb.target_mask.shape[1]][mb.target_mask[:, :end]]
    logits = model.get_output_embeddings()(hidden).float()
    if temperature > 0 and temperature != 1.0:
        logits = logits / temperature
    logp_all = torch.log_softmax(logits, dim=-1)
    logp = logp_all.gather(-1, mb.targets.unsqueeze(-1)).squeeze(-1)
    entropy = None
    if with_entropy:
        with torch.no_grad():
            entropy = -(logp_all.exp() * logp_all).sum(-1)
    return logp, entropy


def context_logprobs(model: Any, mb: MicroBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """One forward pass: the logprobs of ``mb.targets`` (as :func:`token_logprobs`) and of every other
    real token after the first (the prompt, tool and environment text: the context)."""
    out = model.base_model(
        input_ids=mb.input_ids, use_cache=False, **(mb.vision or {})
    )  # right padding: see token_logprobs
    logits = model.get_output_embeddings()(out.last_hidden_state[:, :-1]).float()
    logp_all = torch.log_softmax(logits, dim=-1).gather(-1, mb.input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    context = mb.attention_mask[:, 1:].bool() & ~mb.target_mask
    return logp_all[mb.target_mask], logp_all[context]


class PolicyTrainer:
    """PPO-clip and SFT updates of one causal LM; see the module docstring for the contract."""

    def __init__(
        self,
        model: Any,
        *,
        optim: OptimConfig,
        ppo: PPOConfig | None = None,
        pad_token_id: int = 0,
        backend: Any = None,
        device: str | torch.device = "cpu",
        adapter: Any = None,
        image_processor: Any = None,
    ) -> None:
        self.model = model
        self.image_processor = image_processor
        """A VLM's image processor, saved with every checkpoint so that it reloads as a VLM."""
        self._vision = (
            functools.partial(image_row, model, image_processor) if image_processor is not None else None
        )
        """A VLM's pixel inputs and positions for rows with images (``image_processor``: the one the
        sampler used, e.g. ``backend.image_processor``)."""
        self.adapter = adapter
        """The ``PeftModel`` around ``model`` when only a LoRA adapter trains (:func:`.lora.attach_lora`)."""
        if adapter is not None and adapter.base_model.model is not model:
            raise ConfigError(
                "the LoRA adapter must wrap the trainer's model object (attach_lora(model, ...))"
            )
        self.optim_config = optim
        self.ppo = ppo or PPOConfig()
        self.pad_token_id = pad_token_id
        self.backend = backend
        self.device = torch.device(device)
        self.optimizer = torch.optim.AdamW(
            [p for p in model.parameters() if p.requires_grad],
            lr=optim.lr,
            betas=(optim.beta1, optim.beta2),
            weight_decay=optim.weight_decay,
            eps=optim.eps,
        )
        self.step = 0
        """Optimiser steps taken (the weight version a backend is stamped with)."""
        self.reference: Any = None
        """With ``ppo.kl_coef > 0``: a frozen copy of the weights as they were when the first PPO
        update started (so after any SFT warm start), taken by :meth:`ppo_update`."""

    def _ensure_reference(self) -> None:
        if self.ppo.kl_coef > 0 and self.reference is None:
            self.reference = copy.deepcopy(self.model).eval()
            for p in self.reference.parameters():
                p.requires_grad_(False)

    # -- updates ---------------------------------------------------------------------------------

    def ppo_update(self, rows: Sequence[Row], *, seed: int = 0) -> dict[str, float]:
        """``ppo.epochs`` passes over ``rows`` in shuffled mini-batches; returns averaged metrics.

        With ``ppo.tis_cap`` set, the trainer first recomputes the old logprobs of every row with
        the current weights (no gradient, eval mode), trains against those, weighs each token by
        ``min(exp(train_old − rollout), tis_cap)`` and adds ``tis_ratio_mean``, ``tis_ratio_max``,
        ``tis_weight_mean`` and ``tis_clip_frac`` (tokens whose ratio exceeded the cap) to the metrics."""
        if not rows:
            raise ConfigError(
                "no trainable rows in this batch: every trajectory failed or had no sampled tokens"
            )
        cfg = self.ppo
        self._ensure_reference()
        tis: dict[str, float] = {}
        if cfg.tis_cap is not None:
            rows, tis = self.with_trainer_logprobs(rows, cfg.tis_cap)
        rng = random.Random(seed)
        sums: dict[str, float] = {}
        steps = 0
        for _ in range(cfg.epochs):
            order = list(range(len(rows)))
            rng.shuffle(order)
            for start in range(0, len(order), cfg.mini_batch_size):
                part = order[start : start + cfg.mini_batch_size]
                for k, v in self._ppo_step(rows, part).items():
                    sums[k] = sums.get(k, 0.0) + v
                steps += 1
        return {**{k: v / steps for k, v in sums.items()}, **tis}

    @torch.no_grad()
    def with_trainer_logprobs(self, rows: Sequence[Row], cap: float) -> tuple[list[Row], dict[str, float]]:
        """Copies of ``rows`` whose ``old_logprobs`` are the trainer's own (current weights, at
        ``ppo.temperature``) and whose ``rollout_logprobs`` are the sampler's, and the TIS weight
        statistics over all their tokens (see :func:`.loss.tis_weights`)."""
        self.model.eval()
        out = [dataclasses.replace(r, rollout_logprobs=r.old_logprobs) for r in rows]
        sums = {"tis_ratio": 0.0, "tis_weight": 0.0, "tis_clipped": 0.0, "tis_tokens": 0.0}
        ratio_max = 0.0
        for part in micro_batches(out, list(range(len(out))), self.ppo.micro_batch_size):
            mb = collate(out, part, pad_id=self.pad_token_id, device=self.device, vision=self._vision)
            logp, _ = token_logprobs(self.model, mb, temperature=self.ppo.temperature)
            _, stats = tis_weights(logp, mb.old_logprobs, cap)
            for k in sums:
                sums[k] += stats[k]
            ratio_max = max(ratio_max, stats["tis_ratio_max"])
            flat = logp.float().cpu().numpy()
            start = 0
            for b, i in enumerate(part):  # targets are flattened row by row, in ``part`` order
                n = int(mb.target_mask[b].sum())
                recomputed = np.zeros_like(out[i].old_logprobs)
                where = np.flatnonzero(out[i].loss_mask[1:].astype(bool)) + 1
                recomputed[where] = flat[start : start + n]
                out[i].old_logprobs = recomputed
                start += n
        total = max(sums["tis_tokens"], 1.0)
        return out, {
            "tis_ratio_mean": sums["tis_ratio"] / total,
            "tis_ratio_max": ratio_max,
            "tis_weight_mean": sums["tis_weight"] / total,
            "tis_clip_frac": sums["tis_clipped"] / total,
        }

    def _ppo_step(self, rows: Sequence[Row], indices: list[int]) -> dict[str, float]:
        cfg = self.ppo
        agg = self._aggregation(rows, indices, cfg.loss_agg)
        totals = {"clipped": 0.0, "ratio": 0.0, "approx_kl": 0.0, "tokens": 0.0, "kl": 0.0, "entropy": 0.0}
        loss_total = 0.0
        self.model.train()
        for part in micro_batches(rows, indices, cfg.micro_batch_size):
            mb = collate(rows, part, pad_id=self.pad_token_id, device=self.device, vision=self._vision)
            logp, entropy = token_logprobs(self.model, mb, temperature=cfg.temperature, with_entropy=True)
            weights = None
            if cfg.tis_cap is not None and mb.rollout_logprobs is not None:
                weights, _ = tis_weights(mb.old_logprobs, mb.rollout_logprobs, cfg.tis_cap)
            loss, stats = ppo_clip_loss(
                logp,
                mb.old_logprobs,
                mb.advantages,
                mb.rows,
                agg,
                clip_low=cfg.clip_low,
                clip_high=cfg.clip_high,
                tis_weights=weights,
            )
            if self.reference is not None:
                with torch.no_grad():
                    ref_logp, _ = token_logprobs(self.reference, mb, temperature=cfg.temperature)
                kl = kl_penalty(logp, ref_logp, cfg.kl_estimator)
                loss = loss + cfg.kl_coef * agg.reduce(kl, mb.rows)
                totals["kl"] += float(kl.detach().sum().item())
            loss.backward()
            loss_total += float(loss.detach().item())
            for k, v in stats.items():
                totals[k] += v
            assert entropy is not None
            totals["entropy"] += float(entropy.sum().item())
        grad_norm = self._optimizer_step()
        n = max(totals["tokens"], 1.0)
        return {
            "loss": loss_total,
            "grad_norm": grad_norm,
            "clip_frac": totals["clipped"] / n,
            "ratio_mean": totals["ratio"] / n,
            "approx_kl": totals["approx_kl"] / n,
            "kl_ref": totals["kl"] / n,
            "entropy": totals["entropy"] / n,
            "tokens": totals["tokens"],
        }

    def sft_step(
        self, rows: Sequence[Row], *, loss_agg: str = "token-mean", context_weight: float = 0.0
    ) -> dict[str, float]:
        """One optimiser step of cross-entropy on the loss-masked tokens of ``rows``, plus, when
        ``context_weight`` > 0, that weight times the token-mean cross-entropy of the rest of each
        row (the context: prompt and observations, i.e. language modelling on the environment's text).
        ``loss`` reports the loss-masked part only, ``context_loss`` the other."""
        if not rows:
            raise ConfigError("an SFT step needs at least one row")
        if context_weight < 0:
            raise ConfigError(f"context_weight must be 0 or more, got {context_weight}")
        indices = list(range(len(rows)))
        agg = self._aggregation(rows, indices, loss_agg)
        context_total = max(sum(len(r.input_ids) - 1 - r.num_tokens for r in rows), 1)
        loss_total, context_loss, tokens = 0.0, 0.0, 0
        self.model.train()
        for part in micro_batches(rows, indices, self.ppo.micro_batch_size):
            mb = collate(rows, part, pad_id=self.pad_token_id, device=self.device, vision=self._vision)
            if context_weight > 0:
                logp, ctx = context_logprobs(self.model, mb)
                loss = sft_loss(logp, mb.rows, agg)
                ctx_loss = -ctx.sum() / context_total
                (loss + context_weight * ctx_loss).backward()
                context_loss += float(ctx_loss.detach().item())
            else:
                logp, _ = token_logprobs(self.model, mb)
                loss = sft_loss(logp, mb.rows, agg)
                loss.backward()
            loss_total += float(loss.detach().item())
            tokens += int(logp.numel())
        grad_norm = self._optimizer_step()
        return {
            "loss": loss_total,
            "context_loss": context_loss,
            "grad_norm": grad_norm,
            "tokens": float(tokens),
        }

    @torch.no_grad()
    def mean_nll(self, rows: Sequence[Row]) -> float:
        """Token-mean negative log-likelihood of ``rows`` under the current weights (no update)."""
        self.model.eval()
        total, count = 0.0, 0
        for part in micro_batches(rows, list(range(len(rows))), self.ppo.micro_batch_size):
            logp, _ = token_logprobs(
                self.model,
                collate(rows, part, pad_id=self.pad_token_id, device=self.device, vision=self._vision),
            )
            total -= float(logp.sum().item())
            count += int(logp.numel())
        return total / max(count, 1)

    def _aggregation(self, rows: Sequence[Row], indices: list[int], mode: str) -> Aggregation:
        counts = torch.zeros(len(rows))
        for i in indices:
            counts[i] = rows[i].num_tokens
        return Aggregation.of(
            mode, counts, [r.trajectory_id for r in rows] if mode == "episode-mean-token-mean" else None
        )

    def _optimizer_step(self) -> float:
        params = [p for p in self.model.parameters() if p.grad is not None]
        norm = (
            torch.nn.utils.clip_grad_norm_(params, self.optim_config.max_grad_norm)
            if params
            else torch.tensor(0.0)
        )
        with self._paused():
            self.optimizer.step()
            self.step += 1
            if self.backend is not None:
                self.backend.set_weight_version(self.step)
        self.optimizer.zero_grad(set_to_none=True)
        self.model.eval()
        return float(norm)

    @contextmanager
    def _paused(self) -> Iterator[None]:
        with self.backend.paused() if self.backend is not None else nullcontext():
            yield

    def set_lr(self, lr: float) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    # -- checkpoints -----------------------------------------------------------------------------

    def save(
        self, directory: str | Path, *, extra: dict[str, Any] | None = None, tokenizer: Any = None
    ) -> Path:
        """Write a Hugging Face model directory (with a VLM's image processor) plus the optimiser,
        step, RNG states and ``extra`` (JSON-able loop state), so :meth:`load` resumes exactly where
        this left off."""
        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        if self.adapter is not None:
            from .lora import save_adapter

            save_adapter(self.adapter, out)
        else:
            self.model.save_pretrained(str(out), safe_serialization=True)
        if tokenizer is not None:
            tokenizer.save_pretrained(str(out))
        if self.image_processor is not None:  # preprocessor_config.json: the directory loads as a VLM
            self.image_processor.save_pretrained(str(out))
        state = {
            "step": self.step,
            "optimizer": self.optimizer.state_dict(),
            "reference": self._reference_state(),
            "torch_rng": torch.get_rng_state(),
            "numpy_rng": np.random.get_state(),
            "python_rng": random.getstate(),
        }
        torch.save(state, out / CHECKPOINT_STATE)
        (out / "trainer_extra.json").write_text(json.dumps(extra or {}, indent=2))
        return out

    def _reference_state(self) -> dict[str, torch.Tensor] | None:
        """The KL reference's weights; with a LoRA adapter only its adapter tensors (the base is frozen, shared by both)."""
        if self.reference is None:
            return None
        state = self.reference.state_dict()
        if self.adapter is None:
            return state
        trainable = {n for n, p in self.model.named_parameters() if p.requires_grad}
        return {k: v for k, v in state.items() if k in trainable}

    def load(self, directory: str | Path) -> dict[str, Any]:
        """Restore weights, optimiser, step and RNG states saved by :meth:`save`; returns ``extra``."""
        src = Path(directory)
        if not (src / CHECKPOINT_STATE).is_file():
            raise ConfigError(
                f"{src} is not a local-trainer checkpoint (no {CHECKPOINT_STATE}); give a directory written by it"
            )
        from .lora import is_adapter_checkpoint, load_adapter

        with self._paused(), torch.no_grad():
            if self.adapter is not None:
                load_adapter(self.adapter, src)
            elif is_adapter_checkpoint(src):
                raise ConfigError(
                    f"checkpoint {src} holds a LoRA adapter only; resume it with the lora_rank it was trained with"
                )
            else:
                self._load_full_weights(src)
        state = torch.load(src / CHECKPOINT_STATE, weights_only=False)
        saved_tensors = sum(len(g["params"]) for g in state["optimizer"]["param_groups"])
        trained = sum(len(g["params"]) for g in self.optimizer.param_groups)
        if saved_tensors != trained:  # e.g. a run with a frozen vision tower resumed without freezing it
            raise ConfigError(
                f"checkpoint {src} was trained with {saved_tensors} weight tensors updated but this trainer updates "
                f"{trained}; resume it with the settings it was trained with (freeze_vision_tower, lora_rank)"
            )
        self.optimizer.load_state_dict(state["optimizer"])
        self.step = int(state["step"])
        if state.get("reference") is not None and self.ppo.kl_coef > 0:
            self._ensure_reference()
            self.reference.load_state_dict(state["reference"], strict=self.adapter is None)
        torch.set_rng_state(state["torch_rng"])
        np.random.set_state(state["numpy_rng"])
        random.setstate(state["python_rng"])
        if self.backend is not None:
            self.backend.set_weight_version(self.step)
        extra_path = src / "trainer_extra.json"
        return json.loads(extra_path.read_text()) if extra_path.exists() else {}

    def _load_full_weights(self, src: Path) -> None:
        from safetensors.torch import load_file

        saved = _model_type(src)
        have = getattr(getattr(self.model, "config", None), "model_type", None)
        if saved and have and saved != have:  # e.g. a VLM's checkpoint given to a text model
            raise ConfigError(
                f"checkpoint {src} holds a {saved} model but this trainer's model is {have}; "
                "resume it with the model.path it was trained from"
            )
        weights: dict[str, torch.Tensor] = {}
        for shard in sorted(src.glob("*.safetensors")):
            weights.update(load_file(str(shard)))
        missing, _ = self.model.load_state_dict(weights, strict=False)
        tied = {"lm_head.weight"}  # tied embeddings are saved once
        if set(missing) - tied and not self._load_renamed_weights(src):
            raise ConfigError(
                f"checkpoint {src} lacks weights {sorted(set(missing) - tied)[:3]}; it was written for another model"
            )

    def _load_renamed_weights(self, src: Path) -> bool:
        """Load a checkpoint whose file names the weights otherwise than the model object does
        (transformers saves a VLM's ``model.language_model.*`` as ``model.*`` and ``model.visual.*``
        as ``visual.*``), through the model class's own loading, which maps the names back; False
        when it is not this model's checkpoint (another architecture, or weights missing)."""
        config = getattr(self.model, "config", None)
        if config is None or _model_type(src) != getattr(config, "model_type", None):
            return False
        try:
            loaded, info = type(self.model).from_pretrained(str(src), output_loading_info=True)
        except (OSError, ValueError, RuntimeError):
            return False
        if set(info.get("missing_keys") or ()) - {"lm_head.weight"} or info.get("mismatched_keys"):
            return False
        self.model.load_state_dict(loaded.state_dict())
        return True


def _model_type(directory: Path) -> str | None:
    """``model_type`` of the ``config.json`` in ``directory`` (None without one)."""
    try:
        return json.loads((directory / "config.json").read_text()).get("model_type")
    except (OSError, ValueError, AttributeError):
        return None
