"""A directory of trajectories as JSON Lines: streaming, crash-safe append, resumable.

Layout of a dataset directory::

    manifest.json            what produced it (model, sampling, env, code version, settings)
    manifest-<k>.json        per shard (``collect --shard K/N``): its state and counts
    trajectories.jsonl       one finished trajectory per line (shards: trajectories-<k>.jsonl)
    failures.jsonl           episodes that ended with status=error, with their reasons
                             (shards: failures-<k>.jsonl)

Crash safety: each trajectory is one unbuffered append of one line, so a killed process (SIGKILL
included) leaves at most one partial last line. When a writer opens the file again it checks the
last record (complete line, JSON object with a ``trajectory_id``); a torn or invalid one is moved
to a side file, ``<file>.quarantine`` (its bytes kept, never deleted), and cut from the data, so a
resumed collection runs that episode again. ``fsync`` runs every ``fsync_every_s`` seconds and on
close (for power loss). A write that fails (a full disk) is rolled back to the last whole line and
raises :class:`StoreWriteError`: everything written before stays readable. Resume: the ids already
present are skipped, so a restarted collection loses nothing and duplicates nothing.

Reading never loads a whole file: every reader is a generator. Readers skip a line they cannot read
(torn, not JSON, not a trajectory) and a repeated id, and count them in a :class:`ReadReport`
(logged as warnings when the caller gives none), instead of refusing the whole dataset.

Several processes (or machines sharing a filesystem) may write one directory at once, each its
own shard file; a writer holds an exclusive ``flock`` on its file, so a second writer of the same
shard is refused instead of interleaving lines.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import re
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from pydantic import ValidationError
from pydantic_core import PydanticSerializationError

from toolgym.core.errors import ConfigError, ToolgymError
from toolgym.core.trajectory import Status, Trajectory

MAIN = "trajectories"
FAILURES = "failures.jsonl"
MANIFEST = "manifest.json"
_ID_RE = re.compile(rb'"trajectory_id":\s*"([^"]+)"')


_log = logging.getLogger("toolgym.trajectories")


class StoreWriteError(ToolgymError):
    """Appending to (or creating a file of) a dataset failed, e.g. the disk is full. What was
    written before is intact; the message says what to do. The CLI exits 1 (the input was fine)."""

    exit_code = 1


def quarantine_path(path: Path) -> Path:
    """The side file that keeps the bytes of torn or invalid records cut from ``path``."""
    return path.with_name(path.name + ".quarantine")


def _parse_record(line: bytes) -> tuple[dict[str, Any] | None, str | None]:
    """One line of a data file (newline included) → (record, None), or (None, why it is not a
    stored record). Checks the framing and the JSON, not the trajectory schema."""
    if not line.endswith(b"\n"):
        return None, "incomplete line (no newline at its end: a crash, or a writer still at work)"
    try:
        obj = json.loads(line)
    except (ValueError, RecursionError) as exc:
        return None, f"not valid JSON ({getattr(exc, 'msg', type(exc).__name__)})"
    if not isinstance(obj, dict) or not isinstance(obj.get("trajectory_id"), str):
        return None, "not a trajectory record (a JSON object with a trajectory_id)"
    return obj, None


def _record_problem(line: bytes) -> str | None:
    return _parse_record(line)[1]


def _last_line_start(fh: IO[bytes], size: int) -> int:
    """Offset of the first byte of the last line of a file of ``size`` bytes (newline ended or not)."""
    end = size - 1 if size else 0  # a newline at the very end closes the last line, not a new one
    block = 1 << 16
    pos = end
    while pos > 0:
        start = max(0, pos - block)
        fh.seek(start)
        idx = fh.read(pos - start).rfind(b"\n")
        if idx != -1:
            return start + idx + 1
        pos = start
    return 0


def _quarantine_tail(path: Path) -> int:
    """Move torn or invalid records at the end of ``path`` into its quarantine file (appended,
    synced before the data is cut); returns the bytes moved."""
    moved = 0
    with path.open("rb+") as fh:
        while (size := os.fstat(fh.fileno()).st_size) > 0:
            start = _last_line_start(fh, size)
            fh.seek(start)
            tail = fh.read(size - start)
            problem = _record_problem(tail)
            if problem is None:
                break
            side = quarantine_path(path)
            try:
                with side.open("ab") as q:
                    q.write(tail if tail.endswith(b"\n") else tail + b"\n")
                    q.flush()
                    os.fsync(q.fileno())
            except OSError as exc:
                raise StoreWriteError(
                    f"cannot keep the damaged last record of {path} in {side.name} ({exc.strerror or exc}); "
                    "free space or fix the directory's permissions, then run again"
                ) from None
            _log.warning(
                "%s:%s: %s; moved to %s and will be collected again", path, "last line", problem, side.name
            )
            fh.truncate(start)
            moved += len(tail)
    return moved


def encode_record(traj: Trajectory) -> bytes:
    """One JSON line for ``traj``. Text with lone surrogates (a chat API's ``\\ud800``, a tool's
    surrogate-escaped bytes), which UTF-8 cannot hold, is written as JSON escapes and reads back
    unchanged; a value JSON cannot hold (an object a plugin left in ``info``) is written as its repr."""
    try:
        return traj.model_dump_json().encode() + b"\n"
    except PydanticSerializationError:
        return (
            json.dumps(traj.model_dump(), default=repr, ensure_ascii=True, separators=(",", ":")).encode()
            + b"\n"
        )


def data_files(root: Path) -> list[Path]:
    """The trajectory files of a dataset directory (main file and shards), in a stable order."""
    return sorted(p for p in root.glob(f"{MAIN}*.jsonl") if p.is_file())


class TrajectoryWriter:
    """Appends trajectories to one file of a dataset directory. Not shared between processes:
    each process (shard) writes its own file."""

    def __init__(
        self,
        root: str | Path,
        *,
        shard: int | None = None,
        fsync_every_s: float = 1.0,
        scrub: Callable[[bytes], bytes] | None = None,
    ) -> None:
        """``scrub``: applied to every line before it is written (collections blank their secrets)."""
        self.root = Path(root)
        self.scrub = scrub
        self.root.mkdir(parents=True, exist_ok=True)
        name = f"{MAIN}.jsonl" if shard is None else f"{MAIN}-{shard:05d}.jsonl"
        self.path = self.root / name
        self.failures_path = self.root / (FAILURES if shard is None else f"failures-{shard:05d}.jsonl")
        self._fh: IO[bytes] = self.path.open("ab", buffering=0)
        try:  # before repairing: cutting a line another live writer is appending would lose it
            fcntl.flock(self._fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self._fh.close()
            which = "the main file" if shard is None else f"shard {shard}"
            raise ConfigError(
                f"another process is writing {which} of {self.root} ({self.path.name}); give each "
                "process its own shard (`toolgym collect --shard K/N`) or wait for it to finish"
            ) from None
        self.repaired_bytes = 0
        self.quarantined: list[Path] = []
        """The quarantine files that received a damaged last record when this writer opened."""
        try:
            for p in (self.path, self.failures_path):
                if p.exists() and (moved := _quarantine_tail(p)):
                    self.repaired_bytes += moved
                    self.quarantined.append(quarantine_path(p))
            self._fail_fh: IO[bytes] = self.failures_path.open("ab", buffering=0)
        except BaseException:
            self._fh.close()
            raise
        self._fsync_every_s = fsync_every_s
        self._last_sync = time.monotonic()
        self.written = 0
        self.failed = 0
        self.error: StoreWriteError | None = None
        """The first write error; later writes are refused with it."""

    def _append(self, fh: IO[bytes], line: bytes) -> None:
        """Write the whole line or nothing: a partial write is cut back before the error is raised."""
        if self.error is not None:
            raise self.error
        fd = fh.fileno()
        view = memoryview(line)
        done = 0
        try:
            while done < len(line):
                done += os.write(fd, view[done:])
        except OSError as exc:
            with contextlib.suppress(
                OSError
            ):  # O_APPEND under our lock: the partial line is the file's last `done` bytes
                os.ftruncate(fd, os.fstat(fd).st_size - done)
            stored = (
                f"the {self.written} trajectories and {self.failed} failures written by this run are intact"
            )
            self.error = StoreWriteError(
                f"cannot write to {Path(fh.name)} ({exc.strerror or exc}); {stored} — "
                "free space (or fix the directory) and run the same command again to resume"
            )
            raise self.error from None

    def write(self, traj: Trajectory) -> None:
        """Append one finished trajectory; errored episodes go to the failures file. Raises
        :class:`StoreWriteError` (and writes nothing more) when the append fails."""
        line = encode_record(traj)
        if self.scrub is not None:
            line = self.scrub(line)
        self._append(self._fail_fh if traj.status is Status.ERROR else self._fh, line)
        if traj.status is Status.ERROR:
            self.failed += 1
        else:
            self.written += 1
        now = time.monotonic()
        if now - self._last_sync >= self._fsync_every_s:
            self.sync()
            self._last_sync = now

    def sync(self) -> None:
        for fh in (self._fh, self._fail_fh):
            os.fsync(fh.fileno())

    def close(self) -> None:
        if not self._fh.closed:
            try:
                self.sync()
            except OSError:
                if self.error is None:
                    raise
            finally:
                self._fh.close()
                self._fail_fh.close()

    def __enter__(self) -> TrajectoryWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def completed_ids(root: str | Path) -> set[str]:
    """Ids of the trajectories already stored (failures excluded: they are retried on resume).

    Fast: each line is framed-checked (``{`` … ``}`` and a newline) and its id found with a regex;
    the last line of each file, the one a crash can tear, is parsed in full."""
    done: set[str] = set()
    search = _ID_RE.search
    for path in data_files(Path(root)):
        tid: str | None = None
        fresh = False
        last = b""
        with path.open("rb") as fh:
            for line in fh:
                if line.startswith(b"{") and line.endswith(b"}\n") and (m := search(line, 0, 400)):
                    tid = m.group(1).decode()
                    fresh = tid not in done
                    done.add(tid)
                else:
                    tid = None
                last = line
        if tid is not None and fresh and _record_problem(last) is not None:
            done.discard(tid)  # a torn last line that happens to end in "}": not stored
    return done


@dataclass
class BadLine:
    """A line a reader skipped: where it is and why it could not be read."""

    path: Path
    lineno: int
    reason: str

    def __str__(self) -> str:
        return f"{self.path}:{self.lineno}: {self.reason}"


@dataclass
class ReadReport:
    """What the readers skipped while streaming a dataset."""

    bad: list[BadLine] = field(default_factory=list)
    """Unreadable lines (torn, not JSON, not a valid trajectory), in reading order."""
    duplicates: int = 0
    """Lines whose trajectory id an earlier line already had (the first one is kept)."""
    conflicts: int = 0
    """Of ``duplicates``, the ids whose later line differs from the kept one: not a copy of the same
    record but two different trajectories under one id (counted once per id)."""

    def summary(self, *, limit: int = 5) -> str:
        """One line for stderr, or "" when nothing was unreadable and no id repeated with other content."""
        parts = []
        if self.bad:
            n = len(self.bad)
            where = "; ".join(str(b) for b in self.bad[:limit]) + ("; …" if n > limit else "")
            parts.append(f"skipped {n} unreadable line{'s' if n != 1 else ''} ({where}); the rest was read")
        if self.conflicts:
            parts.append(_conflict_message(self.conflicts))
        return "; ".join(parts)


def _conflict_message(n: int) -> str:
    return (
        f"{n} trajectory id{'s' if n != 1 else ''} appear{'' if n != 1 else 's'} again with different content; the first "
        "line of each was kept and the others dropped (datasets of different runs pooled, or one written twice?)"
    )


def _dataset_files(root: Path, include_failures: bool) -> list[Path]:
    """The files to read for ``root``: a dataset directory's data files, or one ``.jsonl`` file."""
    if not root.exists():
        raise ConfigError(f"{root} does not exist; give the directory a `toolgym collect --out` wrote")
    if root.is_file():
        if root.suffix == ".jsonl":
            return [root]
        raise ConfigError(
            f"{root} is not a dataset; give the directory a `toolgym collect --out` wrote "
            "(or one of its .jsonl files, or a .parquet export)"
        )
    files = data_files(root)
    failures = sorted(root.glob("failures*.jsonl"))
    if not files and not failures and not (root / MANIFEST).exists():
        raise ConfigError(
            f"{root} holds no dataset (no {MANIFEST} or {MAIN}*.jsonl); give the directory a `toolgym collect --out` wrote"
        )
    return files + failures if include_failures else files


