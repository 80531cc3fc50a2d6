"""Text from models, tools and environments made safe to print on an operator's terminal.

A policy under RL writes whatever raises its reward, and tools echo what it wrote; printed raw,
that text drives the terminal: OSC 52 writes the clipboard, OSC 8 hides a link under other text,
CSI clears the screen or moves the cursor, C1 controls (U+0080–U+009F) act as ESC sequences on
some terminals, a carriage return or backspace overwrites what was printed, bidi overrides and
isolates (U+202A–U+202E, U+2066–U+2069) reorder what the operator reads. :func:`visible` turns
every such character into a visible stand-in; newlines and tabs stay (``\\r\\n`` reads as a newline).
Everything that prints such text (``toolgym show``, ``tools try``, progress and summary lines,
error lines) passes it through here; the HTML report escapes it its own way.
"""

from __future__ import annotations

import re

__all__ = ["visible"]

_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def _stand_in(match: re.Match[str]) -> str:
    c = ord(match.group())
    if c < 0x20:
        return chr(0x2400 + c)  # the Control Pictures block: ESC → ␛, BEL → ␇, CR → ␍
    if c == 0x7F:
        return "\u2421"  # ␡
    return f"\\x{c:02x}" if c <= 0xFF else f"\\u{c:04x}"


def visible(text: str) -> str:
    """``text`` with every control character a terminal would act on shown instead: C0 controls
    (but newline and tab) as their Control Pictures (``\\x1b`` → ``␛``), DEL as ``␡``, C1 controls
    and bidi/line-separator format characters as ``\\x9b`` / ``\\u202e`` escapes. Idempotent."""
    if text.isprintable():
        return text  # the common case: nothing to replace (newlines and tabs are not printable)
    return _UNSAFE.sub(_stand_in, text.replace("\r\n", "\n"))
