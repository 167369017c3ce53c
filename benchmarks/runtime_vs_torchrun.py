"""Per-epoch time of one CPU workload under our runtime vs plain torchrun DDP, as a ratio.

The workload: a 3-layer MLP (512-1024-1024-10) on synthetic data, 2 workers, gloo, one thread
per worker, no checkpoints, so compute and the allreduce dominate. Under our runtime it runs
as a contract in local mode (``run_local``: Ray Train V2 TorchTrainer, ``prepare_model``,
``prepare_data_loader``); under torchrun it is the same loop with DistributedDataParallel and a
DistributedSampler. Steady state: the first epoch is dropped, the median of the rest is taken.

    python benchmarks/runtime_vs_torchrun.py [--epochs 6] [--samples 8192]
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

from _contract import local_contract_doc

REPO = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve()


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


def ray_loop(config: dict[str, Any]) -> None:
    """The loop as a Ray Train user writes it."""
    import ray.train
    import torch
    from ray.train.torch import prepare_data_loader, prepare_model
    from torch.utils.data import DataLoader

    torch.set_num_threads(1)
    model, data = build(int(config["samples"]))
    model = prepare_model(model)
    loader = prepare_data_loader(DataLoader(data, batch_size=128, shuffle=True))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for epoch in range(int(config["epochs"])):
        if ray.train.get_context().get_world_size() > 1:
            loader.sampler.set_epoch(epoch)
        seconds = one_epoch(model, loader, optimizer)
        ray.train.report({"epoch": epoch, "epoch_seconds": seconds})


def torchrun_worker(epochs: int, samples: int) -> None:
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
    times = []
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        times.append(one_epoch(model, loader, optimizer))
    if dist.get_rank() == 0:
        print("EPOCH_TIMES " + json.dumps(times), flush=True)
    dist.destroy_process_group()


def steady(times: list[float]) -> float:
    return statistics.median(times[1:]) if len(times) > 1 else times[0]


def run_torchrun(epochs: int, samples: int) -> list[float]:
    torchrun = [sys.executable, "-m", "torch.distributed.run"]
    cmd = [*torchrun, "--standalone", "--nproc_per_node", "2", str(HERE), "--torchrun-worker",
           "--epochs", str(epochs), "--samples", str(samples)]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env, cwd=REPO)
    line = next(x for x in out.stdout.splitlines() if x.startswith("EPOCH_TIMES "))
    return [float(t) for t in json.loads(line.removeprefix("EPOCH_TIMES "))]


def run_ours(epochs: int, samples: int) -> list[float]:
    from raytrain_contract import load_contract
    from trainer_runtime.local import run_local
    from trainer_runtime.reporter import RecordingTransport

    store = tempfile.mkdtemp(prefix="bench-store-")
    doc = local_contract_doc(
        f"{HERE.relative_to(REPO)}:ray_loop",
        {"epochs": epochs, "samples": samples},
        store,
        timeout_seconds=600,
        report=False,
    )
    sink = RecordingTransport()
    os.chdir(REPO)
    code = run_local(load_contract(doc), display=False, transport=sink, min_interval=0)
    if code != 0:
        sys.exit(f"runtime run failed: {sink.patches[-1]}")
    times: dict[int, float] = {}
    for p in sink.patches:
        ts = p["status"]["trainerStatus"]
        m = {x["name"]: x["value"] for x in ts.get("metrics", [])}
        if "epoch_seconds" in m:
            times[int(m["epoch"])] = float(m["epoch_seconds"])
    return [times[e] for e in sorted(times)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--samples", type=int, default=8192)
    ap.add_argument("--torchrun-worker", action="store_true")
    args = ap.parse_args()
    if args.torchrun_worker:
        torchrun_worker(args.epochs, args.samples)
        return
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    base = run_torchrun(args.epochs, args.samples)
    ours = run_ours(args.epochs, args.samples)
    print("torchrun epoch s:", " ".join(f"{t:.3f}" for t in base))
    print("runtime  epoch s:", " ".join(f"{t:.3f}" for t in ours))
    ratio = steady(ours) / steady(base)
    print(
        f"RESULT runtime_vs_torchrun: steady-state epoch {steady(ours):.3f} s (runtime) vs "
        f"{steady(base):.3f} s (torchrun), ratio {ratio:.3f} (Ray's gate 1.15, aim <= 1.05)"
    )


if __name__ == "__main__":
    main()
