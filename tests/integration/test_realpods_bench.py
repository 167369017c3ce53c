"""The runtime against plain torchrun on real pods: the measurement behind
benchmarks/realpod_runtime_vs_torchrun.py.

The workload of benchmarks/runtime_vs_torchrun.py (an MLP on synthetic data, 2 workers, gloo,
one thread each, a ``torch.save`` checkpoint every epoch), reaching the pods in a ConfigMap
mounted at /app/bench, with the checkpoints of both arms on one ReadWriteMany volume (a
hostPath PersistentVolume on the real node):

- runtime: a TrainJob (the chart's operator, KubeRay, a Ray head and two worker pods, the
  submitter), storage.pvc on the volume, entrypoint ``bench.runtime_vs_torchrun:ray_loop``;
- torchrun: one pod running ``torchrun --standalone --nproc_per_node 2`` on the same loop under
  DDP, rank 0 saving into the same volume, then a barrier;
- torchrun-2pods (only with RAYTRAIN_BENCH_SPLIT=1): the same torchrun job as two pods of one
  rank each, a quarter CPU each like the runtime's workers, rank 1 meeting rank 0 through a
  headless Service. It tells how much of the runtime's slower loop is the split itself (two CPU
  quotas that cannot lend each other the time one waits in the all-reduce) and how much the Ray
  processes sharing a worker pod's quota.

All arms train on the same CPU budget: each of the runtime's two workers is limited to a
quarter CPU (the operator sets a worker's limits to its requests), the torchrun pod to half a
CPU; the runtime's head and submitter come on top, as they do for a user.

Per run: end to end, from applying the TrainJob (the pod) to seeing it Succeeded; epoch to epoch
at the driver, from the times the runtime's driver wrote in the attempt's metrics.jsonl as each
report (with its checkpoint) reached it, and for torchrun the wall time rank 0 printed after
each save and barrier; the inner loop as rank 0 timed it. Runs alternate runtime, torchrun,
runtime, ...

It runs only when RAYTRAIN_BENCH_RECORD names a file (the benchmark sets it) and appends one
JSON line per run there; `make test` leaves it out (marker realpods_bench).
"""

from __future__ import annotations

import json
import os
import re
import statistics
import time
from pathlib import Path
from typing import Any

import pytest
from _wait import wait_for
from conftest import REPO
from realpods import (
    ON_REAL_NODE,
    bind_claim,
    condition,
    pods_of,
    shared_volume,
    trainjob_on_real_node,
)
from test_realpods import DIGITS_PVC, RealWorld, real_world  # noqa: F401 (the fixture)

RECORD = os.environ.get("RAYTRAIN_BENCH_RECORD", "")
RUNS = int(os.environ.get("RAYTRAIN_BENCH_RUNS", "5"))
EPOCHS = int(os.environ.get("RAYTRAIN_BENCH_EPOCHS", "8"))
SAMPLES = int(os.environ.get("RAYTRAIN_BENCH_SAMPLES", "8192"))

pytestmark = [
    pytest.mark.realnode,
    pytest.mark.realpods_bench,
    pytest.mark.timeout(7200),
    pytest.mark.skipif(
        not RECORD, reason="a benchmark: python benchmarks/realpod_runtime_vs_torchrun.py"
    ),
]

WORKLOAD = REPO / "benchmarks" / "runtime_vs_torchrun.py"
MOUNT = "/mnt/raytrain"
BENCH = {"name": "bench", "configMap": {"name": "bench-workload"}}
BENCH_MOUNT = {"name": "bench", "mountPath": "/app/bench", "readOnly": True}
TORCHRUN_EPOCH = re.compile(r"^EPOCH (\d+) ([0-9.e-]+) ([0-9.]+)$")
RUN_TIMEOUT = 1800
SPLIT = os.environ.get("RAYTRAIN_BENCH_SPLIT") == "1"
MASTER_PORT = 29500


