"""Short stable digests of text parts: the state anchors of GiGPO step grouping."""

from __future__ import annotations

import hashlib
from typing import Any


def digest(*parts: Any) -> str:
    """A short stable digest of text parts, for anchors."""
    return RunningDigest(*parts).hexdigest()


class RunningDigest:
    """``digest(*parts)`` built up part by part: appending costs only the new part."""

    def __init__(self, *parts: Any) -> None:
        self._h = hashlib.blake2b(digest_size=12)
        for part in parts:
            self.add(part)

    def add(self, part: Any) -> None:
        self._h.update(str(part).encode("utf-8", "surrogatepass"))
        self._h.update(b"\x1f")

    def hexdigest(self) -> str:
        return self._h.hexdigest()
