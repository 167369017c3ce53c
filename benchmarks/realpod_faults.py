"""Faults on real pods: how long a TrainJob takes to resume and how much work it redoes.

Runs the real-pod fault tests (tests/integration/test_realpods.py and the evictions and the
drain of tests/integration/test_realpods_preemption.py, marker ``realpods_faults``)
with ``RAYTRAIN_FAULT_RECORD`` set, so that each test appends what it measured, then prints one
row per fault. It needs what ``make test`` needs (the control plane, the real node, the images:
``make prereqs``) and runs the tests inside a network namespace of their own
(e2e/netns/run.sh), unless it already runs inside one with RAYTRAIN_KUBECONFIG set.

    python benchmarks/realpod_faults.py [-k EXPR] [--repeat N]
    python benchmarks/realpod_faults.py --from FILE   (the table of a record written by a test
                                                       run with RAYTRAIN_FAULT_RECORD=FILE)

Columns: the fault; the last epoch the TrainJob's status showed when the fault was injected
(a lower bound of the epoch in flight: reports come at most every 5 s); the epoch the resumed
run started at; epochs redone relative to that report; the checkpoint interval (digits
checkpoints every epoch); seconds from the fault to the resumed run's first report (which
comes after its first epoch); whether a new RayJob (attempt) was needed; where the test can
tell (the SIGKILLed training worker, from the run's metrics.jsonl and the bucket), the
checkpoints written but never registered: trained, then lost with the fault ("-" elsewhere).
For that fault the reported epoch is the last one the driver registered before the kill.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-k", default="", help="pytest -k expression to select faults")
    parser.add_argument("--repeat", type=int, default=1, help="runs of the whole fault suite")
    parser.add_argument("--from", dest="record", type=Path, help="print the table of a record")
    args = parser.parse_args(argv)
    if args.record:
        rows = [json.loads(line) for line in args.record.read_text().splitlines()]
        print(f"# real-pod faults: {len(rows)} measured, from {args.record}")
        print_table(rows)
        return 0 if rows else 1

    with tempfile.TemporaryDirectory() as tmp:
        record = Path(tmp) / "faults.jsonl"
        env = {**os.environ, "RAYTRAIN_FAULT_RECORD": str(record)}
        pytest = [
            sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
            "-m", "realpods_faults", "tests/integration/test_realpods.py",
            "tests/integration/test_realpods_preemption.py",
        ]  # fmt: skip
        if args.k:
            pytest += ["-k", args.k]
        if not os.environ.get("RAYTRAIN_NETNS"):
            pytest = ["bash", "e2e/netns/run.sh", *pytest]
        started = time.monotonic()
        load_before = os.getloadavg()
        failed = 0
        for _ in range(args.repeat):
            proc = subprocess.run(pytest, cwd=REPO, env=env, check=False)
            failed += proc.returncode != 0
        elapsed = time.monotonic() - started
        load_after = os.getloadavg()
        lines = record.read_text().splitlines() if record.exists() else []
        rows = [json.loads(line) for line in lines]

    print()
    print(
        f"# real-pod faults: {len(rows)} measured, {failed} pytest run(s) failed; "
        f"{elapsed / 60:.1f} min; {os.cpu_count()} CPUs; "
        f"load avg (1 min) {load_before[0]:.1f} before, {load_after[0]:.1f} after"
    )
    print_table(rows)
    return 1 if failed or not rows else 0


def print_table(rows: list[dict[str, object]]) -> None:
    print(
        "| fault | reported epoch at fault | resumed at epoch | epochs redone "
        "| checkpoints never registered | checkpoint interval (epochs) | s to first resumed report "
        "| new attempt |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        lost = r.get("checkpoints_never_registered")
        print(
            f"| {r['fault']} | {r['reported_epoch_at_fault']} | {r['resumed_at_epoch']} "
            f"| {r['epochs_redone']} | {'-' if lost is None else lost} "
            f"| {r['checkpoint_interval_epochs']} "
            f"| {r['seconds_to_first_resumed_report']} | {'yes' if r['new_rayjob'] else 'no'} |"
        )


if __name__ == "__main__":
    sys.exit(main())
