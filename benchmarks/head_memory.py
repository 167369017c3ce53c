"""The Ray head's memory on a real pod, against the head's default limit.

Needs the local cluster `make up` starts (run `make up` first; `make down` after). Through
`make shell`'s one-command form it submits the smallest loop (a folder with `nn.Linear(10, 2)`
on two workers, three reports with a checkpoint each, `raytrain submit --code`) with every size
left at its default but CPU (scripts/on_real_node.py), then samples the head pod's working set
(memory usage less inactive file, what the kubelet reports and what Ray's memory monitor
counts on cgroup v1) from the kubelet's summary API once a second until the job ends. Prints
the peak against the head's default memory limit (the operator's DEFAULT_HEAD_RESOURCES) and
against Ray's 95 % kill threshold of it.

    make up && python benchmarks/head_memory.py [--runs N]; make down
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
NAME = "headmem"
LOOP = """
import tempfile, pathlib
import torch
import ray.train
from ray.train.torch import prepare_model


def train(config):
    model = prepare_model(torch.nn.Linear(10, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(config["epochs"]):
        x = torch.randn(64, 10)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        with tempfile.TemporaryDirectory() as d:
            torch.save(model.state_dict(), pathlib.Path(d, "model.pt"))
            ckpt = ray.train.Checkpoint.from_directory(d)
            ray.train.report({"loss": loss.item(), "epoch": epoch}, checkpoint=ckpt)
"""


def shell(script: str, timeout: float = 900) -> str:
    proc = subprocess.run(
        ["bash", "scripts/shell.sh", "bash", "-ec", script], cwd=REPO, capture_output=True,
        text=True, timeout=timeout, check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        sys.exit(f"failed: {script}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc.stdout


def default_limit() -> int:
    from raytrain_operator.builders.pods import DEFAULT_HEAD_RESOURCES
    from raytrain_operator.builders.quantities import parse

    return int(parse(DEFAULT_HEAD_RESOURCES["limits"]["memory"]))


def head_working_set(summary: dict[str, Any], namespace: str) -> int | None:
    for pod in summary.get("pods", []):
        ref = pod.get("podRef", {})
        if (
            ref.get("namespace") == namespace
            and ref.get("name", "").startswith(f"{NAME}-")
            and ("-head-" in ref["name"])
        ):
            ws = (pod.get("memory") or {}).get("workingSetBytes")
            return int(ws) if ws is not None else None
    return None


def one_run(tmp: Path) -> tuple[int, str]:
    src = tmp / "src"
    (src / "smallest").mkdir(parents=True, exist_ok=True)
    (src / "smallest" / "__init__.py").write_text("")
    (src / "smallest" / "loop.py").write_text(textwrap.dedent(LOOP))
    docs = [d for d in yaml.safe_load_all((REPO / "examples" / "digits.yaml").read_text()) if d]
    for doc in docs:
        if doc.get("kind") == "TrainJob":
            doc["metadata"]["name"] = NAME
            spec = doc["spec"]
            spec["entrypoint"] = "smallest.loop:train"
            spec["config"] = {"epochs": 3}
            spec["scaling"] = {"numWorkers": 2}
            spec.pop("checkpoint", None)
    job = tmp / "job.yaml"
    job.write_text(yaml.safe_dump_all(docs))
    placed = tmp / "placed.yaml"
    shell(
        f"python scripts/on_real_node.py {job} > {placed}\n"
        f"raytrain submit {placed} --code {src} --replace -o json >/dev/null"
    )
    namespace = shell("kubectl config view --minify -o jsonpath='{..namespace}'").strip()
    namespace = namespace or "default"
    peak = 0
    done = threading.Event()
    phase = ["?"]

    def wait() -> None:
        out = subprocess.run(
            ["bash", "scripts/shell.sh", "raytrain", "wait", NAME, "--timeout", "1500"],
            cwd=REPO, capture_output=True, text=True, check=False,
        )  # fmt: skip
        phase[0] = "Succeeded" if out.returncode == 0 else f"not Succeeded: {out.stdout[-500:]}"
        done.set()

    threading.Thread(target=wait, daemon=True).start()
    while not done.is_set():
        raw = subprocess.run(
            ["bash", "scripts/shell.sh", "kubectl", "get", "--raw",
             "/api/v1/nodes/realnode/proxy/stats/summary"],
            cwd=REPO, capture_output=True, text=True, check=False,
        )  # fmt: skip
        if raw.returncode == 0:
            ws = head_working_set(json.loads(raw.stdout), namespace)
            if ws:
                peak = max(peak, ws)
        done.wait(1.0)
    shell(f"raytrain delete {NAME}", timeout=300)
    return peak, phase[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args(argv)
    limit = default_limit()
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    print(f"head_memory: {started}; {os.cpu_count()} CPUs; load {os.getloadavg()[0]:.2f}")
    print(
        "workload: nn.Linear(10, 2) on 2 workers, 3 reports with a checkpoint, raytrain submit "
        "--code, every size at its default but CPU; head working set sampled every 1 s"
    )
    print("| run | head peak working set | of the default limit | of Ray's 95 % threshold | job |")
    print("|---|---|---|---|---|")
    for run in range(1, args.runs + 1):
        with tempfile.TemporaryDirectory() as tmp:
            peak, phase = one_run(Path(tmp))
        print(f"| {run} | {peak / 2**30:.2f} GiB | {peak / limit:.2f} of {limit / 2**30:g} GiB "
              f"| {peak / (0.95 * limit):.2f} | {phase} |", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
