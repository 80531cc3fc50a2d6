"""What ties sandboxes to the process that made them: state directories, owner identity, and the
clean-up that runs at exit.

- Every sandbox has a state directory ``<root>/<id>/`` holding the host's listening socket (and
  the egress proxy's); the root is ``$TOOLGYM_SANDBOX_DIR`` or ``/tmp/toolgym-sb-<uid>`` (short,
  because UNIX socket paths are limited to 107 bytes).
- The agent's files are staged once per content hash under ``<root>/agent-<hash>/``, readable by
  the unprivileged sandbox user, and mounted read-only into every sandbox.
- The owner of a sandbox is ``host:pid:start-time`` of the process that made it; a sweep removes
  sandboxes whose owner process is gone (or whose TTL passed), never those of a live process.
- At interpreter exit (normal exit, ``SystemExit``, Ctrl-C, and SIGTERM, which is turned into
  ``SystemExit`` when nobody else handles it) every sandbox still registered is destroyed. Even
  without that (``kill -9``), each agent exits when its connection drops, ending its sandbox.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import hashlib
import os
import shutil
import signal
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

from toolgym.sandboxes.agent import AGENT_DIR, AGENT_FILES

AGENT_KEEP_S = 2 * 86400.0
"""Staged agent files of other versions are removed once older than this (longer than any TTL)."""
_roots: dict[str, Path] = {}


def state_root() -> Path:
    name = os.environ.get("TOOLGYM_SANDBOX_DIR") or f"/tmp/toolgym-sb-{os.geteuid()}"
    root = _roots.get(name)
    if root is None or not root.is_dir():
        root = Path(name)
        root.mkdir(parents=True, exist_ok=True)
        root.chmod(0o711)  # sandbox users may traverse it to reach their own directory, not list it
        _roots[name] = root
    return root


def sandbox_dir(sandbox_id: str, *, uid: int | None) -> tuple[Path, bool]:
    """A fresh state directory, owned by ``uid`` when we may chown; whether it is private
    (mode 0700 for that uid) or had to be left traversable for everyone (0711)."""
    path = state_root() / sandbox_id
    path.mkdir(mode=0o700)
    (path / "owner").write_text(owner_id())
    if uid is None or uid == os.geteuid():
        return path, True
    try:
        os.chown(path, uid, -1)
        return path, True
    except PermissionError:
        path.chmod(0o711)
        return path, False


def remove_sandbox_dir(sandbox_id: str) -> None:
    shutil.rmtree(state_root() / sandbox_id, ignore_errors=True)


def sweep_state_dirs(*, everything: bool = False) -> int:
    """Remove state directories whose owner process is gone (all of them with ``everything``)."""
    current = staged_agent_dir().name
    doomed: list[Path] = []
    for path in state_root().iterdir():
        if path.name.startswith(("agent-", ".")):
            # older agents' files: kept while a sandbox of an older process may still mount them
            if path.name != current and _age_s(path) > AGENT_KEEP_S:
                shutil.rmtree(path, ignore_errors=True)
            continue
        if not path.is_dir():
            continue
        try:
            owner = (path / "owner").read_text()
        except OSError:
            owner = ""
        stale = not owner_alive(owner) if owner else 60 < _age_s(path) < float("inf")
        if everything or stale:
            doomed.append(path)
    if doomed:
        # A local sandbox dies with its owner (bubblewrap's --die-with-parent), but not at once:
        # end what still runs from these directories before removing them.
        end_processes_using([str(p) for p in doomed])
    for path in doomed:
        shutil.rmtree(path, ignore_errors=True)
    return len(doomed)


def _age_s(path: Path) -> float:
    """Seconds since ``path`` last changed; infinity when it is gone (another process's sandbox removed
    its own directory between the listing and this look: nothing left to sweep)."""
    try:
        return time.time() - path.stat().st_mtime
    except FileNotFoundError:
        return float("inf")


def end_processes_using(paths: list[str], *, timeout_s: float = 5.0) -> int:
    """SIGKILL every process whose command line names one of ``paths``, and wait until they are
    gone (zombies count as gone); returns how many there were."""
    needles = [p.encode() for p in paths]
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if any(n in cmdline for n in needles):
            pids.append(int(entry.name))
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(entry.name), signal.SIGKILL)
    found = len(pids)
    deadline = time.monotonic() + timeout_s
    while pids and time.monotonic() < deadline:
        pids = [pid for pid in pids if _running(pid)]
        if pids:
            time.sleep(0.02)
    return found


def _running(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2 :][:1] != "Z"


_staged: Path | None = None
_stage_lock = threading.Lock()


def staged_agent_dir() -> Path:
    """The agent's files, copied where every sandbox user can read them (once per content)."""
    global _staged
    with _stage_lock:
        if _staged is not None and _staged.exists():
            return _staged
        digest = hashlib.sha256()
        for name in AGENT_FILES:
            digest.update(name.encode() + b"\0" + (AGENT_DIR / name).read_bytes())
        target = state_root() / f"agent-{digest.hexdigest()[:12]}"
        if not (target / "main.py").exists():
            tmp = state_root() / f".agent-{os.getpid()}-{threading.get_ident()}"
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(mode=0o755)
            for name in AGENT_FILES:
                shutil.copyfile(AGENT_DIR / name, tmp / name)
                (tmp / name).chmod(0o644)
            try:
                tmp.rename(target)
            except OSError:  # another process staged it first
                shutil.rmtree(tmp, ignore_errors=True)
        _staged = target
        return target


