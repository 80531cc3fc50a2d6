"""The sampling kernel: logprob conventions, truncation, per-row seeded draws."""

from __future__ import annotations

import math

import torch

from toolgym.core.llm.local.sampling import RowSettings, StopStrings, sample_step


def gen(seed: int) -> torch.Generator:
    g = torch.Generator()
    g.manual_seed(seed)
    return g


def row(temperature: float = 1.0, top_p: float = 1.0, top_k: int = 0, seed: int = 0) -> RowSettings:
    return RowSettings(temperature, top_p, top_k, gen(seed) if temperature > 0 else None)


def test_greedy_takes_argmax_with_raw_logprob() -> None:
    logits = torch.tensor([[0.1, 2.0, -1.0, 1.5]])
    out = sample_step(logits, [row(temperature=0.0)], n_top=2)
    assert out.token_ids == [1]
    assert math.isclose(out.logprobs[0], torch.log_softmax(logits, -1)[0, 1].item(), rel_tol=1e-6)
    assert out.top_ids == [[1, 3]]
    assert out.top_logprobs is not None and out.top_logprobs[0][0] >= out.top_logprobs[0][1]


def test_logprob_is_of_the_scaled_untruncated_distribution() -> None:
    logits = torch.tensor([[3.0, 1.0, 0.5, -2.0]])
    out = sample_step(logits, [row(temperature=0.5, top_k=1, seed=3)])
    # top_k=1 forces the argmax, but the logprob is not 0: it is under softmax(logits / 0.5).
    assert out.token_ids == [0]
    expected = torch.log_softmax(logits / 0.5, -1)[0, 0].item()
    assert math.isclose(out.logprobs[0], expected, rel_tol=1e-6)
    assert out.logprobs[0] < 0


def test_top_k_and_top_p_restrict_the_candidates() -> None:
    logits = torch.zeros(1, 10)
    logits[0, 7] = 0.01  # the best, then ties broken by index
    seen_k = {sample_step(logits, [row(top_k=3, seed=s)]).token_ids[0] for s in range(200)}
    assert seen_k <= {7, 0, 1} and len(seen_k) > 1
    peaked = torch.tensor([[5.0, 4.0, 0.0, 0.0, 0.0]])  # p ≈ 0.73, 0.27, small rest
    seen_p = {sample_step(peaked, [row(top_p=0.8, seed=s)]).token_ids[0] for s in range(200)}
    assert seen_p == {0, 1}


def test_sampling_follows_the_distribution() -> None:
    logits = torch.log(torch.tensor([[0.7, 0.2, 0.1]]))
    g = gen(11)
    draws = [sample_step(logits, [RowSettings(1.0, 1.0, 0, g)]).token_ids[0] for _ in range(3000)]
    freq = [draws.count(i) / len(draws) for i in range(3)]
    assert abs(freq[0] - 0.7) < 0.04 and abs(freq[1] - 0.2) < 0.04 and abs(freq[2] - 0.1) < 0.03


def test_a_row_samples_the_same_alone_or_in_a_batch() -> None:
    torch.manual_seed(0)
    logits = torch.randn(5, 50)
    settings = [
        dict(temperature=0.8, seed=1),
        dict(temperature=0.0),
        dict(top_k=5, seed=2),
        dict(top_p=0.5, seed=3),
        dict(seed=4),
    ]
    batched = sample_step(logits, [row(**s) for s in settings], n_top=3)  # type: ignore[arg-type]
    for i, s in enumerate(settings):
        alone = sample_step(logits[i : i + 1], [row(**s)], n_top=3)  # type: ignore[arg-type]
        assert alone.token_ids[0] == batched.token_ids[i]
        assert alone.logprobs[0] == batched.logprobs[i]
        assert (
            alone.top_ids is not None
            and batched.top_ids is not None
            and alone.top_ids[0] == batched.top_ids[i]
        )


def test_same_seed_same_token_different_seed_varies() -> None:
    logits = torch.zeros(1, 1000)
    a = [sample_step(logits, [row(seed=5)]).token_ids[0] for _ in range(3)]
    assert len(set(a)) == 1
    b = {sample_step(logits, [row(seed=s)]).token_ids[0] for s in range(20)}
    assert len(b) > 10


def test_stop_strings_match_the_tail(qwen_chat) -> None:  # type: ignore[no-untyped-def]
    ids = qwen_chat.encode("print(1)\n</answer> and more")
    stops = StopStrings(qwen_chat.decode, ["</answer>"])
    first = next(n for n in range(1, len(ids) + 1) if stops.match(ids[:n]))
    assert "</answer>" in qwen_chat.decode(ids[:first]) and "</answer>" not in qwen_chat.decode(
        ids[: first - 1]
    )
    assert StopStrings(qwen_chat.decode, []).match(ids) is None
