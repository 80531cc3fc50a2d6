"""``scripts/ensure-docker.sh`` on a machine restored with the pid files of daemons that no longer run.

dockerd refuses to start while ``/var/run/docker.pid`` exists, so a snapshot taken with the engine
up left CI unable to start it ("pid file found"). The engine here is played by stand-ins on PATH:
a ``dockerd`` that fails like the real one over an existing pid file, and a ``docker`` that answers
once that ``dockerd`` has started. The pid files are the test's own (the script's settings).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "ensure-docker.sh"


def _stand_ins(tmp_path: Path) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    started = tmp_path / "started"
    pidfile = tmp_path / "docker.pid"
    scripts = {
        "docker": f'#!/bin/sh\n[ -f "{started}" ] || exit 1\necho 99.0\n',
        "dockerd": (
            f'#!/bin/sh\nif [ -f "{pidfile}" ]; then\n'
            f'  echo "failed to start daemon: pid file found, ensure docker is not running or delete {pidfile}"\n'
            f'  exit 1\nfi\necho $$ > "{pidfile}"\ntouch "{started}"\n'
        ),
        # the other host tools the script checks for, so it never reaches for apt-get here
        "bwrap": "#!/bin/sh\nexit 0\n",
        "debootstrap": "#!/bin/sh\nexit 0\n",
        "ip": "#!/bin/sh\nexit 0\n",
    }
    for name, text in scripts.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    return {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "TOOLGYM_DOCKERD_LOG": str(tmp_path / "dockerd.log"),
        "TOOLGYM_DOCKERD_PIDFILE": str(pidfile),
        "TOOLGYM_CONTAINERD_PIDFILE": str(tmp_path / "containerd.pid"),
    }


def _dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True
    )
    return int(done.stdout)


def _run(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=90)


def test_stale_pid_files_of_dead_daemons_are_removed_and_the_engine_starts(tmp_path: Path) -> None:
    env = _stand_ins(tmp_path)
    (tmp_path / "docker.pid").write_text(f"{_dead_pid()}")
    (tmp_path / "containerd.pid").write_text(f"{_dead_pid()}\n")
    done = _run(env)
    assert done.returncode == 0, done.stderr
    assert "removing stale" in done.stderr and "engine 99.0 answers" in done.stderr
    assert not (tmp_path / "containerd.pid").exists()
    assert (tmp_path / "started").exists()


def test_a_pid_file_held_by_another_program_is_stale_too(tmp_path: Path) -> None:
    """A pid reused by an unrelated process (here: this test's own) is no dockerd: the file goes."""
    env = _stand_ins(tmp_path)
    (tmp_path / "docker.pid").write_text(f"{os.getpid()}")
    done = _run(env)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "started").exists()


def test_without_the_cleanup_the_stand_in_fails_like_dockerd(tmp_path: Path) -> None:
    """The stand-in really refuses over a pid file; a dockerd that is running keeps its file."""
    _stand_ins(tmp_path)
    (tmp_path / "docker.pid").write_text("1")  # pid 1 is never a dockerd here
    stand_in = subprocess.run([str(tmp_path / "bin" / "dockerd")], capture_output=True, text=True)
    assert stand_in.returncode == 1 and "pid file found" in stand_in.stdout
    live = subprocess.Popen(["sleep", "30"])
    try:
        (tmp_path / "sleep.pid").write_text(f"{live.pid}")
        check = subprocess.run(
            [
                "bash",
                "-c",
                f'source <(sed -n "/^clear_stale_pid()/,/^}}/p" "{SCRIPT}"); '
                f'clear_stale_pid "{tmp_path / "sleep.pid"}" sleep',
            ],
            capture_output=True,
            text=True,
        )
        assert check.returncode == 0, check.stderr
        assert (tmp_path / "sleep.pid").exists(), "the pid file of a live daemon of that name must stay"
    finally:
        live.kill()
        live.wait()