def _iter_records(
    root: str | Path, include_failures: bool, report: ReadReport | None
) -> Iterator[tuple[Path, int, dict[str, Any]]]:
    root = Path(root)
    seen: dict[str, bytes] = {}  # id -> digest of its kept line
    conflicted: set[str] = set()
    for path in _dataset_files(root, include_failures):
        with path.open("rb") as fh:
            for lineno, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                obj, problem = _parse_record(line)
                if obj is None:
                    _skip(report, BadLine(path, lineno, str(problem)))
                    continue
                tid = obj["trajectory_id"]
                key = hashlib.blake2b(line.rstrip(b"\r\n"), digest_size=16).digest()
                if tid in seen:
                    if report is not None:
                        report.duplicates += 1
                    if seen[tid] != key and tid not in conflicted:
                        conflicted.add(tid)
                        if report is not None:
                            report.conflicts += 1
                    continue
                seen[tid] = key
                yield path, lineno, obj
    if conflicted and report is None:  # with a report, its reader says so (the CLI: ``warn_skipped``)
        _log.warning("%s", _conflict_message(len(conflicted)))


def _skip(report: ReadReport | None, bad: BadLine) -> None:
    if report is None:
        _log.warning("skipped %s", bad)
    elif bad not in report.bad:  # a reader that streams the dataset twice reports a line once
        report.bad.append(bad)


