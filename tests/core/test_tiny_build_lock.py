"""Two processes (pytest-xdist workers, parallel CLI runs) asking for the same tiny model: the second
waits for the first one's build and uses it, instead of building its own and replacing the directory
while the first one's readers load from it."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from toolgym.core.llm.local.tiny import TinySpec, build_lock, ensure_tiny_model


def test_a_build_waits_for_the_lock_and_uses_what_the_holder_built(tmp_path: Path) -> None:
    root = tmp_path / "models"
    root.mkdir()
    out = root / f"tiny-qwen-{TinySpec(family='qwen').key()}"
    got: list[Path] = []
    with build_lock(root / f".{out.name}.lock"):  # another process is building
        waiter = threading.Thread(
            target=lambda: got.append(ensure_tiny_model("qwen", cache_dir=root, with_weights=False))
        )
        waiter.start()
        time.sleep(0.5)
        assert waiter.is_alive() and not got  # waiting for the lock, not building beside it
        out.mkdir()
        (out / "holder-built-this").write_text("")
        (out / "TOKENIZER_READY").write_text("ok\n")
    waiter.join(60)
    assert got == [out] and (out / "holder-built-this").exists()  # used, not rebuilt
