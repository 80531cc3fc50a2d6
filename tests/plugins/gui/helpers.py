"""Helpers of the browser tool tests: a browser sandbox driven by tool name, and a stdlib PNG reader."""

from __future__ import annotations

import asyncio
import re
import struct
import zlib
from typing import Any

from toolgym.core.env.contract import EpisodeContext
from toolgym.core.tools import Tool, ToolOutput


class Browser:
    """One browser sandbox and an episode context; ``call`` runs a tool by name, as the engine would."""

    def __init__(self, runner: asyncio.Runner, sandbox: Any, ctx: EpisodeContext, tools: list[Tool]) -> None:
        self.runner, self.sandbox, self.ctx = runner, sandbox, ctx
        self.tools = {t.name: t for t in tools}
        self.last = ""

    def call(self, name: str, tools: list[Tool] | None = None, **arguments: Any) -> ToolOutput:
        chosen = {t.name: t for t in tools} if tools else self.tools
        out = self.runner.run(chosen[name].call(arguments, sandbox=self.sandbox, ctx=self.ctx))
        self.last = out.text
        return out

    def id_of(self, pattern: str, text: str | None = None) -> int:
        """The id on the first line matching ``role 'name'`` regex ``pattern`` in the latest text."""
        match = re.search(r"\[(\d+)\] " + pattern, text if text is not None else self.last)
        assert match, f"no element matching {pattern!r} in:\n{self.last}"
        return int(match.group(1))


def decode_png(data: bytes) -> tuple[int, int, int, bytes]:
    """(width, height, bytes per pixel, raw rows) of an 8-bit RGB(A) PNG, with the stdlib only."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, header = 8, b"", b""
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            idat += body
    width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", header)
    assert depth == 8 and colour in (2, 6) and interlace == 0, (depth, colour, interlace)
    bpp = 3 if colour == 2 else 4
    raw, stride, rows = zlib.decompress(idat), width * bpp, bytearray()
    previous = bytearray(stride)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            left = line[i - bpp] if i >= bpp else 0
            up, corner = previous[i], previous[i - bpp] if i >= bpp else 0
            if kind == 1:
                line[i] = (line[i] + left) & 255
            elif kind == 2:
                line[i] = (line[i] + up) & 255
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 255
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                line[i] = (line[i] + (left if pa <= pb and pa <= pc else up if pb <= pc else corner)) & 255
        rows += line
        previous = line
    return width, height, bpp, bytes(rows)


def pixel(image: tuple[int, int, int, bytes], x: int, y: int) -> tuple[int, int, int]:
    width, _, bpp, rows = image
    at = (y * width + x) * bpp
    return rows[at], rows[at + 1], rows[at + 2]