def iter_raw(
    root: str | Path, *, include_failures: bool = False, report: ReadReport | None = None
) -> Iterator[dict[str, Any]]:
    """Stream stored trajectories as dicts, skipping duplicates of an id already seen and lines
    that cannot be read (counted in ``report``). ``root``: a dataset directory or one .jsonl file."""
    for _, _, obj in _iter_records(root, include_failures, report):
        yield obj


def iter_trajectories(
    root: str | Path, *, include_failures: bool = False, report: ReadReport | None = None
) -> Iterator[Trajectory]:
    """Stream stored trajectories as validated ``Trajectory`` objects; records that do not fit the
    schema are skipped and counted in ``report`` like unreadable lines."""
    for path, lineno, obj in _iter_records(root, include_failures, report):
        try:
            yield Trajectory.model_validate(obj)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first.get("loc", ())) or "record"
            _skip(report, BadLine(path, lineno, f"not a valid trajectory ({where}: {first.get('msg')})"))


def find_trajectory(root: str | Path, trajectory_id: str, *, report: ReadReport | None = None) -> Trajectory:
    """One stored trajectory by id (or unique id prefix)."""
    matches = [
        t
        for t in iter_raw(root, include_failures=True, report=report)
        if str(t.get("trajectory_id", "")).startswith(trajectory_id)
    ]
    if not matches:
        raise ConfigError(f"no trajectory with id {trajectory_id!r} in {root}")
    if len(matches) > 1:
        raise ConfigError(
            f"id prefix {trajectory_id!r} matches {len(matches)} trajectories; give more characters"
        )
    try:
        return Trajectory.model_validate(matches[0])
    except ValidationError as exc:
        raise ConfigError(
            f"trajectory {matches[0]['trajectory_id']!r} in {root} is not a valid trajectory ({exc.errors()[0].get('msg')})"
        ) from None


