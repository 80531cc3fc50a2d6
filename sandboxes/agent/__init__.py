"""The in-sandbox agent: stdlib-only scripts mounted read-only into every sandbox.

The files of this folder other than this one run *inside* sandboxes, as sibling scripts
(``main.py`` imports ``protocol``, ``procs``, ...); the host imports only ``protocol`` from here.
"""

from __future__ import annotations

from pathlib import Path

AGENT_DIR = Path(__file__).resolve().parent
AGENT_FILES = (
    "main.py",
    "protocol.py",
    "procs.py",
    "files.py",
    "sessions.py",
    "pyworker.py",
    "zygote.py",
    "netfwd.py",
    "harden.py",
    "wipe.py",
)
"""What a sandbox needs; ``main.py`` is the entry point."""
