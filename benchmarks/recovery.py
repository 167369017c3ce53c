"""Recovery from a worker killed mid-epoch: time to resume and work lost, against a clean run.

The workload is the digits example (``examples/digits/train.py``), 2 workers, a checkpoint from
rank 0 at the end of every epoch (the checkpoint interval is one epoch), local storage, in local
mode (``run_local``) on one Ray started here. Two runs of the same config: (a) a baseline without
a failure and (b) one where the last rank's process exits (``os._exit``) at ``--fail-epoch``
after ``--fail-fraction`` of that epoch's batches, with ``failure.maxFailures = 1``. Each status
patch is stamped with the wall clock when the driver sends it; the worker's death is the mtime of
the marker file it writes just before exiting.

Reported for (b): seconds from the death to the failure showing in the status and to the first
report of the restarted worker group (which includes one epoch of training; compared with the
baseline's first report, which includes the cold start and one epoch), the epoch it resumed at,
the work lost (epochs trained before the death that are trained again, at most one checkpoint
interval is the target), the checkpoints written vs registered, and the wall time of (b) over (a).

Ray Train's controller collects one report per worker per poll, every
``RAY_TRAIN_HEALTH_CHECK_INTERVAL_S`` (Ray's default 2 s; the runtime sets 0.1 s for 2 workers
unless the environment has a value): a checkpoint is registered, and so resumable, only once
polled. Each rank waits for that poll after reporting unless ``RAYTRAIN_REPORT_COMMIT=0``
(trainer_runtime/flush.py). Set the variables to see how each moves the work lost.

    python benchmarks/recovery.py [--epochs 6] [--fail-epoch 3] [--fail-fraction 0.5]
        [--hidden 128] [--batch-size 64]
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _contract import local_contract_doc

REPO = Path(__file__).resolve().parents[1]


class StampedTransport:
    """Keeps every status patch with the wall-clock time it was sent (``time.time()``)."""

    def __init__(self) -> None:
        self.patches: list[tuple[float, dict[str, Any]]] = []

    def patch_status(self, body: dict[str, Any]) -> None:
        self.patches.append((time.time(), body))

    def read_trainjob(self) -> None:
        return None


def reports(sink: StampedTransport) -> list[tuple[int, float, dict[str, Any]]]:
    """(patch index, time, trainerStatus) of each training report: the patches whose step rose."""
    out, step = [], None
    for i, (t, body) in enumerate(sink.patches):
        ts = body["status"]["trainerStatus"]
        if ts["phase"] == "Running" and ts.get("metrics") and ts["step"] != step:
            out.append((i, t, ts))
        step = ts["step"]
    return out


def start_epoch(ts: dict[str, Any]) -> int:
    return next(int(m["value"]) for m in ts["metrics"] if m["name"] == "start_epoch")


def checkpoints(sink: StampedTransport, run_dir: Path) -> tuple[int, int]:
    """(checkpoint directories written under ``run_dir``, checkpoints the status reported)."""
    written = {d.name for d in run_dir.glob("checkpoint_*") if d.is_dir()}
    reported = {
        body["status"]["checkpoint"]["latestURI"].rstrip("/").rsplit("/", 1)[1]
        for _, body in sink.patches
        if "checkpoint" in body["status"]
    }
    return len(written), len(reported & written)


@dataclass
class Run:
    started: float
    wall: float
    sink: StampedTransport
    run_dir: Path


def run(config: dict[str, Any], storage: Path, max_failures: int) -> Run:
    from raytrain_contract import load_contract
    from trainer_runtime.local import run_local

    sink = StampedTransport()
    doc = local_contract_doc(
        "examples.digits.train:train_loop_per_worker",
        config,
        str(storage),
        max_failures=max_failures,
    )
    started = time.time()
    code = run_local(load_contract(doc), display=False, transport=sink, min_interval=0)
    wall = time.time() - started
    if code != 0:
        final = sink.patches[-1][1]["status"]["trainerStatus"]
        sys.exit(f"run failed (exit {code}): {final['message']}")
    return Run(started, wall, sink, storage / doc["runName"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--fail-epoch", type=int, default=3)
    ap.add_argument("--fail-fraction", type=float, default=0.5, help="of the epoch's batches")
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--batch-size", type=int, default=64)
    args = ap.parse_args()
    if not 0 < args.fail_epoch < args.epochs or not 0 <= args.fail_fraction < 1:
        sys.exit("need 0 < --fail-epoch < --epochs and 0 <= --fail-fraction < 1")

    import ray
    from ray.train.v2._internal.constants import HEALTH_CHECK_INTERVAL_S_ENV_VAR

    from trainer_runtime.trainer import set_poll_interval

    set_poll_interval(2)  # what run_training does: the runtime's default unless set here
    poll = float(os.environ[HEALTH_CHECK_INTERVAL_S_ENV_VAR])
    os.chdir(REPO)  # the workers import the entrypoint from the working directory
    sys.path.insert(0, str(REPO))
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    config = {
        "epochs": args.epochs,
        "lr": 0.05,
        "batch_size": args.batch_size,
        "hidden": args.hidden,
        "seed": 0,
    }
    try:
        with tempfile.TemporaryDirectory(prefix="raytrain-recovery-") as tmp:
            base = run(config, Path(tmp), max_failures=0)
            marker = Path(tmp) / "died"
            failing = {
                **config,
                "fail_at_epoch": args.fail_epoch,
                "fail_marker": str(marker),
                "fail_after_fraction": args.fail_fraction,
            }
            fail = run(failing, Path(tmp), max_failures=1)
            if not marker.exists():
                sys.exit("the worker did not die: no marker file")
            died = marker.stat().st_mtime
            written, registered = checkpoints(fail.sink, fail.run_dir)
    finally:
        ray.shutdown()

    base_reports = reports(base.sink)
    epoch_s = statistics.median(b[1] - a[1] for a, b in itertools.pairwise(base_reports))
    cold = base_reports[0][1] - base.started
    error_i, error_t = next(
        (i, t)
        for i, (t, body) in enumerate(fail.sink.patches)
        if body["status"]["trainerStatus"]["message"].startswith("worker ")
    )
    before = [r for r in reports(fail.sink) if r[0] < error_i]
    after = [r for r in reports(fail.sink) if r[0] > error_i]
    last_before = before[-1][2]["epoch"] if before else -1
    _, resumed_t, resumed_ts = after[0]
    resumed_at = start_epoch(resumed_ts)
    resume = resumed_t - died
    # Trained before the death: epochs 0..fail_epoch-1 and a fraction of fail_epoch.
    lost = args.fail_epoch + args.fail_fraction - resumed_at

    print(f"Ray Train controller poll interval: {poll:g} s ({HEALTH_CHECK_INTERVAL_S_ENV_VAR})")
    print(
        f"baseline: {args.epochs} epochs in {base.wall:.1f} s; first report {cold:.1f} s after "
        f"the start; {epoch_s:.2f} s/epoch (median)"
    )
    print(
        f"killed at epoch {args.fail_epoch} after {args.fail_fraction:.0%} of its batches; "
        f"the last report before the failure was epoch {last_before}"
    )
    print(f"failure in the status:          {error_t - died:.2f} s after the death")
    print(
        f"first report after the restart: {resume:.2f} s after the death (epoch "
        f"{resumed_ts['epoch']}); vs the baseline's first report: {resume / cold:.2f}"
    )
    print(
        f"resumed at epoch {resumed_at}: work lost {lost:.2f} epochs ({lost * epoch_s:.1f} s); "
        f"checkpoint interval 1 epoch: {'within' if lost <= 1 else 'EXCEEDED'}"
    )
    print(
        f"checkpoints: {written} written, {registered} reported "
        f"({written - registered} written but never registered)"
    )
    print(
        f"wall time: {fail.wall:.1f} s vs {base.wall:.1f} s baseline, "
        f"ratio {fail.wall / base.wall:.2f}"
    )


if __name__ == "__main__":
    main()
