"""The ``verl.plugins`` entry point: ``import verl`` imports this module in every process.

It registers, each on its own so that one missing piece does not hide the others:

- the platform ``cpu`` (:mod:`.cpu_platform`; first, since importing the trainer resolves verl's
  platform) and the rollout replica ``toolgym_cpu`` (:mod:`.cpu_rollout`);
- the agent loop ``toolgym_agent`` (:mod:`.agent_loop`);
- the advantage estimators ``toolgym_grpo``, ``toolgym_gigpo``, ``toolgym_arpo`` (:mod:`.estimators`);
- the V1 trainer mode ``toolgym`` (:mod:`.trainer`; needs the ``transferqueue`` package).

verl swallows an exception raised by a plugin (it logs it at debug level), so failures are
recorded in :data:`ERRORS` and logged as warnings here; ``toolgym train`` checks them.
"""

from __future__ import annotations

import importlib
import logging

log = logging.getLogger("toolgym.verl")

PARTS = (
    "toolgym.training.verl.cpu_platform",
    "toolgym.training.verl.agent_loop",
    "toolgym.training.verl.estimators",
    "toolgym.training.verl.trainer",
    "toolgym.training.verl.cpu_rollout",
)
ERRORS: dict[str, str] = {}
"""Module → why it could not be registered; empty when everything is registered."""


def register_all() -> dict[str, str]:
    """Import (and so register) every part; returns the failures, module → reason."""
    try:
        from . import cpu_shims

        cpu_shims.patch_trl_value_head()
    except Exception as exc:
        ERRORS["cpu_shims.patch_trl_value_head"] = f"{type(exc).__name__}: {exc}"
    for name in PARTS:
        try:
            module = importlib.import_module(name)
            for hook in ("register_estimators", "register_with_verl"):
                if hasattr(module, hook):
                    getattr(module, hook)()
            ERRORS.pop(name, None)
        except Exception as exc:
            ERRORS[name] = f"{type(exc).__name__}: {exc}"
            log.warning("toolgym could not register %s with verl: %s", name, ERRORS[name])
    return dict(ERRORS)


register_all()