# -- owner identity ------------------------------------------------------------------------------


def _start_time(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rfind(")") + 2 :].split()[19]


def owner_id() -> str:
    """``host:pid:start-time`` of this process (start time in clock ticks since boot)."""
    return f"{socket.gethostname()}:{os.getpid()}:{_start_time(os.getpid())}"


def owner_alive(owner: str) -> bool:
    """Whether the process named by ``owner_id()`` still runs; other hosts' owners count as alive."""
    host, _, rest = owner.partition(":")
    if host != socket.gethostname():
        return True  # cannot tell from here; the sandbox's TTL covers it
    pid, _, start = rest.partition(":")
    return pid.isdigit() and _start_time(int(pid)) == start


# -- clean-up at exit ----------------------------------------------------------------------------

_live: dict[str, Callable[[], None]] = {}
_live_lock = threading.Lock()
_installed = False


def track(sandbox_id: str, destroy: Callable[[], None]) -> None:
    """Destroy this sandbox with ``destroy()`` (blocking, idempotent) if the process exits first."""
    global _installed
    with _live_lock:
        _live[sandbox_id] = destroy
        if not _installed:
            _installed = True
            atexit.register(destroy_all)
            _turn_sigterm_into_exit()


def untrack(sandbox_id: str) -> None:
    with _live_lock:
        _live.pop(sandbox_id, None)


def destroy_all() -> None:
    """Destroy every tracked sandbox now, in parallel (blocking)."""
    with _live_lock:
        destroyers = [functools.partial(_destroy_and_forget, sid, fn) for sid, fn in _live.items()]
        _live.clear()
    if not destroyers:
        return
    # plain threads: concurrent.futures refuses new work once the interpreter is shutting down
    for start in range(0, len(destroyers), 16):
        threads = [
            threading.Thread(target=_quietly, args=(fn,), daemon=True)
            for fn in destroyers[start : start + 16]
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30.0)


def _destroy_and_forget(sandbox_id: str, destroy: Callable[[], None]) -> None:
    try:
        destroy()
    finally:
        remove_sandbox_dir(sandbox_id)


def _quietly(fn: Callable[[], None]) -> None:
    with contextlib.suppress(Exception):
        fn()


def _turn_sigterm_into_exit() -> None:
    if threading.current_thread() is not threading.main_thread():
        return
    with contextlib.suppress(ValueError, OSError):
        if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
            signal.signal(signal.SIGTERM, _on_sigterm)


def _on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)
