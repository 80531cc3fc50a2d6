"""When a collection must stop before its end, and the checks that run before it starts.

:class:`RunGuard` sits between the rollout engine and the store (it is the engine's
``on_trajectory``). It stops the run (by cancelling the collecting task, so no further episode
starts and the ones in flight release their sandboxes):

- at the first write error (a full disk): nothing more is stored, what was stored stays intact,
  and the episodes not stored run again on resume;
- when the first ``fail_fast`` episodes of the run all failed with the same error: a wrong option
  (an environment argument, a sandbox backend, a server address) fails every episode alike, and
  running thousands of them only hides the reason in ``failures.jsonl``.

Failures mixed with successes, or with different errors, never stop a run.

The ``check_*`` functions turn the most common wrong options into one-sentence errors before any
episode starts.
"""

from __future__ import annotations

import errno
import inspect
import os
import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from toolgym.core.errors import ConfigError, UnknownNameError
from toolgym.core.registry import Registry
from toolgym.core.trajectory import Status, Trajectory
from toolgym.trajectories.store import StoreWriteError

_VOLATILE = re.compile(r"0x[0-9a-f]+|\d+")


def failure_kind(reason: str | None) -> str:
    """An error reason with its numbers (ids, ports, counts, addresses) blanked, so that the same
    error met by different episodes compares equal."""
    return _VOLATILE.sub("#", reason or "unknown error")


class RunGuard:
    """Stores trajectories through ``write`` and calls ``stop`` once when the run must end early;
    ``reason`` then says why (one sentence for the user)."""

    def __init__(
        self,
        write: Callable[[Trajectory], Any],
        *,
        fail_fast: int,
        stop: Callable[[], Any],
        failures_file: str = "failures.jsonl",
        scrub: Callable[[str], str] = str,
    ) -> None:
        """``scrub`` blanks secrets in the error reasons the guard repeats to the user."""
        self.write = write
        self.scrub = scrub
        self.fail_fast = fail_fast
        self.stop = stop
        self.failures_file = failures_file
        self.finished = 0
        self.succeeded = 0
        self.kinds: Counter[str] = Counter()
        self.examples: dict[str, str] = {}
        self.reason: str | None = None
        self.write_error: StoreWriteError | None = None

    def __call__(self, traj: Trajectory) -> None:
        if self.write_error is not None:
            return  # stopping after a write error: the episode is not stored and runs again on resume
        try:
            self.write(traj)
        except StoreWriteError as exc:
            self.write_error = exc
            self._halt(str(exc))
            return
        except Exception as exc:  # a record that cannot be encoded: stop as cleanly as for a full disk
            self.write_error = StoreWriteError(
                f"could not store trajectory {traj.trajectory_id} ({type(exc).__name__}: {exc}); what was stored before is "
                "intact — please report this as a bug, then run the same command again to resume"
            )
            self._halt(str(self.write_error))
            return
        self.finished += 1
        if traj.status is not Status.ERROR:
            self.succeeded += 1
            return
        kind = failure_kind(traj.status_reason)
        self.kinds[kind] += 1
        self.examples.setdefault(kind, self.scrub(traj.status_reason or "unknown error"))
        if (
            self.reason is None
            and self.fail_fast
            and self.finished == self.fail_fast
            and self.kinds[kind] == self.finished
        ):
            self._halt(
                f"collection stopped: the first {self.finished} episodes all failed with the same error: "
                f"{self.examples[kind]} — fix its cause and run the same command again "
                f"(each failure and its reason are in {self.failures_file})"
            )

    def _halt(self, reason: str) -> None:
        first = self.reason is None
        self.reason = reason if first or self.write_error is not None else self.reason
        if first:
            self.stop()

    def all_failed(self) -> str | None:
        """After a run that went to its end: one sentence when every episode failed, else None."""
        if self.finished == 0 or self.succeeded:
            return None
        kind, count = self.kinds.most_common(1)[0]
        which = (
            "all with the same error"
            if count == self.finished
            else f"the most frequent error ({count} of them)"
        )
        return (
            f"all {self.finished} episodes failed, {which}: {self.examples[kind]} — "
            f"fix its cause and run the same command again (reasons in {self.failures_file})"
        )


def check_out_dir(out: Path) -> None:
    """``--out`` must be a directory, or a path where one can be created and written."""
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out} is a file; give a directory (it is created when missing)")
    ancestor = out
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise ConfigError(f"--out {out} is below {ancestor}, which is a file; give a directory")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        why = os.strerror(errno.EROFS) if _read_only(ancestor) else "permission denied"
        raise ConfigError(
            f"--out {out}: cannot write in {ancestor} ({why}); give a directory you can write to"
        )


