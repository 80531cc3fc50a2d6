"""Ray ``worker_process_setup_hook`` for ``test_cpu_fit.py``: instruments the ``toolgym_cpu`` server
in every Ray worker of the test's cluster (the test process cannot monkeypatch another process).

- ``TOOLGYM_TEST_WEIGHTS_DIR``: each weight sync the server receives is saved there
  (``sync_<n>_step_<global_steps>.pt``), so the test can compare what the rollout got with a checkpoint.
- ``TOOLGYM_TEST_STALE_FLAG``: while that file exists, the server's ``update_weights`` only moves
  its version tag and loads nothing, the planted stale-weights bug the weight-sync check must catch.
"""

from __future__ import annotations

import itertools
import os
from typing import Any


def install() -> None:
    flag, dump = os.environ.get("TOOLGYM_TEST_STALE_FLAG"), os.environ.get("TOOLGYM_TEST_WEIGHTS_DIR")
    if not flag and not dump:
        return
    import torch
    import verl  # noqa: F401  # first: its plugin loader registers toolgym's CPU pieces (importing cpu_rollout first would be circular)

    from toolgym.training.verl import cpu_rollout

    original = cpu_rollout.ToolgymCPUServer.update_weights
    counter = itertools.count()

    def record(state_dict: dict[str, Any], global_steps: int | None) -> bool:
        """Save the sync when asked; True when the planted bug is on."""
        if dump:
            torch.save(
                state_dict, os.path.join(dump, f"sync_{os.getpid()}_{next(counter)}_step_{global_steps}.pt")
            )
        return bool(flag) and os.path.exists(str(flag))

    async def update_weights(
        self: Any, state_dict: dict[str, Any], global_steps: int | None = None, peft_config: Any = None
    ) -> int:
        if record(state_dict, global_steps):
            # the planted bug: the version tag moves on, the weights do not (the rollout serves the old ones)
            self.global_steps = global_steps
            return len(state_dict)
        return await original(self, state_dict, global_steps, peft_config)

    cpu_rollout.ToolgymCPUServer.update_weights = update_weights  # type: ignore[method-assign]
