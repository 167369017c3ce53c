"""One CPU training job under our runtime (local mode) vs plain torchrun, timed from outside.

The workload: a 3-layer MLP (512-1024-1024-10) on synthetic data, 2 workers, gloo, one thread
per worker, batch 128, plain SGD. After every epoch rank 0 saves the model and optimizer state
with ``torch.save`` (about 6 MB) as a checkpoint.

- runtime: ``python -m trainer_runtime --contract FILE --local`` (what ``raytrain run --local``
  calls: a local Ray, Ray Train V2 ``TorchTrainer``, ``prepare_model`` /
  ``prepare_data_loader``); every epoch each worker calls ``ray.train.report``, rank 0 with its
  checkpoint, which Ray Train persists into the contract's local storage and the driver
  registers when its controller polls the workers.
- torchrun: ``python -m torch.distributed.run --standalone --nproc_per_node 2`` with the same
  loop under DistributedDataParallel and a DistributedSampler; rank 0 ``torch.save``s into a
  local directory, then all ranks meet at a barrier (as they do inside ``ray.train.report``).

Both arms are timed by this script, outside the job, on the lines the job prints:

- epoch-to-epoch at the driver: the runtime's console prints ``checkpoint N`` when the driver
  registers epoch N's checkpoint; torchrun's rank 0 prints a line once the checkpoint is saved
  and the barrier passed. Per run: (last epoch's line - first epoch's line) / (epochs - 1), the
  steady-state period including report and checkpoint, free of the start-up.
- end to end: from starting the process to its exit (Python and Ray start-up, all epochs,
  shutdown).
- inner loop: the forward/backward/step loop alone, as each rank 0 measured it (median of
  epochs 2..N), to show what is training and what is around it.

Runs alternate (runtime, torchrun, runtime, torchrun, ...); the median, IQR and min/max of the
per-run figures are printed with the ratio of medians (runtime / torchrun), and the load average
and CPU count as the OS reports them before and after.

``--async-upload`` adds a third arm, ``runtime-async``: the same runtime loop, rank 0 handing
its checkpoint to ``ray.train.report(..., checkpoint_upload_mode=CheckpointUploadMode.ASYNC)``
(Ray Train persists it from a background thread while the next epoch trains, and registers it
once it is persisted), alternating runtime, runtime-async, torchrun; its ratio of medians is
printed against the runtime's synchronous upload and against torchrun.

``--no-commit`` adds ``runtime-nocommit``: the runtime with ``RAYTRAIN_REPORT_COMMIT=0``, where a
rank goes on training as soon as its report is on Ray Train's queue instead of waiting for the
controller's poll (trainer_runtime/flush.py); its ratio shows what that wait costs.

    python benchmarks/runtime_vs_torchrun.py [--runs 5] [--epochs 8] [--samples 8192]
                                             [--async-upload] [--no-commit]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve()

RUNTIME_CKPT = re.compile(r"^checkpoint (\d+)\s")
RUNTIME_REPORT = re.compile(r"^report \d+\s.*\bepoch=(\d+)\s.*\bepoch_seconds=([0-9.e-]+)")
# Rank 0: epoch, inner-loop seconds, wall-clock time (the real-pod benchmark reads the last).
TORCHRUN_EPOCH = re.compile(r"^EPOCH (\d+) ([0-9.e-]+) [0-9.]+$")


def build(samples: int, seed: int = 0) -> tuple[Any, Any]:
    import torch
    from torch import nn
    from torch.utils.data import TensorDataset

    g = torch.Generator().manual_seed(seed)
    x = torch.randn(samples, 512, generator=g)
    y = torch.randint(0, 10, (samples,), generator=g)
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(512, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                          nn.Linear(1024, 10))  # fmt: skip
    return model, TensorDataset(x, y)


def one_epoch(model: Any, loader: Any, optimizer: Any) -> float:
    import torch.nn.functional as F

    start = time.perf_counter()
    for xb, yb in loader:
        optimizer.zero_grad()
        F.cross_entropy(model(xb), yb).backward()
        optimizer.step()
    return time.perf_counter() - start


def checkpoint_state(model: Any, optimizer: Any, epoch: int) -> dict[str, Any]:
    inner = getattr(model, "module", model)
    return {"model": inner.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch}


def ray_loop(config: dict[str, Any]) -> None:
    """The loop as a Ray Train user writes it: report every epoch, rank 0 with a checkpoint."""
    import ray.train
    import torch
    from ray.train import Checkpoint
    from ray.train.torch import prepare_data_loader, prepare_model
    from torch.utils.data import DataLoader

    torch.set_num_threads(1)
    model, data = build(int(config["samples"]))
    model = prepare_model(model)
    loader = prepare_data_loader(DataLoader(data, batch_size=128, shuffle=True))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    ctx = ray.train.get_context()
    upload_async = config.get("upload") == "async"
    for epoch in range(int(config["epochs"])):
        if ctx.get_world_size() > 1:
            loader.sampler.set_epoch(epoch)
        seconds = one_epoch(model, loader, optimizer)
        metrics = {"epoch": epoch, "epoch_seconds": round(seconds, 4)}
        if ctx.get_world_rank() == 0 and upload_async:
            # Ray Train deletes the directory once it has persisted it (after this returns).
            tmp = tempfile.mkdtemp(prefix="ckpt-")
            torch.save(checkpoint_state(model, optimizer, epoch), Path(tmp) / "model.pt")
            ray.train.report(
                metrics,
                checkpoint=Checkpoint.from_directory(tmp),
                checkpoint_upload_mode=ray.train.CheckpointUploadMode.ASYNC,
            )
        elif ctx.get_world_rank() == 0:
            with tempfile.TemporaryDirectory() as tmp:
                torch.save(checkpoint_state(model, optimizer, epoch), Path(tmp) / "model.pt")
                ray.train.report(metrics, checkpoint=Checkpoint.from_directory(tmp))
        else:
            ray.train.report(metrics)


def torchrun_worker(epochs: int, samples: int, ckpt_dir: str) -> None:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader, DistributedSampler

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    model, data = build(samples)
    model = DistributedDataParallel(model)
    sampler = DistributedSampler(data, shuffle=True)
    loader = DataLoader(data, batch_size=128, sampler=sampler)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    rank = dist.get_rank()
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        seconds = one_epoch(model, loader, optimizer)
        if rank == 0:
            out = Path(ckpt_dir) / f"checkpoint_{epoch:06d}"
            out.mkdir(parents=True, exist_ok=True)
            torch.save(checkpoint_state(model, optimizer, epoch), out / "model.pt")
        dist.barrier()
        if rank == 0:
            print(f"EPOCH {epoch} {seconds:.4f} {time.time():.3f}", flush=True)
    dist.destroy_process_group()


@dataclass
class Run:
    arm: str
    load_before: float
    end_to_end: float = 0.0
    epoch_at: dict[int, float] = field(default_factory=dict)  # epoch -> seconds since start
    loop_seconds: dict[int, float] = field(default_factory=dict)

    def driver_period(self) -> float:
        """Seconds per epoch between the first and the last epoch seen at the driver."""
        epochs = sorted(self.epoch_at)
        if len(epochs) < 2:
            raise SystemExit(f"{self.arm}: fewer than two epochs seen, cannot time epochs")
        first, last = epochs[0], epochs[-1]
        return (self.epoch_at[last] - self.epoch_at[first]) / (last - first)

    def loop_median(self) -> float:
        steady = [s for e, s in sorted(self.loop_seconds.items()) if e > 0]
        return statistics.median(steady or list(self.loop_seconds.values()))


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "COLUMNS": "400"}
    env.pop("RAY_ADDRESS", None)  # a local Ray of its own, never someone else's cluster
    env.pop("RAYTRAIN_REPORT_COMMIT", None)  # the runtime's default unless an arm sets it
    return {**env, **(extra or {})}


def timed(
    arm: str, cmd: list[str], epochs: int, parse: Any, env: dict[str, str] | None = None
) -> Run:
    """Run ``cmd``, timestamping each output line; ``parse(run, line, t)`` records epochs."""
    run = Run(arm=arm, load_before=os.getloadavg()[0])
    tail: deque[str] = deque(maxlen=40)
    start = time.monotonic()
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          bufsize=1, env=child_env(env), cwd=REPO) as proc:  # fmt: skip
        assert proc.stdout is not None
        for line in proc.stdout:
            t = time.monotonic() - start
            tail.append(line.rstrip())
            parse(run, line.strip(), t)
        code = proc.wait()
    run.end_to_end = time.monotonic() - start
    if code != 0 or len(run.epoch_at) != epochs:
        print("\n".join(tail), file=sys.stderr)
        raise SystemExit(f"{arm}: exit code {code}, saw {len(run.epoch_at)} of {epochs} epochs")
    return run


def parse_runtime(run: Run, line: str, t: float) -> None:
    if m := RUNTIME_CKPT.match(line):
        # The console counts checkpoints from 1; checkpoint N is epoch N - 1.
        run.epoch_at[int(m.group(1)) - 1] = t
    elif m := RUNTIME_REPORT.match(line):
        run.loop_seconds[int(m.group(1))] = float(m.group(2))


def parse_torchrun(run: Run, line: str, t: float) -> None:
    if m := TORCHRUN_EPOCH.match(line):
        run.epoch_at[int(m.group(1))] = t
        run.loop_seconds[int(m.group(1))] = float(m.group(2))


def run_runtime(
    epochs: int, samples: int, work: Path, index: int, upload: str = "sync", commit: bool = True
) -> Run:
    from _contract import local_contract_doc

    arm = "runtime" if upload == "sync" else f"runtime-{upload}"
    if not commit:
        arm += "-nocommit"
    store = work / f"{arm}-store-{index}"
    store.mkdir()
    doc = local_contract_doc(
        f"{HERE.relative_to(REPO)}:ray_loop",
        {"epochs": epochs, "samples": samples, "upload": upload},
        str(store),
        timeout_seconds=600,
        report=False,
    )
    contract = work / f"contract-{arm}-{index}.json"
    contract.write_text(json.dumps(doc))
    cmd = [sys.executable, "-m", "trainer_runtime", "--contract", str(contract), "--local"]
    try:
        env = None if commit else {"RAYTRAIN_REPORT_COMMIT": "0"}
        return timed(arm, cmd, epochs, parse_runtime, env)
    finally:
        shutil.rmtree(store, ignore_errors=True)


def run_runtime_async(epochs: int, samples: int, work: Path, index: int) -> Run:
    return run_runtime(epochs, samples, work, index, upload="async")


def run_runtime_nocommit(epochs: int, samples: int, work: Path, index: int) -> Run:
    return run_runtime(epochs, samples, work, index, commit=False)


def run_torchrun(epochs: int, samples: int, work: Path, index: int) -> Run:
    ckpt = work / f"torchrun-ckpt-{index}"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
           "2", str(HERE), "--torchrun-worker", "--epochs", str(epochs), "--samples",
           str(samples), "--checkpoint-dir", str(ckpt)]  # fmt: skip
    try:
        return timed("torchrun", cmd, epochs, parse_torchrun)
    finally:
        shutil.rmtree(ckpt, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5, help="runs per arm, alternating (default 5)")
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--samples", type=int, default=8192)
    ap.add_argument(
        "--async-upload",
        action="store_true",
        help="a third arm: the runtime with Ray Train's asynchronous checkpoint upload",
    )
    ap.add_argument(
        "--no-commit",
        action="store_true",
        help="another arm: the runtime with RAYTRAIN_REPORT_COMMIT=0 (a rank goes on training "
        "before Ray Train's controller has polled its report)",
    )
    ap.add_argument("--torchrun-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--checkpoint-dir", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.torchrun_worker:
        torchrun_worker(args.epochs, args.samples, args.checkpoint_dir)
        return
    if args.epochs < 2 or args.runs < 1:
        ap.error("--epochs must be at least 2 (epochs are timed between reports), --runs >= 1")

    from _stats import load_avg, machine, stamp, summary

    print(f"runtime_vs_torchrun: {stamp()}; {machine()}")
    print(
        f"workload: MLP 512-1024-1024-10, {args.samples} samples, batch 128, 2 workers (gloo, "
        f"1 thread each), {args.epochs} epochs, a torch.save checkpoint every epoch; "
        f"{args.runs} runs per arm, alternating"
    )
    arms: list[Any] = [run_runtime]
    if args.no_commit:
        arms.append(run_runtime_nocommit)
    if args.async_upload:
        arms.append(run_runtime_async)
    arms.append(run_torchrun)
    print("arms, in this order: " + ", ".join(a.__name__.removeprefix("run_") for a in arms))
    print(f"{'run':>3} {'arm':14} {'load1':>5} {'end-to-end s':>12} {'s/epoch driver':>14} "
          f"{'s/epoch loop':>12}")  # fmt: skip
    runs: list[Run] = []
    work = Path(tempfile.mkdtemp(prefix="bench-rt-"))
    try:
        for i in range(args.runs):
            for measure in arms:
                r = measure(args.epochs, args.samples, work, i)
                runs.append(r)
                print(f"{i + 1:>3} {r.arm:14} {r.load_before:5.2f} {r.end_to_end:12.2f} "
                      f"{r.driver_period():14.3f} {r.loop_median():12.3f}", flush=True)  # fmt: skip
    finally:
        shutil.rmtree(work, ignore_errors=True)

    print(f"load average at the end (1/5/15 min): {load_avg()}")
    figures: dict[str, dict[str, list[float]]] = {}
    for arm in dict.fromkeys(r.arm for r in runs):
        mine = [r for r in runs if r.arm == arm]
        figures[arm] = {
            "end-to-end s": [r.end_to_end for r in mine],
            "s/epoch driver": [r.driver_period() for r in mine],
            "s/epoch loop": [r.loop_median() for r in mine],
        }
        for name, values in figures[arm].items():
            print(f"{arm:14} {name:15} {summary(values)}")

    def ratios(top: str, bottom: str) -> str:
        r = {
            name: statistics.median(figures[top][name]) / statistics.median(figures[bottom][name])
            for name in figures[top]
        }
        return (
            f"ratio of medians ({top} / {bottom}), {args.runs} runs each: epoch-to-epoch at the "
            f"driver {r['s/epoch driver']:.3f}, end to end {r['end-to-end s']:.3f}, inner loop "
            f"{r['s/epoch loop']:.3f}"
        )

    print(f"RESULT runtime_vs_torchrun: {ratios('runtime', 'torchrun')}")
    if args.no_commit:
        print(f"RESULT runtime_vs_torchrun: {ratios('runtime', 'runtime-nocommit')}")
    if args.async_upload:
        print(f"RESULT runtime_vs_torchrun: {ratios('runtime-async', 'runtime')}")
        print(f"RESULT runtime_vs_torchrun: {ratios('runtime-async', 'torchrun')}")


if __name__ == "__main__":
    main()
