"""The sandbox contract that tools and environments program against.

Implementations (Docker, local bubblewrap, remote) live in ``toolgym.sandboxes`` and register
through the ``toolgym_sandbox_backends`` hook; ``core`` only knows these protocols.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from .types import ExecResult

ACQUIRE_TIMEOUT_S = 180.0
"""Default wait for a sandbox (a free slot, then a ready sandbox from the backend), in seconds:
``EngineConfig.sandbox_acquire_timeout_s`` and ``EpisodeContext``'s ``acquire_timeout_s``."""


@dataclass(slots=True)
class PythonResult:
    """One ``PythonSession.execute`` call: printed output, the trailing expression's value, errors."""

    stdout: str = ""
    stderr: str = ""
    value: str | None = None
    """``repr`` of the trailing expression, as a REPL would echo it; None if there is none."""
    error: str | None = None
    """``ExcType: message`` when the code raised; the traceback is in ``traceback``."""
    traceback: str | None = None
    timed_out: bool = False
    restarted: bool = False
    """True when the session had to be restarted: every earlier variable is gone."""
    truncated: bool = False
    duration_s: float = 0.0

    @property
    def output(self) -> str:
        """What a model reads: printed text, then the value, then the error."""
        parts = [p for p in (self.stdout, self.stderr) if p]
        if self.value is not None:
            parts.append(self.value)
        if self.traceback:
            parts.append(self.traceback)
        elif self.error:
            parts.append(self.error)
        if self.timed_out:
            parts.append("[timed out]")
        if self.restarted:
            parts.append("[session restarted: earlier state is lost]")
        return "\n".join(p.rstrip("\n") for p in parts)


@runtime_checkable
class PythonSession(Protocol):
    """A Python interpreter whose state lasts across ``execute`` calls within an episode."""

    async def execute(self, code: str, *, timeout: float | None = None) -> PythonResult: ...

    async def restart(self) -> None: ...


@runtime_checkable
class ShellSession(Protocol):
    """A shell whose working directory and environment variables persist between commands.

    The exit code of each ``run`` comes from the process itself, not from scraping a prompt.
    """

    async def run(self, command: str, *, timeout: float | None = None) -> ExecResult: ...


@runtime_checkable
class Sandbox(Protocol):
    """One isolated place to run code, held by one episode at a time."""

    id: str
    kind: str
    """The image or recipe the sandbox came from (``python``, ``shell``, ``sql``, ``browser``)."""

    async def run(
        self,
        cmd: Sequence[str] | str,
        *,
        timeout: float | None = None,
        stdin: str | bytes | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        max_output: int | None = None,
    ) -> ExecResult:
        """Run a command (argv list, or a string for ``sh -c``) in its own process group.

        ``max_output`` caps each of stdout and stderr (bytes, head and tail kept, ``truncated`` set);
        None: the sandbox profile's cap."""
        ...

    async def write_file(
        self, path: str, data: str | bytes, *, mode: int = 0o644, append: bool = False
    ) -> None:
        """Write inside the work directory (``append``: add to the end of the file); paths that
        leave it raise ``PathOutsideSandboxError``."""
        ...

    async def read_file(self, path: str, *, max_bytes: int | None = None) -> bytes:
        """The bytes of a file inside the work directory: at most ``max_bytes`` (None: the
        sandbox's own limit), a larger file raises ``SandboxError`` rather than being read."""
        ...

    async def python(self) -> PythonSession:
        """The sandbox's persistent Python session (started on first use)."""
        ...

    async def shell(self) -> ShellSession:
        """The sandbox's persistent shell session (started on first use)."""
        ...


GROUP_LABEL = "toolgym.group"
"""The label an episode's ``acquire`` carries its group id in (``Trajectory.group_id``: one task,
seed and group). A pooled backend never hands a sandbox to an episode of a group it has already
served: kernel counters that survive a reset (loopback bytes, inode numbers, the PID counter)
could otherwise carry one sample's answer to a sibling (``toolgym/sandboxes/README.md``)."""


@runtime_checkable
class SandboxBackend(Protocol):
    """Creates, pools and destroys sandboxes."""

    name: str

    async def acquire(
        self, kind: str, *, episode_id: str = "", labels: Mapping[str, str] | None = None
    ) -> Sandbox:
        """A ready sandbox of ``kind`` (from the warm pool when one is free)."""
        ...

    async def release(self, sandbox: Sandbox, *, broken: bool = False) -> None:
        """Give a sandbox back: reset it for reuse, or destroy it when broken or poisoned."""
        ...

    async def aclose(self) -> None:
        """Destroy every sandbox this backend created."""
        ...


@dataclass(frozen=True, slots=True)
class ImageNeed:
    """A container image that episodes will run in, named before they start so that the backend can
    warm it (see ``Env.sandbox_images``)."""

    image: str
    """Docker image reference, as a sandbox profile names it."""
    build_hint: str = ""
    """The command that makes the image where it cannot be pulled (quoted when it is missing)."""
    label: str = ""
    """What needs it, for messages (an instance id)."""


