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
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any

from toolgym.core.errors import ConfigError
from toolgym.core.tokens.images import IMAGES_DIR, has_images, image_refs, parse_ref
from toolgym.core.trajectory import Status, Trajectory

_HERMES = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)


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


def write_sft(
    trajectories: Iterable[Trajectory],
    out: str | Path | IO[str],
    *,
    min_reward: float | None = None,
    include_untrainable: bool = True,
) -> tuple[int, int]:
    """Stream SFT records to a JSONL file (or an open text stream); returns (written, filtered out).

    ``min_reward`` keeps only trajectories whose reward is at least that; errored episodes are
    always left out; ``include_untrainable`` keeps token-unfaithful ones (SFT retokenises text).
    """
    written = dropped = 0
    fh: IO[str]
    if isinstance(out, (str, Path)):
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        fh = open(out, "w", encoding="utf-8")
    else:
        fh = out
    try:
        for traj in trajectories:
            if (
                traj.status is Status.ERROR
                or (not include_untrainable and traj.status is Status.UNTRAINABLE)
                or (min_reward is not None and traj.reward < min_reward)
            ):
                dropped += 1
                continue
            fh.write(json.dumps(sft_record(traj), ensure_ascii=False) + "\n")
            written += 1
    finally:
        if isinstance(out, (str, Path)):
            fh.close()
    return written, dropped
