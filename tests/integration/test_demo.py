"""`make demo` end to end: the README's main command, on the local control plane.

The operator, KubeRay and the API server are real; the head pod's entrypoint runs through the
harness (KWOK pods never execute) with a real Ray, torch and MinIO. It checks what a user sees:
the TrainJob goes Running with progress to Succeeded, its status names the checkpoints, and the
checkpoints are in the bucket.
"""

from __future__ import annotations

import json
import pathlib
import subprocess

import pytest
from conftest import KubeCluster

pytestmark = pytest.mark.integration

ROOT = pathlib.Path(__file__).resolve().parents[2]


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
        # What the user is shown: the watch went through Running to Succeeded, then the bucket.
        assert "Running" in out and "Succeeded" in out
        listed = [line for line in out.splitlines() if line.startswith("s3://raytrain/")]
        assert any(latest.rsplit("/", 1)[1] in line for line in listed), listed
    finally:
        # The demo's operator has stopped: let the namespace go without it.
        kube_cluster.kubectl(
            "patch", "rtj", "digits", "-n", namespace, "--type=merge",
            "-p", json.dumps({"metadata": {"finalizers": None}}), check=False,
        )  # fmt: skip
