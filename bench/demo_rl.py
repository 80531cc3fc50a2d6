"""The demo's figure: held-out success of the warm-started policy (the baseline) and after GiGPO.

Runs the full ``toolgym demo`` pipeline once per seed, in this process, and prints both numbers
per seed plus wall and CPU time. The baseline is measured in the same run: the same model after
its SFT warm start, on the same held-out tasks, with the same greedy decoding.

    .venv/bin/python bench/demo_rl.py --seeds 0 1 2 [--quick] [--out /tmp/toolgym-demo-bench]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument(
        "--quick", action="store_true", help="the one-minute configuration (checks the bench runs)"
    )
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("/tmp/toolgym-demo-bench"))
    args = parser.parse_args()
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    from toolgym.training.demo.run import DemoConfig, run_demo

    rows = []
    for seed in args.seeds:
        changes = {"out": args.out / f"seed-{seed}", "seed": seed, "threads": args.threads}
        cfg = DemoConfig.quick(**changes) if args.quick else DemoConfig(**changes)
        r = run_demo(cfg)
        rows.append(
            {
                "seed": seed,
                "warm_start": r.before,
                "after_rl": r.after,
                "wall_s": r.wall_s,
                "cpu_s": r.cpu_s,
                "sft_steps": len(r.sft_losses),
                "rl_steps": len(r.history),
            }
        )
        print(
            f"seed {seed}: held-out success warm start (baseline) {r.before:6.1%}  →  after GiGPO {r.after:6.1%}  "
            f"({r.after - r.before:+.1%})  wall {r.wall_s:5.0f} s  CPU {r.cpu_s:5.0f} s  SFT steps {len(r.sft_losses)}",
            flush=True,
        )
    before = statistics.mean(r["warm_start"] for r in rows)
    after = statistics.mean(r["after_rl"] for r in rows)
    print(
        f"mean over {len(rows)} seeds: baseline {before:.1%} → after RL {after:.1%} "
        f"({sum(r['after_rl'] > r['warm_start'] for r in rows)}/{len(rows)} seeds improved)"
    )
    (args.out / "bench.json").write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
