"""SFT export: each trajectory as OpenAI-format chat messages, one JSON object per line.

What SFT trainers (TRL's ``SFTTrainer``, LLaMA-Factory, axolotl) take: ``messages`` whose
assistant turns carry ``tool_calls`` (``{"id", "type": "function", "function": {"name",
"arguments"}}`` with ``arguments`` a JSON *string*), each answered by a ``tool`` message with the
matching ``tool_call_id``, plus the ``tools`` schemas shown to the model. The chat template of the
model being trained then renders calls in its own format.

Conversion of the stored conversation (``Trajectory.messages``):

- assistant turns from black-box chat APIs already hold structured ``tool_calls``: arguments are
  serialised to JSON strings, missing ids filled in;
- assistant turns from token-level models hold the sampled text; Hermes/Qwen blocks
  ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` become ``tool_calls`` and are cut
  from ``content`` (the rest, reasoning included, stays). Other action formats (XML tags,
  ``search[...]`` commands) stay text, as the model wrote them;
- ``tool`` messages get the id of the call they answer, in order; a ``tool`` message that answers
  no structured call (an error for an unparseable action, an XML-tag tool result) becomes a
  ``user`` message, and an assistant turn whose calls got no ``tool`` answers keeps them as text,
  so every record is valid for the OpenAI chat format.

Messages with screenshots keep their content as a list of parts (``{"type": "text", ...}``,
``{"type": "image", "image": "sha256:..."}``), the OpenAI content-array shape with the image part
VLM trainers (TRL) take; the record's ``images`` lists the files (``images/<sha256>.png``, relative
to the dataset directory) in the order of the image parts.

Environments that rebuild the prompt every turn (history windows: ``*-verl`` environments) store
only the last window in ``messages``; their records hold that window.

An output path ending in ``.parquet`` gets the same records as Parquet rows (streamed, in row
groups): ``messages`` a list of structs (``role``, ``content``, ``tool_calls``, ``tool_call_id``;
keys a message lacks read back as null), ``tools`` a list of structs, the columns verl's
``MultiTurnSFTDataset`` and ``datasets.load_dataset("parquet", ...)`` read. Arrow needs one type
per column: ``content`` is a string, or a list of parts (``type``, ``text``, ``image``) in every
message when ``images=True`` (a dataset with screenshots); the ``tools`` struct type is the union
of the first row group's schemas (a key one tool lacks reads back as null), and a later schema that
does not fit it is an error rather than silently cut.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any

import pyarrow as pa
import pyarrow.parquet as pq

from toolgym.core.errors import ConfigError
from toolgym.core.tokens.images import IMAGES_DIR, content_text, has_images, image_refs, parse_ref
from toolgym.core.trajectory import Status, Trajectory

_HERMES = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)

TOOL_CALL = pa.struct(
    [
        ("id", pa.string()),
        ("type", pa.string()),
        ("function", pa.struct([("name", pa.string()), ("arguments", pa.string())])),
    ]
)
"""An OpenAI tool call; ``arguments`` a JSON string."""
PART = pa.struct([("type", pa.string()), ("text", pa.string()), ("image", pa.string())])
"""A content part: ``{"type": "text", "text": ...}`` or ``{"type": "image", "image": "sha256:..."}``."""


def message_type(*, parts: bool) -> pa.DataType:
    """The Arrow type of one chat message; ``parts``: content as a list of ``PART`` (multimodal)."""
    return pa.struct(
        [
            ("role", pa.string()),
            ("content", pa.list_(PART) if parts else pa.string()),
            ("name", pa.string()),
            ("tool_call_id", pa.string()),
            ("tool_calls", pa.list_(TOOL_CALL)),
        ]
    )


def _arrow_content(content: Any, parts: bool) -> Any:
    if parts:
        if isinstance(content, list):
            return [
                {"type": str(p.get("type", "text")), "text": p.get("text"), "image": p.get("image")}
                if isinstance(p, dict)
                else {"type": "text", "text": str(p), "image": None}
                for p in content
            ]
        text = content if isinstance(content, str) else "" if content is None else json.dumps(content)
        return [{"type": "text", "text": text, "image": None}]
    if isinstance(content, str):
        return content
    if content is None:
        return ""
    if isinstance(content, list) and all(isinstance(p, dict) and p.get("type") == "text" for p in content):
        return content_text(content)
    return json.dumps(content, ensure_ascii=False)


def arrow_messages(messages: Iterable[dict[str, Any]], *, parts: bool = False) -> list[dict[str, Any]]:
    """``messages`` as values of ``message_type(parts=parts)``: ``role``, ``content``, and ``name``,
    ``tool_call_id``, ``tool_calls`` where a message has them (null otherwise); tool call arguments
    become JSON strings. With ``parts=False`` a message with image parts is an error."""
    out = []
    for m in messages:
        if not parts and has_images([m]):
            raise ConfigError("a message has image parts: its content needs the multimodal (parts) layout")
        calls = None
        if m.get("tool_calls"):
            calls = []
            for call in m["tool_calls"]:
                fn = call.get("function", call)
                calls.append(
                    {
                        "id": None if call.get("id") is None else str(call["id"]),
                        "type": str(call.get("type") or "function"),
                        "function": {
                            "name": str(fn.get("name", "")),
                            "arguments": _json_args(fn.get("arguments")),
                        },
                    }
                )
        out.append(
            {
                "role": str(m.get("role")),
                "content": _arrow_content(m.get("content"), parts),
                "name": None if m.get("name") is None else str(m["name"]),
                "tool_call_id": None if m.get("tool_call_id") is None else str(m["tool_call_id"]),
                "tool_calls": calls,
            }
        )
    return out


def _json_args(args: Any) -> str:
    if isinstance(args, str):
        return args
    return json.dumps(args if args is not None else {}, ensure_ascii=False)


def _hermes_calls(text: str, prefix: str) -> tuple[str, list[dict[str, Any]]] | None:
    """(content without the blocks, calls) when ``text`` holds well-formed Hermes calls, else None."""
    blocks = list(_HERMES.finditer(text))
    if not blocks:
        return None
    calls = []
    for j, m in enumerate(blocks):
        try:
            obj = json.loads(m.group(1).strip())
        except json.JSONDecodeError:
            return None
        if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
            return None
        args = obj.get("arguments", obj.get("parameters", {}))
        if isinstance(args, str):
            try:
                args = json.loads(args) if args.strip() else {}
            except json.JSONDecodeError:
                return None
        if not isinstance(args, dict):
            return None
        calls.append(
            {
                "id": f"{prefix}_{j}",
                "type": "function",
                "function": {"name": obj["name"], "arguments": _json_args(args)},
            }
        )
    return _HERMES.sub("", text).strip(), calls


def _assistant(message: dict[str, Any], turn: int) -> dict[str, Any]:
    text = str(message.get("content") or "")
    prefix = f"call_{turn}"
    if message.get("tool_calls"):
        calls = []
        for j, call in enumerate(message["tool_calls"]):
            fn = call.get("function", call)
            calls.append(
                {
                    "id": str(call.get("id") or f"{prefix}_{j}"),
                    "type": "function",
                    "function": {
                        "name": str(fn.get("name", "")),
                        "arguments": _json_args(fn.get("arguments")),
                    },
                }
            )
        return {"role": "assistant", "content": text, "tool_calls": calls}
    parsed = _hermes_calls(text, prefix)
    if parsed is None:
        return {"role": "assistant", "content": text}
    content, calls = parsed
    return {"role": "assistant", "content": content, "tool_calls": calls, "_text": text}


def sft_messages(traj: Trajectory) -> list[dict[str, Any]]:
    """The trajectory's conversation in OpenAI chat format (see the module docstring)."""
    out: list[dict[str, Any]] = []
    pending: list[str] = []  # ids of the last assistant turn's calls not yet answered
    open_turn: dict[str, Any] | None = None  # that assistant turn

    def close_turn() -> None:
        nonlocal open_turn, pending
        if open_turn is not None and pending and len(pending) == len(open_turn.get("tool_calls", [])):
            open_turn.pop("tool_calls")  # no call of this turn was answered: keep them as text
            open_turn["content"] = open_turn.pop("_text", open_turn["content"])
        elif open_turn is not None and pending:
            answered = len(open_turn["tool_calls"]) - len(pending)
            open_turn["tool_calls"] = open_turn["tool_calls"][:answered]
        if open_turn is not None:
            open_turn.pop("_text", None)
        open_turn, pending = None, []

    turn = 0
    for message in traj.messages:
        role = message.get("role")
        content = message.get("content")
        if has_images([message]) and isinstance(content, list):
            content = [dict(part) for part in content]  # text and image parts, as stored
        else:
            content = (
                content
                if isinstance(content, str)
                else json.dumps(content, ensure_ascii=False)
                if content is not None
                else ""
            )
        if role == "tool" and pending:
            given = message.get("tool_call_id")
            call_id = pending.pop(pending.index(given)) if given in pending else pending.pop(0)
            out.append({"role": "tool", "tool_call_id": call_id, "content": content})
            continue
        close_turn()
        if role == "assistant":
            msg = _assistant(message, turn)
            turn += 1
            out.append(msg)
            if msg.get("tool_calls"):
                open_turn, pending = msg, [c["id"] for c in msg["tool_calls"]]
        elif role == "tool":
            out.append({"role": "user", "content": content})
        else:
            out.append({"role": str(role), "content": content})
    close_turn()
    return out