def _read_only(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def check_env_kwargs(registry: Registry, env: str, kwargs: dict[str, Any]) -> None:
    """Every ``--env-arg`` key must be a parameter of the environment's constructor (when its
    signature can be read and takes no ``**kwargs``)."""
    if not kwargs:
        return
    spec = registry.env(env)
    factory = spec.entry
    try:
        if isinstance(factory, str):
            from toolgym.core.env.spec import load_object

            factory = load_object(factory)
        params = inspect.signature(factory).parameters  # type: ignore[arg-type]
    except (TypeError, ValueError, ImportError, AttributeError, ConfigError):
        return  # the episode will say what is wrong
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    names = [
        n
        for n, p in params.items()
        if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    ]
    for key in kwargs:
        if key not in names:
            raise ConfigError(
                f"--env-arg {key}: environment {env!r} takes no argument {key!r} "
                f"(it takes: {', '.join(names) or 'none'}); fix the spelling or drop it"
            )


def check_sandbox_backend(registry: Registry, name: str) -> None:
    """``--sandbox-backend`` is ``auto``, ``none`` or a registered backend."""
    if name in ("auto", "none"):
        return
    try:
        registry.sandbox_backend(name)
    except UnknownNameError:
        known = ", ".join(["auto", "none", *sorted(registry.sandbox_backends)])
        raise ConfigError(
            f"--sandbox-backend {name!r} is not a sandbox backend (known: {known}); check the spelling or install its plugin"
        ) from None


UNSAFE_FLAG = "--unsafe-in-process-sandbox (unsafe_in_process_sandbox=True in CollectOptions)"


def model_driven(opts: Any, policy: Any = None) -> bool:
    """Whether a model writes the run's actions: every policy but the environment's scripted
    solver (``--model scripted``, or ``sim`` replaying it)."""
    from toolgym.core.rollout.policy import ScriptedPolicy

    if policy is not None:
        return not isinstance(policy, ScriptedPolicy)
    model = str(opts.model)
    simulated_script = (model == "sim" or model.startswith("sim:")) and opts.backend_options.get(
        "replay"
    ) == "scripted"
    return not (model == "scripted" or simulated_script)


def check_sandbox_isolation(registry: Registry, opts: Any, policy: Any = None) -> None:
    """A model-driven collection refuses a sandbox backend that isolates nothing (``memory``)
    unless ``opts.unsafe_in_process_sandbox``: the model's code would run inside this process, where
    it reads the orchestrator's environment (API keys) and writes the host's files. The scripted
    solver's actions are the environment's own code, so scripted runs may use it."""
    from toolgym.core.sandbox import require_isolation

    if model_driven(opts, policy) and not opts.unsafe_in_process_sandbox:
        require_isolation(registry, opts.sandbox_backend, allow=UNSAFE_FLAG)


def apply_scripted_defaults(registry: Registry, opts: Any) -> None:
    """A run the environment's scripted solver plays takes the environment's ``scripted_kwargs``
    for the options the user did not give (MiniWoB++: ``tasks=solvable``), in ``opts.env_kwargs``."""
    defaults = registry.env(opts.env).scripted_kwargs
    if defaults and not model_driven(opts):
        opts.env_kwargs = {
            **opts.env_kwargs,
            **{k: v for k, v in defaults.items() if k not in opts.env_kwargs},
        }


def check_scripted_solver(registry: Registry, opts: Any) -> None:
    """Before anything starts, a scripted run refuses task instances its solver cannot play
    (``Env.unscripted_task``), naming the first and the fix, instead of failing each episode."""
    if model_driven(opts):
        return
    from toolgym.core.env.contract import Env
    from toolgym.core.env.spec import load_object

    spec = registry.env(opts.env)
    factory = load_object(spec.entry) if isinstance(spec.entry, str) else spec.entry
    if (
        isinstance(factory, type)
        and issubclass(factory, Env)
        and factory.unscripted_task is Env.unscripted_task
    ):
        return  # cannot tell: not worth making an instance (some load data sets)
    seeds = [opts.engine.seed + i for i in range(opts.first_task, opts.first_task + opts.episodes)]
    task = spec.make(**opts.env_kwargs).unscripted_task(seeds)
    if task is None:
        return
    fix = " ".join(f"--env-arg {k}={v}" for k, v in spec.scripted_kwargs.items())
    hint = f"add {fix} or choose other tasks" if fix else "choose other tasks"
    raise ConfigError(
        f"--model scripted: task {task!r} of environment {opts.env!r} has no scripted solver; {hint}, or use a model"
    )
