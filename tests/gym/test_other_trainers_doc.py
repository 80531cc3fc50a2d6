"""Every example in docs/other-trainers.md runs as written and prints what its comments say."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

from tests.required import OPENENV_HINT, need_module

DOC = Path(__file__).resolve().parents[2] / "docs" / "other-trainers.md"


def example(name: str) -> str:
    found = dict(re.findall(r"<!-- example: (\w+) -->\n```python\n(.*?)```", DOC.read_text(), re.DOTALL))
    return found[name]


def run(source: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(source, str(DOC), "exec"), {"__name__": "doc_example"})
    return out.getvalue()


def test_the_gymnasium_example() -> None:
    printed = run(example("gymnasium"))
    assert printed.startswith("train-7 ['get']") and printed.rstrip().endswith("reward 1.0"), printed
    assert "get({'key':" in printed


def test_the_openenv_example() -> None:
    for module in ("openenv.core", "websockets"):  # the server, and the client the example makes
        need_module(module, hint=OPENENV_HINT)
    from toolgym.core.util.http_server import BackgroundServer
    from toolgym.gym.openenv import make_app

    source = example("openenv")
    assert '"http://127.0.0.1:8000"' in source, (
        "the example names the port `toolgym serve-env --port 8000` uses"
    )
    with BackgroundServer(make_app("keychain", sandbox_backend="none")) as server:
        printed = run(source.replace('"http://127.0.0.1:8000"', repr(server.url)))
    assert printed.strip() == "reward 1.0"