def sft_record(traj: Trajectory) -> dict[str, Any]:
    """One line of the export: ``messages``, ``tools``, ``images`` (when there are any) and
    identifying fields."""
    record: dict[str, Any] = {
        "messages": sft_messages(traj),
        "tools": traj.tools,
        "trajectory_id": traj.trajectory_id,
        "group_id": traj.group_id,
        "task": traj.task,
        "task_index": traj.task_index,
        "model": traj.model,
        "reward": traj.reward,
        "status": traj.status.value,
        "terminated": traj.terminated,
    }
    refs = image_refs(traj.messages)
    if refs:
        try:
            record["images"] = [f"{IMAGES_DIR}/{parse_ref(ref)}.png" for ref in refs]
        except ValueError as exc:
            raise ConfigError(
                f"trajectory {traj.trajectory_id}: {exc}; run `toolgym verify` on the dataset"
            ) from None
    return record


def _kept(traj: Trajectory, min_reward: float | None, include_untrainable: bool) -> bool:
    return not (
        traj.status is Status.ERROR
        or (not include_untrainable and traj.status is Status.UNTRAINABLE)
        or (min_reward is not None and traj.reward < min_reward)
    )


SFT_COLUMNS = (
    ("trajectory_id", pa.string()),
    ("group_id", pa.string()),
    ("task", pa.string()),
    ("task_index", pa.int64()),
    ("model", pa.string()),
    ("reward", pa.float64()),
    ("status", pa.string()),
    ("terminated", pa.bool_()),
)
"""The identifying columns of the SFT Parquet, after ``messages`` and ``tools``."""
_NO_TOOLS = pa.list_(pa.struct([("type", pa.string()), ("function", pa.struct([("name", pa.string())]))]))