def _runtime_job(name: str) -> list[dict[str, Any]]:
    docs = trainjob_on_real_node(DIGITS_PVC, name=name)
    for doc in docs:
        if bind_claim(doc, doc["metadata"]["name"]):
            continue
        spec = doc["spec"]
        spec["entrypoint"] = "bench.runtime_vs_torchrun:ray_loop"
        spec["config"] = {"epochs": EPOCHS, "samples": SAMPLES}
        spec.pop("checkpoint", None)
        for part in ("head", "workerTemplate"):
            spec[part] = {
                **spec[part], "volumes": [BENCH], "volumeMounts": [BENCH_MOUNT],
                "env": [{"name": "OMP_NUM_THREADS", "value": "1"}],
            }  # fmt: skip
    return docs


def _torchrun_pod(
    name: str,
    image: str,
    claim: str,
    rank: int | None = None,
    service: str = "",
    cpu: str = "500m",
    memory: str = "2Gi",
) -> dict[str, Any]:
    """The torchrun pod: both ranks (``rank`` None), or rank ``rank`` of two one-rank pods
    that meet at rank 0's pod, ``<name>-0.<service>`` (a headless Service)."""
    if rank is None:
        launch = ["--standalone", "--nproc_per_node", "2"]
        pod_name, run_name = name, name
    else:
        launch = [
            "--nnodes", "2", "--nproc_per_node", "1", "--node_rank", str(rank),
            "--master_addr", f"{name}-0.{service}", "--master_port", str(MASTER_PORT),
        ]  # fmt: skip
        pod_name, run_name = f"{name}-{rank}", name
    command = [
        "python", "-m", "torch.distributed.run", *launch,
        "/app/bench/runtime_vs_torchrun.py", "--torchrun-worker", "--epochs", str(EPOCHS),
        "--samples", str(SAMPLES), "--checkpoint-dir", f"{MOUNT}/{run_name}",
    ]  # fmt: skip
    placement: dict[str, Any] = {}
    if rank is not None:
        placement = {"hostname": pod_name, "subdomain": service}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": pod_name, "labels": {"bench-run": run_name}},
        "spec": {
            **ON_REAL_NODE,
            **placement,
            "restartPolicy": "Never",
            "securityContext": {"runAsUser": 1000, "runAsGroup": 1000},
            "containers": [
                {
                    "name": "torchrun",
                    "image": image,
                    "imagePullPolicy": "Never",
                    "command": command,
                    "env": [
                        {"name": "OMP_NUM_THREADS", "value": "1"},
                        {"name": "PYTHONUNBUFFERED", "value": "1"},
                    ],
                    # What the runtime's two workers get together (trainjob_on_real_node gives
                    # each 250m and 1Gi, and the operator sets their limits to their requests).
                    "resources": {
                        "requests": {"cpu": cpu, "memory": memory},
                        "limits": {"cpu": cpu, "memory": memory},
                    },
                    "volumeMounts": [
                        BENCH_MOUNT,
                        {"name": "checkpoints", "mountPath": MOUNT},
                        {"name": "shm", "mountPath": "/dev/shm"},
                    ],
                }
            ],
            "volumes": [
                BENCH,
                {"name": "checkpoints", "persistentVolumeClaim": {"claimName": claim}},
                {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}},
            ],
        },
    }


def _period(times: dict[int, float]) -> float:
    first, last = min(times), max(times)
    return (times[last] - times[first]) / (last - first)


def _loop(seconds: dict[int, float]) -> float:
    steady = [s for e, s in sorted(seconds.items()) if e > 0]
    return statistics.median(steady or list(seconds.values()))


def _append(row: dict[str, Any]) -> None:
    with open(RECORD, "a") as out:
        out.write(json.dumps(row) + "\n")


def _gone(world: RealWorld, namespace: str, selector: str) -> None:
    wait_for(
        lambda: not pods_of(world.cluster, namespace, selector),
        timeout=300,
        what=f"the pods {selector} gone",
    )


