"""The runtime against plain torchrun on real pods (the local comparison is runtime_vs_torchrun.py).

Runs tests/integration/test_realpods_bench.py (marker ``realpods_bench``) with
``RAYTRAIN_BENCH_RECORD`` set, so that it appends one JSON line per run, then prints every run,
the median and spread of each figure per arm and the ratio of medians (runtime / torchrun).
The workload, the arms and what is timed are described in that test's docstring: the workload
of runtime_vs_torchrun.py as a TrainJob (operator, KubeRay, a Ray head and two worker pods)
and as one pod running torchrun, both checkpointing every epoch into one ReadWriteMany volume.

It needs what ``make test`` needs (the control plane, the real node, the images:
``make prereqs``) and runs inside a network namespace of its own (e2e/netns/run.sh), unless it
already runs inside one with RAYTRAIN_KUBECONFIG set.

    python benchmarks/realpod_runtime_vs_torchrun.py [--runs 5] [--epochs 8] [--samples 8192]
        [--split]
    python benchmarks/realpod_runtime_vs_torchrun.py --from FILE   (print a record again)

``--split`` adds a third arm, torchrun-2pods: the torchrun job as two pods of one rank and a
quarter CPU each, the shape of the runtime's workers, and prints its ratios against the other
two arms: torchrun-2pods / torchrun is what splitting the job into two CPU quotas costs, runtime /
torchrun-2pods what the runtime costs on top of that shape.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
FIGURES = (
    ("end_to_end", "end-to-end s"),
    ("s_per_epoch_driver", "s/epoch driver"),
    ("s_per_epoch_loop", "s/epoch loop"),
)
SPLIT_ARM = "torchrun-2pods"
ARMS = ("runtime", "torchrun", SPLIT_ARM)


def report(rows: list[dict[str, Any]]) -> int:
    from _stats import summary

    print(f"{'run':>3} {'arm':14} {'load1':>5} {'end-to-end s':>12} {'s/epoch driver':>14} "
          f"{'s/epoch loop':>12}")  # fmt: skip
    for r in rows:
        print(f"{r['run'] + 1:>3} {r['arm']:14} {r['load1']:5.2f} {r['end_to_end']:12.2f} "
              f"{r['s_per_epoch_driver']:14.3f} {r['s_per_epoch_loop']:12.3f}")  # fmt: skip
    arms = {arm: [r for r in rows if r["arm"] == arm] for arm in ARMS}
    if not (arms["runtime"] and arms["torchrun"]):
        print("RESULT realpod_runtime_vs_torchrun: an arm has no run; no ratio")
        return 1
    for arm, mine in arms.items():
        for key, label in FIGURES:
            if mine:
                print(f"{arm:14} {label:15} {summary([r[key] for r in mine])}")
    pairs = [("runtime", "torchrun")]
    if arms[SPLIT_ARM]:
        pairs += [(SPLIT_ARM, "torchrun"), ("runtime", SPLIT_ARM)]
    for top, bottom in pairs:
        ratio = {
            key: statistics.median(r[key] for r in arms[top])
            / statistics.median(r[key] for r in arms[bottom])
            for key, _ in FIGURES
        }
        n = min(len(arms[top]), len(arms[bottom]))
        print(
            f"RESULT realpod_runtime_vs_torchrun: ratio of medians ({top} / {bottom}), {n} runs "
            f"each on real pods: epoch-to-epoch at the driver {ratio['s_per_epoch_driver']:.3f}, "
            f"end to end {ratio['end_to_end']:.3f}, inner loop {ratio['s_per_epoch_loop']:.3f}"
        )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="runs per arm, alternating")
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--samples", type=int, default=8192)
    parser.add_argument(
        "--split", action="store_true", help="add the torchrun-2pods arm (see the docstring)"
    )
    parser.add_argument("--from", dest="record", type=Path, help="print the figures of a record")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _stats import load_avg, machine, stamp

    if args.record:
        rows = [json.loads(line) for line in args.record.read_text().splitlines()]
        print(f"realpod_runtime_vs_torchrun: from {args.record}")
        return report(rows)
    if args.epochs < 2 or args.runs < 1:
        parser.error("--epochs must be at least 2 (epochs are timed between reports), --runs >= 1")

    print(f"realpod_runtime_vs_torchrun: {stamp()}; {machine()}")
    print(
        f"workload: MLP 512-1024-1024-10, {args.samples} samples, batch 128, 2 workers (gloo, "
        f"1 thread each), {args.epochs} epochs, a torch.save checkpoint every epoch into a "
        f"ReadWriteMany volume; {args.runs} runs per arm, alternating, on the real node"
        + ("; torchrun also as two one-rank pods" if args.split else ""),
        flush=True,
    )
    with tempfile.TemporaryDirectory() as tmp:
        record = Path(tmp) / "bench.jsonl"
        env = {
            **os.environ,
            "RAYTRAIN_BENCH_RECORD": str(record),
            "RAYTRAIN_BENCH_RUNS": str(args.runs),
            "RAYTRAIN_BENCH_EPOCHS": str(args.epochs),
            "RAYTRAIN_BENCH_SAMPLES": str(args.samples),
            "RAYTRAIN_BENCH_SPLIT": "1" if args.split else "0",
        }
        pytest = [
            sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
            "-m", "realpods_bench", "tests/integration/test_realpods_bench.py",
        ]  # fmt: skip
        if not os.environ.get("RAYTRAIN_NETNS"):
            pytest = ["bash", "e2e/netns/run.sh", *pytest]
        started = time.monotonic()
        proc = subprocess.run(pytest, cwd=REPO, env=env, check=False)
        elapsed = time.monotonic() - started
        lines = record.read_text().splitlines() if record.exists() else []
        rows = [json.loads(line) for line in lines]
    print(f"load average at the end (1/5/15 min): {load_avg()}; {elapsed / 60:.1f} min")
    if proc.returncode != 0:
        print(f"pytest failed ({proc.returncode}); the runs it finished:")
    code = report(rows)
    return proc.returncode or code


if __name__ == "__main__":
    sys.exit(main())
