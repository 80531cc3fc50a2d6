"""``bench/arpo_keychain.py --smoke``: both twins train on multi-hop keychain, the page is written with
every section, and ``--report-only`` rewrites it byte for byte from the records it keeps."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from toolgym.training.runner import build, load_config

ROOT = Path(__file__).resolve().parents[2]


def _bench() -> object:
    spec = importlib.util.spec_from_file_location("arpo_keychain_bench", ROOT / "bench" / "arpo_keychain.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_twins_are_multihop_with_one_budget() -> None:
    arpo, _ = build(load_config("keychain_arpo", []))
    grpo, _ = build(load_config("keychain_grpo", []))
    assert arpo.env_kwargs["min_hops"] >= 2 and arpo.env_kwargs == grpo.env_kwargs
    assert arpo.engine["arpo"]["budget"] == grpo.group_size and arpo.estimator == "arpo"


@pytest.mark.slow  # about 10 s: two two-step runs of the tiny model, in this process
def test_smoke_writes_the_page_and_rewrites_it_from_records(tmp_path: Path) -> None:
    bench = _bench()
    out = tmp_path / "runs"
    bench.main(["--smoke", "--out", str(out)])  # type: ignore[attr-defined]
    for est in ("grpo", "arpo"):
        metrics = (out / f"keychain-{est}-seed0" / "metrics.jsonl").read_text().splitlines()
        assert len(metrics) == 3  # the evaluation before RL and two RL steps
        assert '"tool_use"' in metrics[0] and '"tool_calls_sampled_per_trajectory"' in metrics[1]
    page = (out / "results.md").read_text()
    for heading in (
        "## Result",
        "## ARPO − GRPO, paired by seed",
        "## Per seed",
        "## ARPO's branching per RL step",
    ):
        assert heading in page
    assert "| GRPO | 1 |" in page and "| ARPO | 1 |" in page and "nan" not in page

    docs = tmp_path / "docs" / "arpo.md"
    bench.main(["--report-only", "--out", str(out), "--seeds", "0", "--docs", str(docs)])  # type: ignore[attr-defined]
    records = tmp_path / "docs" / "data" / "arpo"
    assert (records / "keychain-arpo-seed0" / "metrics.jsonl").is_file()
    first = docs.read_text()
    bench.main(["--report-only", "--out", str(records), "--seeds", "0", "--docs", str(docs)])  # type: ignore[attr-defined]
    assert docs.read_text() == first