def test_runtime_against_torchrun_on_real_pods(
    real_world: RealWorld,  # noqa: F811 (the fixture imported above)
    namespace: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    cluster = real_world.cluster
    share = tmp_path_factory.mktemp("bench")
    share.chmod(0o777)  # the pods run as uid 1000
    claim = "digits-checkpoints"  # examples/digits-pvc.yaml's claim
    pv_name = claim  # _runtime_job binds the claim to the volume of its own name
    cluster.apply(shared_volume(pv_name, share, namespace, claim))
    cluster.apply(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "bench-workload"},
            "data": {WORKLOAD.name: WORKLOAD.read_text()},
        },
        namespace=namespace,
    )
    try:
        for i in range(RUNS):
            _runtime_run(real_world, namespace, share, i)
            _torchrun_run(real_world, namespace, share, claim, i)
            if SPLIT:
                _torchrun_split_run(real_world, namespace, share, claim, i)
    finally:
        cluster.kubectl("delete", "trainjob", "--all", "-n", namespace, "--wait=true", check=False)
        cluster.kubectl("delete", "pod", "--all", "-n", namespace, "--wait=true", check=False)
        cluster.kubectl("delete", "pvc", "--all", "-n", namespace, "--wait=false", check=False)
        cluster.kubectl("delete", "pv", pv_name, "--wait=false", check=False)


def _runtime_run(world: RealWorld, namespace: str, share: Path, i: int) -> None:
    cluster = world.cluster
    name = f"rt-{i}"
    load = os.getloadavg()[0]
    start = time.monotonic()
    for doc in _runtime_job(name):
        cluster.apply(doc, namespace=namespace)

    def finished() -> dict[str, Any] | None:
        tj: dict[str, Any] = cluster.get_json("trainjob", name, "-n", namespace)
        if (condition(tj, "Failed") or {}).get("status") == "True":
            raise AssertionError(f"TrainJob {name} failed: {json.dumps(tj['status'], indent=1)}")
        return tj if (condition(tj, "Succeeded") or {}).get("status") == "True" else None

    # Polled as often as the torchrun pod, so that both arms pay the same for being watched.
    done = wait_for(finished, timeout=RUN_TIMEOUT, what=f"{name} Succeeded", interval=0.5)
    end_to_end = time.monotonic() - start
    latest = done["status"]["checkpoint"]["latestURI"]
    run_dir = share / latest.removeprefix(f"{MOUNT}/").split("/")[0]
    metrics = run_dir / "attempt-0" / "metrics.jsonl"

    def read() -> list[dict[str, Any]] | None:
        lines = metrics.read_text().splitlines() if metrics.exists() else []
        rows = [json.loads(line) for line in lines]
        return rows if len([r for r in rows if r.get("checkpoint")]) >= EPOCHS else None

    rows = wait_for(read, timeout=60, what=f"{EPOCHS} checkpointed reports in {metrics}")
    at = {int(r["epoch"]): float(r["time"]) for r in rows if r.get("checkpoint")}
    loop = {int(r["epoch"]): float(r["metrics"]["epoch_seconds"]) for r in rows}
    assert sorted(at) == list(range(EPOCHS)), rows
    _append({
        "arm": "runtime", "run": i, "load1": load, "end_to_end": end_to_end,
        "s_per_epoch_driver": _period(at), "s_per_epoch_loop": _loop(loop),
    })  # fmt: skip
    cluster.kubectl("delete", "trainjob", name, "-n", namespace, "--wait=true", timeout=300)
    _gone(world, namespace, f"raytrain.dev/trainjob={name}")


