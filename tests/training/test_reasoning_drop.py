"""Templates that drop earlier reasoning (Qwen3, gpt-oss, GLM-4.5): what the trainer receives, what it costs, and that
verl rows and GiGPO work on it.

Qwen3's template keeps the reasoning of the assistant turns after the last user query and drops
it from the turns before. An agent whose environment answers with user turns (every observation a
new query) therefore sees history rewritten at every turn: each model call is conditioned on a
fresh render, so each lands in its own token sequence (a new ``sequence``), with the prompt that
call really saw. Tool results (``tool`` messages) do not start a new query, so a tool-calling
episode keeps one sequence, unless the model's think block is empty (non-thinking mode), which
the template drops from history as well. gpt-oss's harmony template drops the analysis channel
the same way (and renders a final answer with <|end|> in history where <|return|> was sampled);
GLM-4.5's empties the think block of those turns.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tests.core.family_helpers import assistant_text, run_family
from toolgym.core.llm.local.tiny import load_tiny_tokenizer
from toolgym.core.tokens.chat import ChatFormat
from toolgym.core.trajectory import Status, Trajectory
from toolgym.core.types import ToolCall
from toolgym.training.advantages import compute_token_advantages
from toolgym.training.verl.advantage import row_advantages
from toolgym.training.verl.rows import Row, trajectory_rows
from toolgym.trajectories.reread import call_costs, trained_tokens
from toolgym.trajectories.verify import check_trajectory

DROPPING = ("qwen3", "gpt-oss", "glm-4.5")
REASONING = "weigh it, step by step"
"""What every thinker's reasoning says (and no prompt may show once it has been dropped)."""
ASSISTANT = {"qwen3": "<|im_start|>assistant\n", "gpt-oss": "<|start|>assistant", "glm-4.5": "<|assistant|>"}
ENDS_WITH_ROLE = {"glm-4.5"}
"""The model ends its turn by writing the next role token (sampling stops there), not an EOS."""
_SEEN: set[str] = set()


def _thinker(family: str) -> Any:
    """Reasons, then answers yes the first time it sees a prompt and no after (so the samples of a
    group differ in return), in the family's format."""

    def respond(prompt: str, i: int) -> str:
        fresh = prompt not in _SEEN
        _SEEN.add(prompt)
        answer = "yes" if fresh else "no"
        if family == "gpt-oss":
            return f"<|channel|>analysis<|message|>turn {i}: {REASONING}<|end|><|start|>assistant<|channel|>final<|message|>{answer}"
        if family == "glm-4.5":
            return f"\n<think>turn {i}: {REASONING}</think>\n{answer}<|user|>"
        return f"<think>\nturn {i}: {REASONING}\n</think>\n\n{answer}"

    return respond


def _answer(text: str) -> str:
    return text.split("</think>")[-1].split("<|message|>")[-1].replace("<|user|>", "").strip()


@pytest.fixture(scope="module")
def qwen3() -> ChatFormat:
    return ChatFormat(load_tiny_tokenizer("qwen3"))


