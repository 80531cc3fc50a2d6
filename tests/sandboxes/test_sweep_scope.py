"""A sweep of one Docker engine touches that engine's containers only.

CI once lost three WebShop-in-the-browser tests this way: on the other pytest worker,
``python -m toolgym.sandboxes.remote gc --all`` on a second engine also removed this machine's
sandbox state directories, the live ones' included, and the browser sandbox of the first worker
lost its egress proxy socket (``net::ERR_SOCKET_NOT_CONNECTED`` on every later page).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from toolgym.sandboxes import lifecycle
from toolgym.sandboxes.docker import engine


class FakeEngine:
    """What ``engine.sweep`` asks of a docker client: the labelled containers, and removal."""

    def __init__(self, containers: list[dict[str, Any]]) -> None:
        self.listed = containers
        self.removed: list[str] = []

    def containers(self, **_: Any) -> list[dict[str, Any]]:
        return [c for c in self.listed if c["Id"] not in self.removed]

    def remove_container(self, container_id: str, **_: Any) -> None:
        self.removed.append(container_id)


@pytest.fixture
def state_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TOOLGYM_SANDBOX_DIR", str(tmp_path / "sb"))
    return lifecycle.state_root()


def _state_dir(root: Path, name: str, owner: str) -> Path:
    path = root / name
    path.mkdir()
    (path / "owner").write_text(owner)
    (path / "p.sock").write_text("")  # stands in for the egress proxy's socket
    return path


def test_sweeping_an_engine_with_everything_leaves_this_machines_state_dirs(state_root: Path) -> None:
    live = _state_dir(state_root, "sb-live", lifecycle.owner_id())
    dead = _state_dir(state_root, "sb-dead", f"{os.uname().nodename}:999999999:0")
    other = FakeEngine(
        [{"Id": "c1", "Labels": {engine.LABEL: "python", "toolgym.owner": lifecycle.owner_id()}}]
    )
    assert engine.sweep(other, everything=True) == 1 and other.removed == ["c1"]
    assert (live / "p.sock").exists() and (dead / "p.sock").exists()


def test_the_state_dir_sweep_removes_dead_owners_only_unless_told(state_root: Path) -> None:
    live = _state_dir(state_root, "sb-live", lifecycle.owner_id())
    dead = _state_dir(state_root, "sb-dead", f"{os.uname().nodename}:999999999:0")
    assert lifecycle.sweep_state_dirs() == 1
    assert live.exists() and not dead.exists()
    assert (
        lifecycle.sweep_state_dirs(everything=True) == 1 and not live.exists()
    )  # `toolgym sandbox gc --all`


def test_a_state_dir_removed_during_the_sweep_is_skipped(
    state_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process's sandbox removes its own directory between the listing and the sweep's look
    at it (CI saw the sweep fail with FileNotFoundError): nothing is left to sweep, and no error."""
    gone = state_root / "sb-gone"
    gone.mkdir()
    listed = list(state_root.iterdir())
    gone.rmdir()
    monkeypatch.setattr(Path, "is_dir", lambda self: True)  # it was a directory when listed
    monkeypatch.setattr(Path, "iterdir", lambda self: iter(listed))
    assert lifecycle.sweep_state_dirs() == 0