def _torchrun_run(world: RealWorld, namespace: str, share: Path, claim: str, i: int) -> None:
    cluster = world.cluster
    name = f"torchrun-{i}"
    load = os.getloadavg()[0]
    start = time.monotonic()
    cluster.apply(_torchrun_pod(name, world.images.runtime_image, claim), namespace=namespace)

    def finished() -> str | None:
        phase = cluster.get_json("pod", name, "-n", namespace).get("status", {}).get("phase")
        if phase == "Failed":
            logs = cluster.kubectl("logs", name, "-n", namespace, "--tail=60", check=False)
            raise AssertionError(f"pod {name} failed:\n{logs.stdout}{logs.stderr}")
        return "done" if phase == "Succeeded" else None

    wait_for(finished, timeout=RUN_TIMEOUT, what=f"pod {name} Succeeded", interval=0.5)
    end_to_end = time.monotonic() - start
    out = cluster.kubectl("logs", name, "-n", namespace).stdout
    _record_torchrun("torchrun", i, load, end_to_end, out, share / name)
    cluster.kubectl("delete", "pod", name, "-n", namespace, "--wait=true", timeout=300)


def _record_torchrun(
    arm: str, i: int, load: float, end_to_end: float, out: str, checkpoints: Path
) -> None:
    """Rank 0's epoch lines in ``out`` (its log), checked and appended as one run of ``arm``."""
    at: dict[int, float] = {}
    loop: dict[int, float] = {}
    for line in out.splitlines():
        if m := TORCHRUN_EPOCH.match(line.strip()):
            loop[int(m.group(1))] = float(m.group(2))
            at[int(m.group(1))] = float(m.group(3))
    assert sorted(at) == list(range(EPOCHS)), out[-3000:]
    assert len(list(checkpoints.glob("checkpoint_*/model.pt"))) == EPOCHS
    _append({
        "arm": arm, "run": i, "load1": load, "end_to_end": end_to_end,
        "s_per_epoch_driver": _period(at), "s_per_epoch_loop": _loop(loop),
    })  # fmt: skip


def _torchrun_split_run(world: RealWorld, namespace: str, share: Path, claim: str, i: int) -> None:
    cluster = world.cluster
    name = f"torchrun2p-{i}"
    cluster.apply(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name},
            "spec": {
                "clusterIP": "None",
                "selector": {"bench-run": name},
                # Rank 1 resolves rank 0's name before rank 0 is ready.
                "publishNotReadyAddresses": True,
                "ports": [{"name": "rendezvous", "port": MASTER_PORT}],
            },
        },
        namespace=namespace,
    )
    load = os.getloadavg()[0]
    start = time.monotonic()
    for rank in (0, 1):
        pod = _torchrun_pod(
            name, world.images.runtime_image, claim, rank=rank, service=name,
            cpu="250m", memory="1Gi",
        )  # fmt: skip
        cluster.apply(pod, namespace=namespace)

    def finished() -> str | None:
        phases = []
        for rank in (0, 1):
            pod = f"{name}-{rank}"
            phase = cluster.get_json("pod", pod, "-n", namespace).get("status", {}).get("phase")
            if phase == "Failed":
                logs = cluster.kubectl("logs", pod, "-n", namespace, "--tail=60", check=False)
                raise AssertionError(f"pod {pod} failed:\n{logs.stdout}{logs.stderr}")
            phases.append(phase)
        return "done" if phases == ["Succeeded", "Succeeded"] else None

    wait_for(finished, timeout=RUN_TIMEOUT, what=f"pods {name}-0/1 Succeeded", interval=0.5)
    end_to_end = time.monotonic() - start
    out = cluster.kubectl("logs", f"{name}-0", "-n", namespace).stdout
    _record_torchrun("torchrun-2pods", i, load, end_to_end, out, share / name)
    cluster.kubectl("delete", "pod", "-l", f"bench-run={name}", "-n", namespace, "--wait=true",
                    timeout=300)  # fmt: skip
    cluster.kubectl("delete", "service", name, "-n", namespace, "--wait=true", timeout=120)
