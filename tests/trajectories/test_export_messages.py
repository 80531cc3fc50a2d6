"""The conversational ``messages`` columns: the HF export's (TRL format, the stored conversation)
and the SFT export's Parquet (what verl's ``MultiTurnSFTDataset`` and ``datasets`` read)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from tests.required import need_module
from tests.trajectories.test_exports import adder_dataset, cli  # noqa: F401  (fixtures)
from tests.trajectories.test_images import shot_dataset  # noqa: F401  (fixture)
from toolgym.cli import app
from toolgym.core.errors import ConfigError
from toolgym.core.tokens.images import content_text, image_refs
from toolgym.core.trajectory import Trajectory
from toolgym.trajectories import parquet
from toolgym.trajectories.export_hf import write_hf_dataset
from toolgym.trajectories.export_sft import write_sft
from toolgym.trajectories.store import iter_trajectories


def _present(message: dict[str, Any]) -> dict[str, Any]:
    """A message read back from Arrow without the keys it lacked (null there)."""
    return {k: v for k, v in message.items() if v is not None}


def test_hf_messages_column_is_the_stored_conversation(adder_dataset: Path, tmp_path: Path) -> None:  # noqa: F811
    datasets = need_module("datasets")
    out = tmp_path / "hf"
    trajs = {t.trajectory_id: t for t in iter_trajectories(adder_dataset)}
    write_hf_dataset(iter_trajectories(adder_dataset), out)
    table = pq.read_table(next((out / "data").glob("train-*.parquet")))
    for f in parquet.SCHEMA:  # every existing column kept, the new one last
        assert table.schema.field(f.name).type == f.type
    assert table.column_names == [*parquet.SCHEMA.names, "messages"]
    ds = datasets.load_dataset(str(out), split="train", cache_dir=str(tmp_path / "cache"))
    assert len(ds) == len(trajs) == 12
    for row in ds:
        original = trajs[row["trajectory_id"]]
        messages = row["messages"]
        assert (
            [m["role"] for m in messages]
            == [m["role"] for m in original.messages]
            == [
                "system",
                "user",
                "assistant",
                "tool",
                "assistant",
            ]
        )
        assert all(isinstance(m["content"], str) for m in messages)
        tool = messages[3]
        assert tool["tool_call_id"] == original.messages[3]["tool_call_id"] and tool["tool_call_id"]
        assert tool["name"] == "add" and messages[0]["tool_call_id"] is None
        # assistant text is what the model sampled: the stored ids, decoded (stop token aside)
        sampled = [s.text for s in original.segments if s.role == "assistant"]
        assert [m["content"] for m in messages if m["role"] == "assistant"] == [
            t.removesuffix("<|im_end|>") for t in sampled
        ]
        assert "<tool_call>" in messages[2]["content"]
        assert [_present(m) for m in messages] == original.messages


def test_hf_messages_column_carries_structured_tool_calls(tmp_path: Path) -> None:
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
            {"role": "assistant", "content": "3"},
        ],
    )
    write_hf_dataset([traj], tmp_path / "hf")
    row = pq.read_table(next((tmp_path / "hf" / "data").glob("train-*.parquet"))).to_pylist()[0]
    call, tool = row["messages"][1], row["messages"][2]
    assert call["tool_calls"] == [
        {"id": "abc", "type": "function", "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'}}
    ]
    assert (tool["role"], tool["tool_call_id"], tool["name"], tool["content"]) == ("tool", "abc", "add", "3")
    assert row["messages"][0]["tool_calls"] is None and row["messages"][3]["content"] == "3"


def test_hf_messages_keep_image_parts_structured(shot_dataset: Path, tmp_path: Path) -> None:  # noqa: F811
    datasets = need_module("datasets")
    out = tmp_path / "hf"
    write_hf_dataset(iter_trajectories(shot_dataset), out, images_root=shot_dataset)
    ds = datasets.load_dataset(str(out), split="train", cache_dir=str(tmp_path / "cache"))
    for row in ds:
        stored = json.loads(row["messages_json"])
        assert [m["role"] for m in row["messages"]] == [m["role"] for m in stored]
        parts = [p for m in row["messages"] for p in m["content"]]
        assert all(isinstance(p, dict) and p["type"] in ("text", "image") for p in parts)
        refs = [p["image"] for p in parts if p["type"] == "image"]
        assert refs == image_refs(stored) and len(refs) == len(row["images"]) == 2
        for message, original in zip(row["messages"], stored, strict=True):  # same text, same order
            assert content_text(message["content"]) == content_text(original["content"])
        texts = [p["text"] for p in parts if p["type"] == "text"]
        assert not any("{'type'" in t or '{"type"' in t for t in texts)  # no repr of the parts


def test_sft_parquet_reads_back_with_pyarrow_datasets_and_verl(
    adder_dataset: Path,  # noqa: F811
    cli: CliRunner,  # noqa: F811
    tmp_path: Path,
) -> None:
    jsonl, out = tmp_path / "sft.jsonl", tmp_path / "sft.parquet"
    for path in (jsonl, out):
        res = cli.invoke(app, ["export", "sft", str(adder_dataset), "-o", str(path), "--only-success"])
        assert res.exit_code == 0, res.output
    records = [json.loads(line) for line in jsonl.read_text().splitlines()]
    table = pq.read_table(out)
    assert table.column_names[:2] == ["messages", "tools"] and table.num_rows == len(records) == 12
    assert table.schema.field("messages").type.value_type.field("content").type == pa.string()
    rows = table.to_pylist()
    for row, record in zip(rows, records, strict=True):
        assert row["trajectory_id"] == record["trajectory_id"] and row["reward"] == record["reward"]
        assert [_present(m) for m in row["messages"]] == record["messages"]  # the JSONL record, exactly
        assert row["tools"] == record["tools"]
        assert [m["tool_call_id"] for m in row["messages"] if m["role"] == "tool"] == [
            record["messages"][2]["tool_calls"][0]["id"]
        ]

    datasets = need_module("datasets")
    ds = datasets.load_dataset("parquet", data_files=str(out), split="train", cache_dir=str(tmp_path / "c"))
    assert len(ds) == 12 and [_present(m) for m in ds[0]["messages"]] == records[0]["messages"]

    # what verl's MultiTurnSFTDataset does with the file: pandas (pyarrow dtypes), then nested lists
    need_module("verl")
    import pandas as pd
    from verl.utils.py_functional import convert_nested_value_to_list_recursive

    frame = pd.read_parquet(out, dtype_backend="pyarrow")
    messages = frame["messages"].apply(convert_nested_value_to_list_recursive).tolist()
    tools = frame["tools"].apply(convert_nested_value_to_list_recursive).tolist()
    for conversation, tool_list in zip(messages, tools, strict=True):
        assert isinstance(conversation, list) and all(isinstance(m, dict) for m in conversation)
        assert all(isinstance(m["role"], str) and isinstance(m["content"], str) for m in conversation)
        assert [t["function"]["name"] for t in tool_list] == ["add"]

    from omegaconf import OmegaConf
    from verl.utils.dataset.multiturn_sft_dataset import MultiTurnSFTDataset

    from toolgym.core.llm.local.tiny import load_tiny_tokenizer

    tokenizer = load_tiny_tokenizer("qwen")
    dataset = MultiTurnSFTDataset(str(out), tokenizer, OmegaConf.create({"max_length": 4096}))
    item = dataset[0]
    ids = item["input_ids"][item["attention_mask"].bool()].tolist()
    trained = item["input_ids"][item["loss_mask"].bool()].tolist()
    text, answer = tokenizer.decode(ids), tokenizer.decode(trained)
    assert "<tool_call>" in text and '"name": "add"' in text and "<tool_response>" in text
    assert '"name": "add"' in answer and "<tool_response>" not in answer  # trains on the model's turns only


def test_sft_parquet_tool_schemas_and_images(shot_dataset: Path, tmp_path: Path) -> None:  # noqa: F811
    def traj(i: int, tools: list[dict[str, Any]]) -> Trajectory:
        return Trajectory(
            trajectory_id=f"t{i}",
            group_id="g",
            task="x",
            messages=[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "ok"}],
            tools=tools,
        )

    def fn(name: str, props: dict[str, Any]) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {"name": name, "parameters": {"type": "object", "properties": props}},
        }

    add = fn("add", {"a": {"type": "integer"}, "b": {"type": "integer"}})
    python = fn("python", {"code": {"type": "string", "description": "the code"}})
    out = tmp_path / "two.parquet"
    assert write_sft([traj(0, [add, python]), traj(1, [python])], out) == (2, 0)
    back = pq.read_table(out).column("tools").to_pylist()
    assert [[_strip(t) for t in tools] for tools in back] == [[add, python], [python]]  # nothing lost

    bad = tmp_path / "bad.parquet"  # a later row group whose schemas the first one's type cannot hold
    with pytest.raises(ConfigError, match="tool schemas"):
        write_sft([traj(0, [add]), traj(1, [python])], bad, row_group_size=1)
    assert not bad.exists() and not list(tmp_path.glob(".bad*"))

    with pytest.raises(ConfigError, match="screenshots"):
        write_sft(iter_trajectories(shot_dataset), tmp_path / "shots.parquet")
    shots = tmp_path / "shots-ok.parquet"
    written, _ = write_sft(iter_trajectories(shot_dataset), shots, images=True)
    rows = pq.read_table(shots).to_pylist()
    assert written == len(rows) == 8
    for row in rows:
        parts = [p for m in row["messages"] for p in m["content"]]
        images = [p["image"] for p in parts if p["type"] == "image"]
        assert [f"images/{ref[7:]}.png" for ref in images] == row["images"] and len(images) == 2
        assert all((shot_dataset / path).is_file() for path in row["images"])


def _strip(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value
