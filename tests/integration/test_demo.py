"""`make demo` end to end: the README's main command, on the local control plane.

The operator, KubeRay and the API server are real; the head pod's entrypoint runs through the
harness (KWOK pods never execute) with a real Ray, torch and MinIO. It checks what a user sees:
the `kubectl get rtj -w` lines go Running to Succeeded (the STATUS column, in order), the status
names the checkpoints, and the checkpoints are in the bucket.
"""

from __future__ import annotations

import json
import pathlib
import subprocess

import pytest
from conftest import KubeCluster

pytestmark = pytest.mark.integration

ROOT = pathlib.Path(__file__).resolve().parents[2]
#: The order a TrainJob's STATUS may take in the demo: forward only, never Failed or Stalled.
FORWARD = ("Pending", "Running", "Succeeded")
PHASES = {"Pending", "Running", "Suspended", "Succeeded", "Failed", "Stalled"}


def watch_statuses(out: str, name: str = "digits") -> list[str]:
    """The STATUS column of the ``kubectl get rtj NAME -w`` rows in the demo's output, in order.

    The watch section runs from its header (NAME STATUS PROGRESS ...) to the demo's next ``==>``
    step; a row whose STATUS is still empty is left out (its second field is then the age).
    """
    lines = out.splitlines()
    starts = [
        i for i, line in enumerate(lines) if line.split()[:3] == ["NAME", "STATUS", "PROGRESS"]
    ]
    assert len(starts) == 1, f"expected one `kubectl get rtj -w` header, found {len(starts)}"
    statuses = []
    for line in lines[starts[0] + 1 :]:
        if "==>" in line:
            break
        fields = line.split()
        if len(fields) >= 2 and fields[0] == name and fields[1] in PHASES:
            statuses.append(fields[1])
    return statuses


def collapse(statuses: list[str]) -> list[str]:
    """Consecutive repeats folded: the watch prints a row per update, progress included."""
    return [s for i, s in enumerate(statuses) if i == 0 or statuses[i - 1] != s]


def went_forward_to_succeeded(statuses: list[str]) -> bool:
    """Through Running to Succeeded, only forward (Pending, Running, Succeeded), nothing else."""
    seen = collapse(statuses)
    steps = [FORWARD.index(s) if s in FORWARD else -1 for s in seen]
    return seen[-2:] == ["Running", "Succeeded"] and steps == sorted(set(steps)) and -1 not in steps


def test_watch_statuses_reads_the_status_column_in_order() -> None:
    out = "\n".join(
        [
            "NAME      JOB STATUS   DEPLOYMENT STATUS",
            "digits-0               Initializing",
            "\x1b[1m==> kubectl get rtj digits -w\x1b[0m",
            "NAME     STATUS      PROGRESS   EPOCH   WORKERS   AGE",
            "digits                                            1s",
            "digits   Pending                                  4s",
            "digits   Running                        2         10s",
            "digits   Running     12         0       2         31s",
            "digits   Succeeded   100        7       2         40s",
            "\x1b[1m==> raytrain get digits\x1b[0m",
            "digits   Failed",
        ]
    )
    assert watch_statuses(out) == ["Pending", "Running", "Running", "Succeeded"]
    assert collapse(watch_statuses(out)) == ["Pending", "Running", "Succeeded"]
    assert went_forward_to_succeeded(watch_statuses(out))


@pytest.mark.parametrize(
    "statuses",
    [
        ["Pending", "Succeeded"],  # never seen Running
        ["Running", "Failed"],
        ["Running", "Failed", "Running", "Succeeded"],
        ["Running", "Pending", "Running", "Succeeded"],
        ["Pending", "Running"],  # stopped before Succeeded
        [],
    ],
)
def test_a_watch_that_did_not_go_forward_to_succeeded_is_caught(statuses: list[str]) -> None:
    assert not went_forward_to_succeeded(statuses)


def test_make_demo_trains_the_digits_job_to_succeeded(
    kube_cluster: KubeCluster, namespace: str
) -> None:
    pytest.importorskip("ray", reason="the demo needs the runtime extra: make install")
    env = {
        **kube_cluster.env,
        "DEMO_KUBECONFIG": str(kube_cluster.kubeconfig),
        "DEMO_NAMESPACE": namespace,
        "DEMO_EPOCHS": "3",
    }
    try:
        proc = subprocess.run(
            ["bash", str(ROOT / "scripts" / "demo.sh")],
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=840,
            check=False,
        )
        out = proc.stdout + proc.stderr
        assert proc.returncode == 0, out[-6000:]

        job = kube_cluster.get_json("rtj", "digits", "-n", namespace)
        conditions = {c["type"]: c for c in job["status"]["conditions"]}
        assert conditions["Succeeded"]["status"] == "True", conditions
        assert conditions["Failed"]["status"] == "False", conditions
        trainer = job["status"]["trainerStatus"]
        assert trainer["progressPercentage"] == 100
        assert trainer["epoch"] == 2
        latest = job["status"]["checkpoint"]["latestURI"]
        assert latest.startswith("s3://raytrain/checkpoints/digits-"), latest
        # What the user is shown: the watch went forward through Running to Succeeded (no
        # Failed, no step back), then the bucket.
        statuses = watch_statuses(out)
        assert went_forward_to_succeeded(statuses), statuses
        listed = [line for line in out.splitlines() if line.startswith("s3://raytrain/")]
        assert any(latest.rsplit("/", 1)[1] in line for line in listed), listed
    finally:
        # The demo's operator has stopped: let the namespace go without it.
        kube_cluster.kubectl(
            "patch", "rtj", "digits", "-n", namespace, "--type=merge",
            "-p", json.dumps({"metadata": {"finalizers": None}}), check=False,
        )  # fmt: skip
