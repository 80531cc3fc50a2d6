"""verl finds toolgym through its ``verl.plugins`` entry point: ``import verl`` registers the
agent loop, the estimators and the trainer mode, in a fresh interpreter."""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys

from tests.required import need_module

need_module("verl")

PROBE = """
import json, sys
import verl
loaded = "toolgym.training.verl.plugin" in sys.modules
from verl.experimental.agent_loop.agent_loop import _agent_loop_registry
from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY
from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY
from toolgym.training.verl.plugin import ERRORS
print(json.dumps({
    "loaded_by_verl": loaded,
    "agent": _agent_loop_registry.get("toolgym_agent"),
    "estimators": sorted(k for k in ADV_ESTIMATOR_REGISTRY if k.startswith("toolgym_")),
    "trainer": TRAINER_REGISTRY["toolgym"].__name__ if "toolgym" in TRAINER_REGISTRY else None,
    "errors": ERRORS,
}))
"""


def test_entry_point_is_declared() -> None:
    (ep,) = [e for e in importlib.metadata.entry_points(group="verl.plugins") if e.name == "toolgym"]
    assert ep.value == "toolgym.training.verl.plugin"


def test_import_verl_registers_everything() -> None:
    proc = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    assert found == {
        "loaded_by_verl": True,
        "agent": {"_target_": "toolgym.training.verl.agent_loop.ToolgymAgentLoop"},
        "estimators": ["toolgym_arpo", "toolgym_gigpo", "toolgym_grpo"],
        "trainer": "ToolgymPPOTrainer",
        "errors": {},
    }
