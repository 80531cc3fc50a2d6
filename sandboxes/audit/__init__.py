"""``toolgym sandbox audit``: isolation, reset and egress checks run against a configured sandbox
backend (a local or remote Docker engine, bubblewrap, several Docker hosts) by acquiring real
sandboxes and probing them from inside and from the host (issue 17 §3; issues 22 and 25).

Run it before training on a new cluster: a row per check (``Row``: check, backend, kind, result,
detail), ``FAIL`` wherever something was not contained. The in-sandbox probes (``probes``,
``hijack_probe``) are the ones the test suite uses too.
"""

from __future__ import annotations

from toolgym.sandboxes.audit.rows import FAIL, PASS, SKIP, Row
from toolgym.sandboxes.audit.runner import KIND_CHECKS, audit_backend, resolve, run_audit

__all__ = ["FAIL", "KIND_CHECKS", "PASS", "SKIP", "Row", "audit_backend", "resolve", "run_audit"]
