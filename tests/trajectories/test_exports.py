"""Exports: HF `datasets` (read back with load_dataset), SFT chat messages in OpenAI format (valid
tool_calls / tool_call_id pairs), verl's prompt Parquet (read by verl's own dataset class)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from tests.required import need_module
from tests.trajectories.helpers import dataset_registry
from toolgym.cli import app
from toolgym.collect.run import CollectOptions, collect
from toolgym.core.trajectory import Trajectory
from toolgym.trajectories.export_hf import write_hf_dataset
from toolgym.trajectories.export_sft import sft_messages
from toolgym.trajectories.store import iter_trajectories


@pytest.fixture(scope="module")
def adder_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """12 scripted trajectories of the adder task: a Hermes tool call, its result, the answer."""
    out = tmp_path_factory.mktemp("adder")
    opts = CollectOptions(
        env="adder", out=out, model="scripted", episodes=6, group_size=2, sandbox_backend="none"
    )
    asyncio.run(collect(opts, registry=dataset_registry()))
    return out


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.setattr("toolgym.core.registry._default", dataset_registry())
    return CliRunner()


def assert_openai_chat(messages: list[dict[str, Any]]) -> int:
    """Check the OpenAI chat format rules SFT trainers rely on; returns the number of tool calls."""
    pending: list[str] = []
    calls = 0
    for m in messages:
        assert m["role"] in {"system", "user", "assistant", "tool"}
        assert isinstance(m["content"], str)
        if m["role"] == "tool":
            assert m["tool_call_id"] in pending, (
                "a tool message must answer a call of the previous assistant turn"
            )
            pending.remove(m["tool_call_id"])
            continue
        assert not pending, "every tool call must be answered before the next turn"
        if m["role"] == "assistant" and "tool_calls" in m:
            for call in m["tool_calls"]:
                assert call["type"] == "function" and isinstance(call["function"]["name"], str)
                assert isinstance(call["function"]["arguments"], str) and isinstance(
                    json.loads(call["function"]["arguments"]), dict
                )
                pending.append(call["id"])
                calls += 1
            assert len(set(pending)) == len(pending)
    assert not pending
    return calls


def test_sft_export_of_token_level_tool_calls(adder_dataset: Path, cli: CliRunner, tmp_path: Path) -> None:
    out = tmp_path / "sft.jsonl"
    res = cli.invoke(app, ["export", "sft", str(adder_dataset), "-o", str(out), "--only-success"])
    assert res.exit_code == 0, res.output
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) == 12 and all(r["reward"] == 1.0 for r in records)
    for r in records:
        assert assert_openai_chat(r["messages"]) == 1
        assert [t["function"]["name"] for t in r["tools"]] == ["add"]
        system, user, call, result, answer = r["messages"]
        assert (system["role"], user["role"], result["role"], answer["role"]) == (
            "system",
            "user",
            "tool",
            "assistant",
        )
        assert (
            call["content"] == "Let me add." and "<tool_call>" not in call["content"]
        )  # the markup became tool_calls
        args = json.loads(call["tool_calls"][0]["function"]["arguments"])
        assert result["content"] == answer["content"] == str(args["a"] + args["b"])


def test_sft_export_of_chat_api_turns_and_orphan_tool_messages() -> None:
    traj = Trajectory(
        trajectory_id="t",
        group_id="g",
        task="adder",
        token_faithful=False,
        messages=[
            {"role": "user", "content": "What is 1 + 2?"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "type": "function",
                        "id": "abc",
                        "function": {"name": "add", "arguments": {"a": 1, "b": 2}},
                    }
                ],
            },
            {"role": "tool", "name": "add", "content": "3", "tool_call_id": "abc"},
            {"role": "assistant", "content": "<tool_call>{broken json</tool_call>"},
            {"role": "tool", "content": "Error: tool call is not valid JSON"},
            {
                "role": "assistant",
                "content": '<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>',
            },
            {"role": "user", "content": "Out of turns."},
        ],
    )
    messages = sft_messages(traj)
    assert assert_openai_chat(messages) == 1
    assert messages[1]["tool_calls"][0] == {
        "id": "abc",
        "type": "function",
        "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'},
    }
    assert messages[2] == {"role": "tool", "tool_call_id": "abc", "content": "3"}
    assert messages[3] == {
        "role": "assistant",
        "content": "<tool_call>{broken json</tool_call>",
    }  # unparseable: stays text
    assert messages[4]["role"] == "user"  # an error answering no structured call is an environment message
    assert (
        "tool_calls" not in messages[5] and "<tool_call>" in messages[5]["content"]
    )  # unanswered calls stay text


def test_hf_export_reads_back_with_load_dataset(adder_dataset: Path, tmp_path: Path) -> None:
    datasets = need_module("datasets")
    out = tmp_path / "hf"
    trajs = {t.trajectory_id: t for t in iter_trajectories(adder_dataset)}
    result = write_hf_dataset(
        iter_trajectories(adder_dataset),
        out,
        manifest={"model_name": "scripted", "environment": {"name": "adder"}},
        test_fraction=0.5,
        rows_per_file=4,
    )
    assert sum(result.rows.values()) == 12 and set(result.rows) == {"train", "test"}
    assert len(result.files["train"]) == -(-result.rows["train"] // 4)
    card = (out / "README.md").read_text()
    assert (
        card.startswith("---\nconfigs:")
        and "path: data/test-*.parquet" in card
        and "| environment | adder |" in card
    )
    ds = datasets.load_dataset(str(out), cache_dir=str(tmp_path / "cache"))
    assert {s: len(ds[s]) for s in ds} == result.rows
    groups = {s: {row["group_id"] for row in ds[s]} for s in ds}
    assert not groups["train"] & groups["test"]  # a task instance never straddles splits
    row = ds["train"][0]
    original = trajs[row["trajectory_id"]]
    assert [s["token_ids"] for s in row["segments"]] == [s.token_ids for s in original.segments]
    assert [s["loss_mask"] for s in row["segments"]] == [s.loss_mask for s in original.segments]
    assert json.loads(row["messages_json"]) == original.messages and row["reward"] == original.reward


def test_verl_export_has_the_columns_verl_and_the_agent_loop_read(
    adder_dataset: Path, cli: CliRunner, tmp_path: Path
) -> None:
    out = tmp_path / "tasks.parquet"
    res = cli.invoke(app, ["export", "verl", str(adder_dataset), "-o", str(out)])
    assert res.exit_code == 0, res.output
    table = pq.read_table(out)
    assert table.column_names == [
        "data_source",
        "prompt",
        "ability",
        "reward_model",
        "agent_name",
        "extra_info",
    ]
    rows = table.to_pylist()
    assert sorted(r["extra_info"]["task_index"] for r in rows) == list(range(6))  # one row per task instance
    first = rows[0]
    assert first["data_source"] == "toolgym/adder" and first["agent_name"] == "toolgym_agent"
    assert first["reward_model"] == {"style": "env", "ground_truth": ""}
    assert first["prompt"][0]["role"] == "system" and "What is" in first["prompt"][1]["content"]
    info = first["extra_info"]
    assert (
        info["collected_samples"] == 2
        and info["collected_success_rate"] == 1.0
        and json.loads(info["env_kwargs_json"]) == {}
    )
    none_left = cli.invoke(
        app,
        [
            "export",
            "verl",
            str(adder_dataset),
            "-o",
            str(tmp_path / "hard.parquet"),
            "--max-success-rate",
            "0.99",
        ],
    )
    assert none_left.exit_code == 0 and "6 of 6 left out" in " ".join(
        none_left.output.split()
    )  # every instance was always solved

    need_module("verl")  # the same rows through verl's dataset class and toolgym's agent loop
    from omegaconf import OmegaConf
    from verl.utils.dataset.rl_dataset import RLHFDataset

    from toolgym.core.llm.local.tiny import load_tiny_tokenizer
    from toolgym.training.tasks import TaskRange
    from toolgym.training.verl.agent_loop import AGENT_NAME, task_of
    from toolgym.training.verl.dataset import task_rows

    assert first["agent_name"] == AGENT_NAME
    reference = task_rows("adder", TaskRange(num_tasks=1))[0]
    assert set(reference) <= set(first) and set(reference["extra_info"]) <= set(info)
    config = OmegaConf.create(
        {
            "cache_dir": str(tmp_path / "verl"),
            "max_prompt_length": 2048,
            "filter_overlong_prompts_workers": 1,
            "return_raw_chat": True,
        }
    )
    dataset = RLHFDataset(str(out), load_tiny_tokenizer("qwen"), config)
    assert len(dataset) == 6
    item = dataset[0]
    assert task_of(item) == {
        "env": "adder",
        "task_index": item["extra_info"]["task_index"],
        "seed": item["extra_info"]["seed"],
        "env_kwargs": {},
    }


def test_docs_tables_match_the_schemas() -> None:
    """docs/trajectory-format.md and docs/datasets.md list exactly the columns the writers write."""
    import re

    from tests.trajectories.helpers import REPO
    from toolgym.trajectories import export_verl, parquet

    def columns(doc: str, after: str) -> set[str]:
        text = (REPO / "docs" / doc).read_text()
        table = text[text.index(after) :].split("\n\n")[1]
        return {
            name for row in table.splitlines()[2:] for name in re.findall(r"`([a-z_]+)`", row.split("|")[1])
        }

    assert columns("trajectory-format.md", "writes one row per trajectory") == set(parquet.SCHEMA.names)
    steps = next(
        row
        for row in (REPO / "docs" / "trajectory-format.md").read_text().splitlines()
        if row.startswith("| `steps` |")
    )
    assert set(re.findall(r"`([a-z_]+)`", steps.split("|")[2])) - {"ToolCallRecord", "LLMCall"} == {
        f.name for f in parquet.STEP
    }
    assert columns("datasets.md", "agent loop (`toolgym_agent`") == set(export_verl.SCHEMA.names)
    extra = next(
        row
        for row in (REPO / "docs" / "datasets.md").read_text().splitlines()
        if row.startswith("| `extra_info` |")
    )
    assert set(re.findall(r"`([a-z_]+)`", extra.split("|")[3])) == {f.name for f in export_verl.EXTRA_INFO}
