"""Fixtures shared by the whole suite: the tiny tokenizers (built once, cached on disk).

Also keeps the repository root off ``sys.path`` while tests run. The root's folders install as
``toolgym.core``, ``toolgym.plugins``, …; from the root, ``import core`` would load a second copy
whose classes are not toolgym's (``core.errors.ConfigError`` is not ``toolgym.core.errors.ConfigError``).
pytest puts the root on ``sys.path`` to import ``tests.*`` modules (when collecting, and when setting up
each test's packages), so it is taken off here and again as each test starts; ``tests`` stays
importable through its package path.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

from toolgym.core.tokens.chat import ChatFormat

REPO = Path(__file__).resolve().parent.parent


def drop_repository_root() -> None:
    """Take every ``sys.path`` entry that names the repository root (``""`` too, from the root) off it."""
    sys.path[:] = [p for p in sys.path if os.path.realpath(p or os.curdir) != str(REPO)]


drop_repository_root()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item: pytest.Item) -> None:
    drop_repository_root()  # setting up the test's packages imported their __init__ with the root put back


@pytest.fixture(scope="session")
def qwen_tokenizer() -> Any:
    from toolgym.core.llm.local.tiny import load_tiny_tokenizer

    return load_tiny_tokenizer("qwen")


@pytest.fixture(scope="session")
def llama_tokenizer() -> Any:
    from toolgym.core.llm.local.tiny import load_tiny_tokenizer

    return load_tiny_tokenizer("llama")


@pytest.fixture(scope="session")
def qwen_chat(qwen_tokenizer: Any) -> ChatFormat:
    return ChatFormat(qwen_tokenizer)


@pytest.fixture(scope="session")
def llama_chat(llama_tokenizer: Any) -> ChatFormat:
    return ChatFormat(llama_tokenizer)


SERIAL = {
    "serial-ray-dockerd": (
        "tests/distributed/",
        "tests/sandboxes/test_egress.py",
        "tests/training/verl/test_cpu_fit.py",
        "tests/bench/test_verl_vs_local_smoke.py",
    ),
    "serial-vllm": ("vllm", "tests/training/local/test_local_swe_smoke.py"),
}
"""Test files that run one after another on one worker under ``pytest -n`` (pytest-xdist), in groups
that may run beside each other: the Ray clusters and the extra dockerds (one of each at a time), and
the vLLM servers (a fleet of three at once) with the test that counts the sandbox containers Docker
creates while it runs. Two groups rather than one, so that two workers can share them; they start
before every other file."""


def serial_group(path: str) -> str | None:
    return next((group for group, parts in SERIAL.items() if any(p in path for p in parts)), None)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Whole test files go to the workers (their module fixtures start once), except ``SERIAL``'s
    files, which form one unit per group (xdist's own ``loadgroup`` marks are ignored under pytest 9)."""
    from xdist.scheduler import LoadScopeScheduling

    class FileScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return serial_group(path) or path

        def _assign_work_unit(self, node: Any) -> None:
            # the serial groups are the longest units: start them first (longest first), not
            # wherever their test count places them
            for group in reversed(SERIAL):
                if group in self.workqueue:
                    self.workqueue.move_to_end(group, last=False)
            super()._assign_work_unit(node)

    return FileScheduling(config, log)


_passed = 0


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    global _passed
    if report.when == "call" and report.passed:
        _passed += 1


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """A run in which no test passed must not look green (everything skipped, or deselected)."""
    if exitstatus == 0 and _passed == 0 and not session.config.getoption("collectonly"):
        session.exitstatus = 1