def _canon(value: Any) -> Any:
    """``value`` without null and empty-object entries (what an Arrow struct round trip adds)."""
    if isinstance(value, dict):
        items = ((k, _canon(v)) for k, v in value.items())
        return {k: v for k, v in items if v is not None and v != {}}
    if isinstance(value, list):
        return [_canon(v) for v in value]
    return value


def _tools_type(tools: list[list[dict[str, Any]]]) -> pa.DataType:
    """The union struct type of these tool lists (empty objects as null: Parquet has no empty struct)."""
    try:
        inferred = pa.array([_canon(t) for t in tools], type=None if tools else pa.list_(pa.null())).type
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise ConfigError(f"the tool schemas do not fit one Parquet type ({exc}); export as .jsonl") from None
    return _NO_TOOLS if pa.types.is_null(inferred.value_type) else inferred


def _sft_row(traj: Trajectory, tools_type: pa.DataType | None, images: bool) -> dict[str, Any]:
    record = sft_record(traj)
    if "images" in record and not images:
        raise ConfigError(
            f"trajectory {traj.trajectory_id} has screenshots; export with images=True "
            "(the CLI does for a dataset with an images/ folder) or as .jsonl"
        )
    row = {name: record[name] for name, _ in SFT_COLUMNS}
    row["messages"] = arrow_messages(record["messages"], parts=images)
    row["tools"] = _canon(record["tools"])
    if images:
        row["images"] = record.get("images", [])
    if tools_type is not None:
        _check_tools(traj.trajectory_id, row["tools"], tools_type)
    return row


