"""Benchmark: a 100k-trajectory dataset, written and read as toolgym JSONL and Parquet, beside plain
JSON baselines measured in the same run, plus the peak memory of the CLI commands on it.

    .venv/bin/python bench/dataset_scale.py [--n 100000] [--dir /tmp/toolgym-scale] [--no-cli] [--keep]

Formats (same trajectories, same content):

- ``toolgym jsonl``: ``TrajectoryWriter`` (one validated line per trajectory, flushed) and
  ``iter_trajectories`` (streamed, validated back into ``Trajectory`` objects);
- ``toolgym jsonl (dicts)``: ``iter_raw``, the same file read as plain dicts;
- ``toolgym parquet``: ``write_parquet`` / ``read_parquet`` (row groups, zstd, back to ``Trajectory``);
- ``plain jsonl``: ``json.dumps`` of each record's dict per line / ``json.loads`` per line, no schema;
- ``plain json``: one ``json.dump`` of the list of all records / ``json.load`` of it, the way many
  ad-hoc collectors save runs; it cannot stream, which its peak memory shows.

Each phase runs in its own process, so its peak RSS (``ru_maxrss``) is its own. Throughput is
turns (steps) per second of the phase's serialisation work; generating the synthetic trajectories
is timed separately and left out. With ``--repeat R`` every phase runs R times, in interleaved
rounds, and keeps its fastest run (and its highest RSS). Trajectories: a 120-token prompt and 3 turns, each 48 sampled
tokens with logprobs plus a 16-token tool result; one tool call per turn; about 1 in 3 succeeds.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
TURNS = 3


def make_trajectory(i: int) -> Any:
    """A synthetic token-faithful trajectory (built without validation: generation is not measured)."""
    from toolgym.core.trajectory import (
        LLMCall,
        Segment,
        Step,
        Timings,
        ToolCallRecord,
        Trajectory,
        prompt_digest,
    )

    rng = random.Random(i)
    prompt_ids = [rng.randrange(150_000) for _ in range(120)]
    segments = [
        Segment.model_construct(
            sequence=0,
            role="prompt",
            token_ids=prompt_ids,
            loss_mask=[0] * 120,
            logprobs=None,
            text=f"<|im_start|>user\nTask {i}: find the answer.<|im_end|>",
        )
    ]
    steps = []
    seq_len = 120
    for t in range(TURNS):
        ids = [rng.randrange(150_000) for _ in range(48)]
        digest = prompt_digest([tid for seg in segments for tid in seg.token_ids])
        call = LLMCall.model_construct(
            sequence=0,
            prompt_len=seq_len,
            prompt_sha256=digest,
            segment=len(segments),
            completion_tokens=48,
            finish_reason="stop",
            latency_s=rng.uniform(0.1, 2.0),
            attempts=1,
            weight_version=None,
        )
        segments.append(
            Segment.model_construct(
                sequence=0,
                role="assistant",
                token_ids=ids,
                loss_mask=[1] * 48,
                logprobs=[-rng.expovariate(2.0) for _ in range(48)],
                text=f"<tool_call>call {t}</tool_call>",
            )
        )
        obs = [rng.randrange(150_000) for _ in range(16)]
        segments.append(
            Segment.model_construct(
                sequence=0, role="tool", token_ids=obs, loss_mask=[0] * 16, logprobs=None, text=f"result {t}"
            )
        )
        seq_len += 64
        record = ToolCallRecord.model_construct(
            name="python",
            arguments={"code": f"print({i} * {t})"},
            output=str(i * t),
            error=False,
            duration_s=rng.lognormvariate(-4, 1),
            files=[],
        )
        steps.append(
            Step.model_construct(
                index=t,
                action=f'<tool_call>{{"name": "python", "arguments": {{"code": "print({i} * {t})"}}}}</tool_call>',
                action_kind="tool_calls",
                observation=str(i * t),
                step_reward=0.0,
                anchor=f"{rng.getrandbits(48):012x}",
                valid=True,
                error=None,
                tool_calls=[record],
                llm=call,
                env_s=0.01,
                info={},
            )
        )
    reward = 1.0 if i % 3 == 0 else 0.0
    steps[-1].step_reward = reward
    return Trajectory.model_construct(
        schema_version=1,
        trajectory_id=f"{i:016x}",
        group_id=f"bench/{i // 8}/{i // 8}",
        parent_id=None,
        branch_point=None,
        task="bench",
        task_index=i // 8,
        sample_index=i % 8,
        seed=i // 8,
        env="bench",
        model="synthetic",
        sampling={"temperature": 1.0},
        prompt=[{"role": "user", "content": f"Task {i}: find the answer."}],
        messages=[],
        tools=[],
        segments=segments,
        steps=steps,
        reward=reward,
        terminated=True,
        truncated=False,
        truncation_reason=None,
        status="ok",
        status_reason=None,
        token_faithful=True,
        timings=Timings.model_construct(total_s=3.0, llm_s=2.0, tool_s=0.1, env_s=0.2, sandbox_s=0.0),
        weight_version=None,
        created_at=1.7e9,
        metadata={"policy": "model"},
    )


class Timed:
    """Wraps a generator of synthetic trajectories and adds up the time spent generating them."""

    def __init__(self, n: int, as_dict: bool = False) -> None:
        self.n, self.as_dict, self.gen_s = n, as_dict, 0.0

    def __iter__(self) -> Iterator[Any]:
        for i in range(self.n):
            t = time.perf_counter()
            item = make_trajectory(i)
            if self.as_dict:
                item = item.model_dump(mode="json")
            self.gen_s += time.perf_counter() - t
            yield item


def phase(name: str, n: int, root: Path) -> dict[str, Any]:
    """Run one phase in this process; returns its figures."""
    from toolgym.trajectories.parquet import read_parquet, write_parquet
    from toolgym.trajectories.store import TrajectoryWriter, iter_raw, iter_trajectories

    turns = 0
    start = time.perf_counter()
    gen = Timed(n, as_dict=name.startswith("write-plain"))
    path: Path
    if name == "write-ours-jsonl":
        path = root / "ours"
        shutil.rmtree(path, ignore_errors=True)  # the writer appends: start from nothing each round
        with TrajectoryWriter(path) as w:
            for t in gen:
                w.write(t)
        turns, path = n * TURNS, path / "trajectories.jsonl"
    elif name == "write-ours-parquet":
        path = root / "ours.parquet"
        write_parquet(gen, path)
        turns = n * TURNS
    elif name == "write-plain-jsonl":
        path = root / "plain.jsonl"
        with path.open("w") as fh:
            for d in gen:
                fh.write(json.dumps(d) + "\n")
        turns = n * TURNS
    elif name == "write-plain-json":
        path = root / "plain.json"
        records = list(gen)  # the format needs the whole list first
        with path.open("w") as fh:
            json.dump(records, fh)
        turns = n * TURNS
    elif name == "read-ours-jsonl":
        path = root / "ours" / "trajectories.jsonl"
        turns = sum(len(t.steps) for t in iter_trajectories(root / "ours"))
    elif name == "read-ours-jsonl-dicts":
        path = root / "ours" / "trajectories.jsonl"
        turns = sum(len(t["steps"]) for t in iter_raw(root / "ours"))
    elif name == "read-ours-parquet":
        path = root / "ours.parquet"
        turns = sum(len(t.steps) for t in read_parquet(path))
    elif name == "read-plain-jsonl":
        path = root / "plain.jsonl"
        with path.open() as fh:
            turns = sum(len(json.loads(line)["steps"]) for line in fh)
    elif name == "read-plain-json":
        path = root / "plain.json"
        with path.open() as fh:
            turns = sum(len(r["steps"]) for r in json.load(fh))
    else:
        raise SystemExit(f"unknown phase {name!r}")
    elapsed = time.perf_counter() - start - gen.gen_s
    return {
        "phase": name,
        "turns": turns,
        "seconds": elapsed,
        "generate_s": gen.gen_s,
        "bytes": path.stat().st_size,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def run_phase(name: str, n: int, root: Path) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, str(HERE), "--phase", name, "--n", str(n), "--dir", str(root)],
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise SystemExit(f"phase {name} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_cli(args: list[str]) -> dict[str, Any]:
    """A toolgym command in its own process; its wall time and peak RSS."""
    code = (
        "import resource, sys, json, time\nfrom toolgym.cli import main\nsys.argv = ['toolgym', *sys.argv[1:]]\nt = time.perf_counter()\n"
        "try:\n    main()\nexcept SystemExit as e:\n    code = e.code\nelse:\n    code = 0\n"
        "print(json.dumps({'rc': code, 'seconds': time.perf_counter() - t, 'peak_rss_mb': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))"
    )
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=False)
    return {
        "command": "toolgym " + " ".join(a if "/" not in a else Path(a).name for a in args),
        **json.loads(out.stdout.strip().splitlines()[-1]),
    }


def baseline_rss() -> float:
    code = "import resource, toolgym.trajectories, toolgym.cli\nprint(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)"
    return float(
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=100_000, help="trajectories")
    ap.add_argument("--dir", type=Path, default=Path("/tmp/toolgym-scale"))
    ap.add_argument("--phase", help=argparse.SUPPRESS)
    ap.add_argument(
        "--repeat", type=int, default=1, help="rounds; each phase keeps its best (the machine may be busy)"
    )
    ap.add_argument("--no-cli", action="store_true", help="skip the CLI commands on the dataset")
    ap.add_argument("--keep", action="store_true", help="keep the files")
    args = ap.parse_args()
    if args.phase:
        print(json.dumps(phase(args.phase, args.n, args.dir)))
        return
    root = args.dir
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    print(
        f"{args.n:,} trajectories × {TURNS} turns; every phase in its own process (idle python + toolgym: {baseline_rss():.0f} MB RSS)\n"
    )
    formats = [
        ("toolgym jsonl", "ours-jsonl"),
        ("toolgym jsonl (dicts)", "ours-jsonl-dicts"),
        ("toolgym parquet", "ours-parquet"),
        ("plain jsonl", "plain-jsonl"),
        ("plain json", "plain-json"),
    ]
    best: dict[str, dict[str, Any]] = {}
    for round_ in range(args.repeat):  # rounds interleave the formats, so load spikes hit them alike
        for label, key in formats:
            for kind in ("write", "read"):
                if kind == "write" and key == "ours-jsonl-dicts":
                    continue
                res = run_phase(f"{kind}-{key}", args.n, root)
                old = best.get(res["phase"])
                if old is None or res["seconds"] < old["seconds"]:
                    best[res["phase"]] = {
                        **res,
                        "peak_rss_mb": max(res["peak_rss_mb"], old["peak_rss_mb"] if old else 0),
                    }
            print(f"  round {round_ + 1}: measured {label}", file=sys.stderr)
    rows = [(label, best.get(f"write-{key}"), best[f"read-{key}"]) for label, key in formats]
    head = f"{'format':<24}{'write turns/s':>15}{'write RSS MB':>14}{'read turns/s':>14}{'read RSS MB':>13}{'MB on disk':>12}{'bytes/turn':>12}"
    print(head)
    print("-" * len(head))
    for label, w, r in rows:
        wt = f"{w['turns'] / w['seconds']:,.0f}" if w else "(same file)"
        wr = f"{w['peak_rss_mb']:,.0f}" if w else "-"
        print(
            f"{label:<24}{wt:>15}{wr:>14}{r['turns'] / r['seconds']:>14,.0f}{r['peak_rss_mb']:>13,.0f}"
            f"{r['bytes'] / 1e6:>12,.1f}{r['bytes'] / r['turns']:>12,.0f}"
        )
    if not args.no_cli:
        data = str(root / "ours")
        print("\nCLI commands on the toolgym jsonl dataset (peak RSS of the whole process):")
        for cmd in (
            ["report", data, "--out", str(root / "report")],
            ["export", "sft", data, "-o", str(root / "sft.jsonl")],
            ["export", "hf", data, "-o", str(root / "hf")],
            ["verify", data],
        ):
            res = run_cli(cmd)
            print(
                f"  {res['command']:<40} rc {res['rc']}  {res['seconds']:>7.1f} s  {args.n * TURNS / res['seconds']:>9,.0f} turns/s  {res['peak_rss_mb']:>7,.0f} MB"
            )
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
