"""Pieces of the in-sandbox agent tested on the host, without a sandbox: output capping, bash
quoting, path confinement, framing. The agent's modules import each other as sibling scripts."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolgym.sandboxes.agent import AGENT_DIR, protocol

sys.path.insert(0, str(AGENT_DIR))
import files
import procs
import sessions


@given(st.lists(st.binary(max_size=300), max_size=30), st.integers(min_value=0, max_value=400))
@settings(max_examples=200, deadline=None)
def test_capture_keeps_head_and_tail(chunks: list[bytes], limit: int) -> None:
    cap = procs.Capture(limit)
    for chunk in chunks:
        cap.feed(chunk)
    data = b"".join(chunks)
    assert cap.total == len(data)
    tail = bytes(cap.tail[-cap.tail_limit :]) if cap.tail_limit else b""
    if len(data) <= limit:
        assert bytes(cap.head) + tail == data and not cap.truncated
    else:
        assert cap.truncated
        assert bytes(cap.head) == data[: limit // 2]
        assert tail == (data[-(limit - limit // 2) :] if limit - limit // 2 else b"")
        assert f"{len(data) - limit} bytes of output omitted" in cap.text()


@given(st.text(alphabet=st.characters(exclude_characters="\0", exclude_categories=["Cs"]), max_size=200))
@settings(max_examples=60, deadline=None)
def test_ansi_c_quote_round_trips_through_bash(text: str) -> None:
    out = subprocess.run(
        ["bash", "--noprofile", "--norc", "-c", f"printf %s {sessions.ansi_c_quote(text)}"],
        capture_output=True,
    )
    assert out.stdout == text.encode()


def test_resolve_confines_paths(tmp_path: Path) -> None:
    work = tmp_path / "work"
    (work / "sub").mkdir(parents=True)
    (work / "sub" / "inner").symlink_to("../sub")
    (work / "out").symlink_to(tmp_path)
    root = str(work)
    assert files.resolve(root, "a.txt") == f"{root}/a.txt"
    assert files.resolve(root, f"{root}/sub/../b") == f"{root}/b"
    assert files.resolve(root, "sub/inner/x") == f"{root}/sub/x"
    for bad in ("..", "../x", "/etc/passwd", f"{root}/../x", "sub/../../x"):
        with pytest.raises(files.Outside, match="leaves"):
            files.resolve(root, bad)
    with pytest.raises(files.Outside, match="symlink"):
        files.resolve(root, "out/secret")
    with pytest.raises(ValueError):
        files.resolve(root, "")


def test_write_refuses_a_final_symlink(tmp_path: Path) -> None:
    (tmp_path / "link").symlink_to("/etc/hostname")
    with pytest.raises(files.Outside):
        files.write_file(str(tmp_path), "link", b"x")


def test_frames_round_trip_and_reject_garbage() -> None:
    a, b = socket.socketpair()
    message: dict[str, Any] = {"id": 7, "op": "run", "text": "ünï\n" * 1000}
    a.sendall(protocol.encode(message))
    assert protocol.recv_frame(b) == message
    a.sendall(protocol.HEADER.pack(protocol.MAX_FRAME + 1))
    with pytest.raises(ConnectionError, match="exceeds"):
        protocol.recv_frame(b)
    a.close()
    assert protocol.recv_frame(b) is None
    b.close()


def test_agent_files_are_stdlib_only() -> None:
    """The agent runs on any image's python3: it may import nothing but the stdlib and its siblings."""
    siblings = {name[:-3] for name in os.listdir(AGENT_DIR) if name.endswith(".py")}
    for name in siblings - {"__init__"}:
        source = (AGENT_DIR / f"{name}.py").read_text()
        for line in source.splitlines():
            words = line.split()
            if words[:1] in (["import"], ["from"]) and not line.startswith(" "):
                module = words[1].split(".")[0]
                assert module in siblings or module in sys.stdlib_module_names or module == "__future__", (
                    name,
                    line,
                )
