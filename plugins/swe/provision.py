"""pytest for sandboxes that lack it.

The shipped tasks are tested with ``python3 -m pytest``. The ``shell`` image has pytest; a local
(bubblewrap) sandbox sees the host's ``/usr``, which may not. There, the pytest this process runs
with (pure Python: pytest, pluggy, iniconfig, packaging, pygments) is copied into the sandbox as
one zip file on ``PYTHONPATH`` (sources and bytecode of what pytest imports, about 1.5 MB, built once per process). The sandbox's Python must
be one that pytest version supports.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import io
import marshal
import zipfile

from toolgym import Sandbox, SandboxError

PYTEST_ZIP = "/tmp/.toolgym/pytest.zip"
DISTRIBUTIONS = ("pytest", "pluggy", "iniconfig", "packaging", "pygments")
PYGMENTS_PARTS = {
    "lexers": {"__init__", "_mapping", "python", "diff"},
    "formatters": {"__init__", "_mapping", "terminal"},
    "styles": {"__init__", "_mapping", "default"},
}
"""Of pygments' lexers, formatters and styles, what pytest's terminal writer imports."""
CHECK = (
    "python3 -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec(\"pytest\") is None)' "
    ">/dev/null 2>&1 && echo has-pytest || echo no-pytest"
)
"""Finds pytest without importing it (a few milliseconds instead of a few hundred)."""
_needs: dict[str, bool] = {}
"""Sandbox id → whether its own Python lacks pytest (fixed for a sandbox's life; its /tmp is not)."""


@functools.cache
def pytest_zip() -> bytes:
    """The Python files of pytest and its dependencies, as installed here, in one zip."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name in DISTRIBUTIONS:
            try:
                dist = importlib.metadata.distribution(name)
            except importlib.metadata.PackageNotFoundError:
                raise SandboxError(
                    f"cannot give the sandbox pytest: {name} is not installed here (pip install pytest)"
                ) from None
            for file in dist.files or ():
                path = str(file)
                if not path.endswith(".py") or ".dist-info" in path or ".." in path or "__pycache__" in path:
                    continue
                parts = path[:-3].split("/")
                if (
                    parts[0] == "pygments"
                    and len(parts) == 3
                    and parts[2] not in PYGMENTS_PARTS.get(parts[1], {parts[2]})
                ):
                    continue
                source = file.read_binary()
                zf.writestr(path, source)
                zf.writestr(path[:-3] + ".pyc", _pyc(source, f"{PYTEST_ZIP}/{path}"))
    return buf.getvalue()


def _pyc(source: bytes, filename: str) -> bytes:
    """Bytecode in the unchecked-hash ``.pyc`` format, which zipimport loads without a source
    check (a sandbox Python of another version ignores it and compiles the source)."""
    code = compile(source, filename, "exec", dont_inherit=True)
    flags = (1).to_bytes(4, "little")  # hash-based, not checked against the source
    return importlib.util.MAGIC_NUMBER + flags + importlib.util.source_hash(source) + marshal.dumps(code)


async def needs_pytest(sb: Sandbox) -> bool:
    """Whether the sandbox's ``python3`` lacks pytest (then ``install_pytest`` after every reset)."""
    if sb.id not in _needs:
        result = await sb.run(["bash", "-c", CHECK], timeout=60)
        _needs[sb.id] = "no-pytest" in result.stdout
    return _needs[sb.id]


async def install_pytest(sb: Sandbox) -> None:
    """Put the zip at ``PYTEST_ZIP`` (commands then need ``test_env()``)."""
    result = await sb.run(
        ["bash", "-c", f"mkdir -p /tmp/.toolgym && cat > {PYTEST_ZIP} && {CHECK}"],
        stdin=pytest_zip(),
        timeout=60,
        env=test_env(),
    )
    if "has-pytest" not in result.stdout:
        raise SandboxError(
            f"pytest does not import in sandbox {sb.id} even from {PYTEST_ZIP}: {result.output[-1000:]}"
        )


def test_env(shipped: bool = True) -> dict[str, str]:
    """Environment of a shipped task's test commands: the zip on ``PYTHONPATH`` (harmless where it
    is absent). Image tasks keep the image's own environment."""
    return {"PYTHONPATH": PYTEST_ZIP} if shipped else {}


test_env.__test__ = False  # type: ignore[attr-defined]