def _check_tools(trajectory_id: str, tools: list[dict[str, Any]], tools_type: pa.DataType) -> None:
    try:
        back = pa.array([tools], type=tools_type).to_pylist()[0]
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        back = None
    if back is None or _canon(back) != tools:
        raise ConfigError(
            f"trajectory {trajectory_id}: its tool schemas differ in shape from the first rows' "
            "and would not survive the Parquet column; export as .jsonl"
        )


def _write_sft_parquet(
    trajectories: Iterable[Trajectory], path: Path, *, images: bool, row_group_size: int
) -> int:
    """Stream ``sft_record``s into one Parquet file (see the module docstring); returns the rows."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    writer: pq.ParquetWriter | None = None
    schema: pa.Schema | None = None
    batch: list[dict[str, Any]] = []
    n = 0

    def flush() -> None:
        nonlocal writer, schema, batch
        if schema is None:
            tools_type = _tools_type([r["tools"] for r in batch])
            for r in batch:
                _check_tools(r["trajectory_id"], r["tools"], tools_type)
            fields = [("messages", pa.list_(message_type(parts=images))), ("tools", tools_type), *SFT_COLUMNS]
            if images:
                fields.append(("images", pa.list_(pa.string())))
            schema = pa.schema(fields)
            writer = pq.ParquetWriter(str(tmp), schema, compression="zstd")
        assert writer is not None
        writer.write_table(pa.Table.from_pylist(batch, schema=schema))
        batch = []

    try:
        for traj in trajectories:
            batch.append(_sft_row(traj, schema.field("tools").type if schema is not None else None, images))
            n += 1
            if len(batch) >= row_group_size:
                flush()
        if batch or schema is None:
            flush()
        assert writer is not None
        writer.close()
        tmp.replace(path)
    except BaseException:
        if writer is not None:
            writer.close()
        tmp.unlink(missing_ok=True)
        raise
    return n


def write_sft(
    trajectories: Iterable[Trajectory],
    out: str | Path | IO[str],
    *,
    min_reward: float | None = None,
    include_untrainable: bool = True,
    images: bool = False,
    row_group_size: int = 256,
) -> tuple[int, int]:
    """Stream SFT records to a JSONL file (or an open text stream), or to a Parquet file when
    ``out`` ends in ``.parquet``; returns (written, filtered out).

    ``min_reward`` keeps only trajectories whose reward is at least that; errored episodes are
    always left out; ``include_untrainable`` keeps token-unfaithful ones (SFT retokenises text).
    ``images`` (Parquet only): the dataset has screenshots, so ``content`` is a list of parts and
    an ``images`` column lists their files; without it a trajectory with image parts is an error.
    """
    if isinstance(out, (str, Path)) and Path(out).suffix == ".parquet":
        seen = 0

        def counted() -> Iterable[Trajectory]:
            nonlocal seen
            for traj in trajectories:
                seen += 1
                if _kept(traj, min_reward, include_untrainable):
                    yield traj

        written = _write_sft_parquet(counted(), Path(out), images=images, row_group_size=row_group_size)
        return written, seen - written
    written = dropped = 0
    fh: IO[str]
    if isinstance(out, (str, Path)):
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        fh = open(out, "w", encoding="utf-8")
    else:
        fh = out
    try:
        for traj in trajectories:
            if not _kept(traj, min_reward, include_untrainable):
                dropped += 1
                continue
            fh.write(json.dumps(sft_record(traj), ensure_ascii=False) + "\n")
            written += 1
    finally:
        if isinstance(out, (str, Path)):
            fh.close()
    return written, dropped