@dataclass(slots=True)
class SandboxBackendSpec:
    """How a plugin offers a sandbox backend."""

    name: str
    factory: Callable[..., SandboxBackend]
    """Called with keyword options (pool size, limits); returns a backend."""
    available: Callable[[], bool] = lambda: True
    """Cheap check that the backend can work on this host (engine answers, binary present)."""
    priority: int = 0
    """Higher wins when the user names no backend and several are available."""
    description: str = ""
    options: dict[str, Any] = field(default_factory=dict)
    isolates: bool = True
    """Whether the code a sandbox runs is kept away from this process (its memory, environment
    variables such as API keys, the host's files). False for in-process test doubles (``memory``):
    ``auto`` never picks one, and model-driven runs refuse one unless told otherwise
    (:func:`require_isolation`)."""


AUTO = "auto"
"""The backend name that picks for the user: the available isolating backend of highest priority."""
NONE = "none"
"""The backend name of runs whose tools need no sandbox: nothing is opened."""


def sandbox_backend_spec(registry: Any, name: str | None = None) -> SandboxBackendSpec | None:
    """The one rule that turns a backend name into a backend, used by every command and trainer:
    ``none`` → None (no sandboxes); ``None`` or ``auto`` → the available *isolating* backend of highest
    priority (a configured multi-host pool, then Docker when an engine answers, then bubblewrap; an
    in-process double is never picked); any other name → that backend, whether or not it isolates
    (callers that run model-written code check :func:`require_isolation`)."""
    from .errors import ConfigError

    if name == NONE:
        return None
    if name and name != AUTO:
        return registry.sandbox_backend(name)  # type: ignore[no-any-return]
    for spec in sorted(registry.sandbox_backends.values(), key=lambda s: -s.priority):
        if spec.isolates and spec.available():
            return spec  # type: ignore[no-any-return]
    raise ConfigError(
        "no sandbox backend works on this host: start Docker (scripts/ensure-docker.sh) or install "
        "bubblewrap; `toolgym sandbox doctor` says more"
    )


def open_sandbox_backend(registry: Any, name: str | None = None, **options: Any) -> SandboxBackend:
    """The sandbox backend ``name`` picks (:func:`sandbox_backend_spec`), opened with ``options``."""
    from .errors import ConfigError

    spec = sandbox_backend_spec(registry, name)
    if spec is None:
        raise ConfigError("sandbox backend 'none' opens no sandboxes; name a backend (docker, local) or auto")
    return spec.factory(**options)


def lazy_sandbox_backend(registry: Any, name: str | None = None, **options: Any) -> LazySandboxBackend | None:
    """A :class:`LazySandboxBackend` for ``name``, or None for ``none`` (a run without sandboxes)."""
    return None if name == NONE else LazySandboxBackend(registry, name or AUTO, **options)


def require_isolation(registry: Any, name: str | None, *, allow: str) -> None:
    """Refuse the sandbox backend ``name`` for a run whose tool calls a model writes when it does
    not isolate (``SandboxBackendSpec.isolates``): the model's code would run inside this process.
    ``allow``: how the user says they accept that (a flag, a setting), quoted in the error.
    Unknown names and ``auto``/``none`` pass (``auto`` never picks such a backend)."""
    from .errors import ConfigError

    spec = registry.sandbox_backends.get(name) if name not in (None, "auto", "none") else None
    if spec is not None and not spec.isolates:
        raise ConfigError(
            f"sandbox backend {name!r} runs the model's tool calls inside this process with no isolation (its code could "
            f"read your API keys and write your files); use docker or local, or pass {allow} if you accept that"
        )


class LazySandboxBackend:
    """A sandbox backend opened on the first ``acquire``: runs that never need a sandbox never
    start Docker. ``registry`` is a plugin registry or a function returning one."""

    name = "lazy"

    def __init__(self, registry: Any, choice: str = "auto", **options: Any) -> None:
        import asyncio

        self._registry = registry
        self._choice = choice
        self._options = options
        self._backend: Any = None
        self._lock = asyncio.Lock()

    async def _get(self) -> Any:
        async with self._lock:
            if self._backend is None:
                registry = self._registry() if callable(self._registry) else self._registry
                self._backend = open_sandbox_backend(registry, self._choice, **self._options)
            return self._backend

    async def acquire(self, kind: str, **kwargs: Any) -> Any:
        return await (await self._get()).acquire(kind, **kwargs)

    async def release(self, sandbox: Any, **kwargs: Any) -> None:
        await (await self._get()).release(sandbox, **kwargs)

    async def warm_images(self, needs: Sequence[ImageNeed], **kwargs: Any) -> None:
        """Forwarded to the backend when it warms images (the Docker backend does)."""
        backend = await self._get()
        if hasattr(backend, "warm_images"):
            await backend.warm_images(needs, **kwargs)

    async def aclose(self) -> None:
        if self._backend is not None:
            await self._backend.aclose()