def shard_manifest_name(shard: int) -> str:
    """The file name of shard ``shard``'s manifest."""
    return f"manifest-{shard:05d}.json"


def write_manifest(root: str | Path, manifest: dict[str, Any], *, shard: int | None = None) -> None:
    """Write ``manifest.json`` (or shard ``shard``'s manifest) atomically; safe when several
    processes write at once (each writes its own temporary file, then renames it over)."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    name = MANIFEST if shard is None else shard_manifest_name(shard)
    tmp = root / f".{name}.{os.getpid()}.{time.monotonic_ns()}.tmp"
    try:
        tmp.write_text(json.dumps(manifest, indent=2, sort_keys=True, default=str))
        os.replace(tmp, root / name)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise StoreWriteError(
            f"cannot write {root / name} ({exc.strerror or exc}); the previous one is unchanged — "
            "free space (or fix the directory) and run the same command again"
        ) from None


def read_manifest(root: str | Path, *, shard: int | None = None) -> dict[str, Any] | None:
    """``manifest.json`` (or shard ``shard``'s manifest) as a dict; None when absent."""
    path = Path(root) / (MANIFEST if shard is None else shard_manifest_name(shard))
    if not path.exists():
        return None
    return json.loads(path.read_text())


def dataset_manifest(root: str | Path) -> dict[str, Any]:
    """The run's manifest with its shards merged in: ``shards`` maps shard index → that shard's
    manifest, ``written`` and ``failed`` are summed over shards, and ``state`` is ``complete``
    only when every one of ``num_shards`` shards says so, or when an unsharded run into the same
    directory completed after the last shard started (``running`` or ``incomplete`` otherwise).
    Unsharded runs are returned as stored. An empty dict when the directory has no manifest."""
    root = Path(root)
    manifest = read_manifest(root) or {}
    shards: dict[int, dict[str, Any]] = {}
    for path in sorted(root.glob("manifest-*.json")):
        try:
            shards[int(path.stem.split("-", 1)[1])] = json.loads(path.read_text())
        except (ValueError, json.JSONDecodeError):
            continue
    if not shards:
        return manifest
    merged = {**manifest, "shards": {str(k): v for k, v in sorted(shards.items())}}
    merged["written"] = int(manifest.get("written", 0)) + sum(
        int(s.get("written", 0)) for s in shards.values()
    )
    merged["failed"] = int(manifest.get("failed", 0)) + sum(int(s.get("failed", 0)) for s in shards.values())
    expected = int(manifest.get("num_shards") or max(int(s.get("num_shards", 1)) for s in shards.values()))
    states = [str(s.get("state", "")) for s in shards.values()]
    last_start = max(float(s.get("started_at", 0.0)) for s in shards.values())
    if (
        str(manifest.get("state", "")).startswith("complete")
        and float(manifest.get("finished_at", 0.0)) >= last_start
    ):
        merged["state"] = manifest["state"]  # an unsharded run finished everything after the shards
    elif len(shards) >= expected and all(st.startswith("complete") for st in states):
        merged["state"] = "complete" if all(st == "complete" for st in states) else "complete_with_failures"
    else:
        merged["state"] = "running" if "running" in states else "incomplete"
    return merged


def write_all(root: str | Path, trajectories: Iterable[Trajectory]) -> int:
    """Write trajectories to a dataset directory (helper for tests and exports)."""
    n = 0
    with TrajectoryWriter(root) as w:
        for t in trajectories:
            w.write(t)
            n += 1
    return n
