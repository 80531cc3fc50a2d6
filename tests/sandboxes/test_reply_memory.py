"""One ``python`` tool call cannot make the host process hold hundreds of MB.

Each case runs one hostile cell in a fresh Python (``tests/reply_memory.py``) and bounds the
host's peak resident growth: twice the largest reply a cell may send (five text fields of
``max_output_bytes``, at 6 bytes a character at worst: 7.6 MiB for the default profile) plus
16 MiB of slack, 31 MiB in all. Before the caps, an exception with a 100 MB message grew the host
by 573 MiB on the local backend (and as much on Docker: the agent relayed the message whole,
twice, in one frame of up to 256 MiB). Cases:

- ``exception``: ``raise ValueError('x' * 100_000_000)``: the message and the traceback are cut in
  the interpreter before the traceback is formatted;
- ``stdout``: 100 MB printed (cut where the agent reads the pipe, as before);
- ``value``: a 100 MB trailing expression (its repr is cut in the interpreter);
- ``forged``: the cell writes its own 100 MB reply frame on the interpreter's control socket,
  past the interpreter's caps: the agent refuses the frame (the session restarts, and says why);
- on the in-process ``memory`` backend the cell runs in this process, so what it builds counts
  (100 MB for the message, 200 MB for a value and its repr): only what the tool adds is bounded.
"""

from __future__ import annotations

import asyncio
import socket

import pytest

from tests.reply_memory import HOSTILE_MESSAGE_CHARS, explain, measure
from tests.sandboxes.helpers import ensure_images, require
from toolgym.core.errors import SandboxBrokenError
from toolgym.sandboxes.agent import protocol
from toolgym.sandboxes.channel import AgentChannel

CASES = [
    pytest.param(
        backend, attack, marks=[pytest.mark.docker] if backend == "docker" else [], id=f"{backend}-{attack}"
    )
    for backend in ("docker", "local", "memory")
    for attack in ("exception", "stdout", "value", "forged")
    if not (backend == "memory" and attack == "forged")  # no control socket in this process
]


@pytest.mark.parametrize(("backend", "attack"), CASES)
def test_one_hostile_python_call_holds_little_on_the_host(backend: str, attack: str) -> None:
    if backend != "memory":
        require(backend)
    if backend == "docker":
        ensure_images("python")
    m = measure(f"python-{attack}", backend=backend)
    assert m.hostile_bytes <= m.bound_bytes, explain(m)
    assert m.observation_chars <= 17_000, explain(m)  # the tool's own cap: 16 KiB and its marker line
    if attack == "forged":
        assert (
            m.error and "SessionRestarted" in m.observation and "reply frame of more than" in m.observation
        ), explain(m)
        return
    # the model is told how much there was, not only that something was cut
    total = {
        "stdout": f"{HOSTILE_MESSAGE_CHARS} bytes in all",
        "exception": f"of {HOSTILE_MESSAGE_CHARS} characters",
        "value": f"of {HOSTILE_MESSAGE_CHARS + 2} characters",
    }[attack]  # a value's repr has its quotes
    if backend == "memory" and attack == "stdout":  # captured in this process as text, not read from a pipe
        total = f"of {HOSTILE_MESSAGE_CHARS} characters"
    assert any(total in note for note in m.notes), explain(m)
    assert m.error == (attack == "exception"), explain(m)


# -- the pieces, without a sandbox --------------------------------------------------------------------


def test_cut_texts_fit_their_limit_and_say_how_much_there_was() -> None:
    for size, limit in ((10**8, 262_144), (300, 200), (262_145, 262_144), (10**5 + 1, 99_998)):
        text, cut = protocol.cap_text("x" * size, limit)
        assert cut and len(text) <= limit and f"of {size} characters" in text
        assert protocol.cap_text(text, limit) == (text, False)  # a second cut keeps the line
    assert protocol.cap_text("short", 10) == ("short", False)


def test_an_exception_is_cut_before_it_is_formatted() -> None:
    try:
        try:
            raise KeyError("k" * 1_000_000)
        except KeyError as inner:
            raise ValueError("v" * 1_000_000) from inner
    except ValueError as exc:
        error, tb, cut = protocol.capped_exception(exc, exc.__traceback__, 4096)
    assert cut and len(error) <= 4096 and len(tb) <= 4096
    assert error.startswith("ValueError: vvv") and "of 1000000 characters" in error
    assert (
        "of 1000000 characters" in tb.rsplit("ValueError", 1)[1]
    )  # the message's own line survives in the traceback


def test_the_host_refuses_a_reply_longer_than_its_request_allows() -> None:
    limits = {
        op: protocol.reply_limit(op, max_output=256 * 1024, max_bytes=1024 * 1024)
        for op in ("py_exec", "run", "read_file", "ping")
    }
    assert limits == {
        "py_exec": 5 * 6 * (256 * 1024 + 512) + 65536,
        "run": 2 * 6 * (256 * 1024 + 512) + 65536,
        "read_file": 4 * (1024 * 1024 // 3 + 1) + 65536,
        "ping": protocol.CONTROL_REPLY_BYTES,
    }

    async def scenario() -> tuple[str, int]:
        host, agent = socket.socketpair()
        reader, writer = await asyncio.open_unix_connection(sock=host)
        channel = AgentChannel(reader, writer, name="t", hello={})
        request = asyncio.create_task(channel.request("ping", reply_timeout_s=5.0))
        await asyncio.sleep(0.05)
        agent.sendall(protocol.HEADER.pack(protocol.CONTROL_REPLY_BYTES + 1) + b"x" * 65536)
        with pytest.raises(SandboxBrokenError) as broken:
            await request
        buffered = len(reader._buffer)  # what the host read of the frame: at most one socket read
        writer.close()
        agent.close()
        return str(broken.value), buffered

    reason, buffered = asyncio.run(scenario())
    assert f"oversized frame ({protocol.CONTROL_REPLY_BYTES + 1} bytes, more than the" in reason
    assert buffered <= 65536