@pytest.fixture(scope="module", params=DROPPING)
def family(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def chat(family: str) -> ChatFormat:
    return ChatFormat(load_tiny_tokenizer(family))  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def dropped(family: str, chat: ChatFormat) -> list[Trajectory]:
    return run_family(
        chat.tokenizer,
        "family-chatter",
        _thinker(family),
        group_size=3,
        tasks=2,
        add_eos=family not in ENDS_WITH_ROLE,
    )


def test_each_call_gets_its_own_sequence_with_the_prefix_it_saw(
    family: str, dropped: list[Trajectory], chat: ChatFormat
) -> None:
    assert len(dropped) == 6
    for t in dropped:
        assert t.status is Status.OK and check_trajectory(t, chat=chat) == []
        assert len(t.steps) == 3 and t.num_sequences == 3, t.metadata.get("template_rewrites")
        assert len(t.metadata["template_rewrites"]) == 2
        for k, step in enumerate(t.steps):
            assert step.llm is not None and step.llm.sequence == k
            prompt_text = chat.decode(t.sequence_ids(k)[: step.llm.prompt_len])
            # the prompt is the template's render of the conversation so far: earlier answers kept,
            # earlier reasoning gone
            assert REASONING not in prompt_text
            assert prompt_text.count(ASSISTANT[family]) == k + 1
            for earlier in t.steps[:k]:
                assert _answer(earlier.action) in prompt_text
            sampled = t.segments[step.llm.segment]
            assert (
                sampled.role == "assistant" and REASONING in sampled.text
            )  # the reasoning is trained where it was sampled


def test_verl_rows_one_per_sequence_and_per_step_with_correct_masks(dropped: list[Trajectory]) -> None:
    for t in dropped:
        by_sequence = trajectory_rows(t, "trajectory")
        by_step = trajectory_rows(t, "step")
        assert len(by_sequence) == len(by_step) == 3
        for row_a, row_b, step in zip(by_sequence, by_step, t.steps, strict=True):
            assert step.llm is not None
            sampled = t.segments[step.llm.segment]
            for row in (row_a, row_b):
                assert row.prompt_ids == t.sequence_ids(step.llm.sequence)[: step.llm.prompt_len]
                assert (
                    row.response_ids == sampled.token_ids
                )  # nothing of the environment after the call in its sequence
                assert row.response_mask == [1] * len(sampled.token_ids)
                assert row.response_logprobs == sampled.logprobs
                assert [(s.index, s.start, s.end) for s in row.meta.steps] == [
                    (step.index, 0, len(sampled.token_ids))
                ]
                assert row.meta.sequence == step.llm.sequence and row.meta.offset == step.llm.prompt_len


def _padded(rows: list[Row]) -> np.ndarray:
    width = max(len(r.response_mask) for r in rows)
    return np.array([r.response_mask + [0] * (width - len(r.response_mask)) for r in rows], dtype=np.float32)


@pytest.mark.parametrize("layout", ["step", "trajectory"])
def test_gigpo_on_rows_equals_gigpo_on_trajectories(dropped: list[Trajectory], layout: str) -> None:
    rewards = {t.reward for t in dropped}
    assert len(rewards) > 1, "the group needs different returns for a non-zero advantage"
    per_traj = compute_token_advantages(dropped, "gigpo")
    rows = [(i, r) for i, t in enumerate(dropped) for r in trajectory_rows(t, layout)]  # type: ignore[arg-type]
    mask = _padded([r for _, r in rows])
    adv = row_advantages("gigpo", [r.meta for _, r in rows], [dropped[i].group_id for i, _ in rows], mask)
    assert np.all(adv[mask == 0] == 0) and np.any(adv != 0)
    for k, (i, row) in enumerate(rows):
        start = row.meta.offset
        expected = per_traj[i][row.meta.sequence][start : start + len(row.response_ids)]
        np.testing.assert_allclose(adv[k, : len(row.response_ids)], expected, rtol=1e-6, atol=1e-6)
        # every sampled token of every sequence gets its step's advantage, nothing else does
        seq_mask = np.array(dropped[i].sequence_mask(row.meta.sequence))
        assert np.all(per_traj[i][row.meta.sequence][seq_mask == 0] == 0)


def test_the_cost_tokens_reread_per_turn(qwen3: ChatFormat) -> None:
    """Qwen3 against the Qwen2.5 template (keeps history as sampled): same conversation, append-only."""
    dropped = run_family(qwen3.tokenizer, "family-chatter", _thinker("qwen3"), group_size=3, tasks=2)
    baseline = run_family(
        load_tiny_tokenizer("qwen"), "family-chatter", _thinker("qwen3"), group_size=3, tasks=2
    )
    for t in baseline:
        assert t.num_sequences == 1 and check_trajectory(t) == []
    drop_costs = [call_costs(t) for t in dropped]
    base_costs = [call_costs(t) for t in baseline]
    for drop, base in zip(drop_costs, base_costs, strict=True):
        assert drop[0].prefill_tokens == drop[0].prompt_tokens  # the first call reads its whole prompt
        for later_drop, later_base in zip(drop[1:], base[1:], strict=True):
            # append-only: only the new user turn is read; dropping: everything after the first
            # dropped think block, i.e. at least the earlier answers and the new turn
            assert later_base.prefill_tokens < later_drop.prefill_tokens
            assert (
                later_drop.prefill_tokens < later_drop.prompt_tokens
            )  # the system prompt and question are reused
    assert sum(map(trained_tokens, dropped)) > sum(map(trained_tokens, baseline))


def test_tool_results_keep_one_sequence_unless_the_think_block_is_empty(qwen3: ChatFormat) -> None:
    def caller(reasoning: str) -> Any:
        call = assistant_text(qwen3, [ToolCall("lookup", {"key": "fox", "count": 2}, "abcdefghi")], reasoning)

        def respond(prompt: str, _i: int) -> str:
            return call if "RESULT fox x2" not in prompt else reasoning + "done"

        return respond

    thinking = run_family(
        qwen3.tokenizer, "family-lookup", caller("<think>\nlook it up\n</think>\n\n"), group_size=1
    )
    assert [t.num_sequences for t in thinking] == [1]
    # non-thinking mode: the model writes an empty think block, which history leaves out
    empty = run_family(qwen3.tokenizer, "family-lookup", caller("<think>\n\n</think>\n\n"), group_size=1)
    assert [t.num_sequences for t in empty] == [2] and check_trajectory(empty[0], chat=qwen3) == []
    assert (
        trajectory_rows(empty[0], "step")[1].prompt_ids
        == empty[0].sequence_ids(1)[: empty[0].steps[1].llm.prompt_len]
    )  # type: ignore[union-attr]


def test_gpt_oss_keeps_its_analysis_within_a_tool_chain() -> None:
    chat = ChatFormat(load_tiny_tokenizer("gpt-oss"))
    call = "<|channel|>analysis<|message|>look it up<|end|><|start|>assistant" + assistant_text(
        chat, [ToolCall("lookup", {"key": "fox", "count": 2}, "abcdefghi")]
    )

    def respond(
        prompt: str, _i: int
    ) -> str:  # sampling stops at <|call|>: no end-of-sequence token after a call
        return call if "RESULT fox x2" not in prompt else "<|channel|>final<|message|>done"

    out = run_family(chat.tokenizer, "family-lookup", respond, parser="harmony", group_size=1, add_eos=False)
    assert [t.num_sequences for t in out] == [1] and out[0].reward == 1.0
    assert check_trajectory(out[0], chat=chat) == [] and out[0].steps[0].tool_calls[0].arguments == {
        "key": "fox",
        "count": 2,
    }


def test_local_trainer_rows_one_per_sequence(dropped: list[Trajectory]) -> None:
    from toolgym.training.local.batch import trajectory_rows as local_rows

    advantages = compute_token_advantages(dropped, "gigpo")
    for t, adv in zip(dropped, advantages, strict=True):
        rows = local_rows(t, adv)
        assert len(rows) == t.num_sequences == 3
        for s, row in enumerate(rows):
            assert row.input_ids.tolist() == t.sequence_ids(s)
            assert row.loss_mask.tolist() == t.sequence_mask(s)
            assert np.array_equal(row.advantages, adv[s] * row.loss_mask)
