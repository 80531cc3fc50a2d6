"""``toolgym sandbox audit``: isolation, reset and egress checks run against a configured sandbox
backend (a local or remote Docker engine, bubblewrap, several Docker hosts) by acquiring real
sandboxes and probing them from inside and from the host.

Run it before training on a new cluster: a row per check (``Row``: check, backend, kind, result,
detail), ``FAIL`` wherever something was not contained, ``residual`` for a documented channel the
backend cannot close (``carryover``: kernel counters that outlive a reset, and the rule that keeps
them harmless). The in-sandbox probes (``probes``, ``hijack_probe``, ``carryover``) are the ones
the test suite uses too.
"""

from __future__ import annotations

from toolgym.sandboxes.audit.rows import FAIL, PASS, RESIDUAL, SKIP, Row
from toolgym.sandboxes.audit.runner import KIND_CHECKS, audit_backend, resolve, run_audit

__all__ = ["FAIL", "KIND_CHECKS", "PASS", "RESIDUAL", "SKIP", "Row", "audit_backend", "resolve", "run_audit"]
