"""`kubectl raytrain ...` end to end: kubectl finds the `kubectl-raytrain` script on PATH, and
each command talks to the real API server. Status is written as the operator would (no operator
runs here), through the status subresource."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from _ports import free_port
from conftest import KubeCluster
from test_sdk import RUNNING, condition, crds, kubeconfig, set_status, spec_of  # noqa: F401 - fixtures, used by name

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
LONG = "s3://raytrain/checkpoints/digits-0123456789ab/" + "nested-directory/" * 4 + "ckpt_7"


def run(
    kube: KubeCluster, config: Path, *args: str, columns: int = 40
) -> subprocess.CompletedProcess[str]:
    """`kubectl raytrain ARGS` on a narrow terminal (COLUMNS=40), as a user would type it."""
    env = {**os.environ, "KUBECONFIG": str(config), "COLUMNS": str(columns)}
    return subprocess.run(
        [kube.kubectl_path, "raytrain", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def ok(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def test_submit_list_get_checkpoints_events_delete(
    kube_cluster: KubeCluster,
    kubeconfig: Path,  # noqa: F811
    namespace: str,
    crds: None,  # noqa: F811
) -> None:
    out = ok(run(kube_cluster, kubeconfig, "submit", str(REPO / "examples" / "digits.yaml")))
    assert out.splitlines() == ["secret/digits-s3 created", "trainjob/digits created"]
    assert "digits" in ok(run(kube_cluster, kubeconfig, "list"))
    assert f"{namespace}" in ok(run(kube_cluster, kubeconfig, "list", "-A", "-o", "json"))

    status = json.loads(json.dumps(RUNNING))
    status["checkpoint"]["latestURI"] = LONG
    set_status(kube_cluster, namespace, "digits", status)
    detail = ok(run(kube_cluster, kubeconfig, "get", "digits"))
    # on a 40-column terminal the URI is still one piece on one line
    assert f"Checkpoint:  latest {LONG}\n" in detail
    assert "Status:      Running" in detail
    uris = ok(run(kube_cluster, kubeconfig, "checkpoints", "digits", "-o", "uri")).splitlines()
    assert uris == [LONG, RUNNING["checkpoint"]["bestURI"]]  # type: ignore[index]
    # the listing reads the bucket: here through an endpoint nothing listens on
    closed = f"http://127.0.0.1:{free_port()}"
    listing = run(kube_cluster, kubeconfig, "checkpoints", "digits", "--s3-endpoint", closed)
    assert listing.returncode == 1 and "Traceback" not in listing.stderr
    assert f"cannot reach the S3 endpoint {closed}" in " ".join(listing.stderr.split())

    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": "digits-created"},
        "involvedObject": {"kind": "RayJob", "name": "digits-0", "namespace": namespace},
        "reason": "Created",
        "message": f"checkpoint written to {LONG}",
        "type": "Normal",
        "firstTimestamp": "2026-11-23T10:00:00Z",
        "lastTimestamp": "2026-11-23T10:00:00Z",
    }
    kube_cluster.kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(event))
    lines = ok(run(kube_cluster, kubeconfig, "events", "digits")).splitlines()
    assert lines[0].split()[:3] == ["LAST", "SEEN", "TYPE"]
    assert lines[1].endswith(f"Created   rayjob/digits-0   checkpoint written to {LONG}")

    assert ok(run(kube_cluster, kubeconfig, "delete", "digits")) == "trainjob/digits deleted\n"
    gone = run(kube_cluster, kubeconfig, "get", "digits")
    assert gone.returncode == 1 and "no TrainJob 'digits'" in gone.stderr


def test_suspend_resume_and_wait(
    kube_cluster: KubeCluster,
    kubeconfig: Path,  # noqa: F811
    namespace: str,
    crds: None,  # noqa: F811
) -> None:
    ok(run(kube_cluster, kubeconfig, "submit", str(REPO / "examples" / "digits.yaml")))
    set_status(kube_cluster, namespace, "digits", RUNNING)
    assert "suspended" in ok(run(kube_cluster, kubeconfig, "suspend", "digits"))
    assert spec_of(kube_cluster, namespace, "digits")["spec"]["suspend"] is True
    resumed = json.loads(ok(run(kube_cluster, kubeconfig, "resume", "digits", "-o", "json")))
    assert resumed == {"name": "digits", "suspended": False, "phase": "Running"}

    slow = run(kube_cluster, kubeconfig, "wait", "digits", "--for", "Complete", "--timeout", "2")
    assert slow.returncode == 1
    assert "is not Succeeded after 2s: phase Running" in " ".join(slow.stderr.split())

    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    waiter = subprocess.Popen(
        [kube_cluster.kubectl_path, "raytrain", "wait", "digits", "--for", "Complete",
         "--timeout", "60"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        assert waiter.stdout is not None
        assert waiter.stdout.readline() == "digits: Running (40%)\n"  # it is watching now
        set_status(
            kube_cluster, namespace, "digits",
            {"phase": "Succeeded", "conditions": [condition("Succeeded", True, "Done", gen=3)]},
        )  # fmt: skip
        out, err = waiter.communicate(timeout=60)
    finally:
        waiter.kill()
    assert waiter.returncode == 0, err
    assert out.splitlines() == ["digits: Succeeded (40%)", "digits: condition Complete met"]

    set_status(
        kube_cluster, namespace, "digits",
        {"phase": "Failed", "conditions": [condition("Failed", True, "DeadlineExceeded", "late")]},
    )  # fmt: skip
    failed = run(kube_cluster, kubeconfig, "wait", "digits", "-o", "json")
    assert failed.returncode == 1
    assert json.loads(failed.stdout) == {
        "name": "digits", "met": False, "message": "DeadlineExceeded: late",
    }  # fmt: skip


def test_errors_name_namespace_context_and_what_to_do(
    kube_cluster: KubeCluster,
    kubeconfig: Path,  # noqa: F811
    namespace: str,
    crds: None,  # noqa: F811
) -> None:
    missing = run(kube_cluster, kubeconfig, "list", "-n", "no-such-ns")
    assert missing.returncode == 1
    assert "namespace 'no-such-ns' does not exist" in " ".join(missing.stderr.split())
    context = run(kube_cluster, kubeconfig, "list", "--context", "nope")
    assert context.returncode == 1 and "context 'nope' is not in kubeconfig" in context.stderr
    ok(run(kube_cluster, kubeconfig, "submit", str(REPO / "examples" / "digits.yaml")))
    session = run(kube_cluster, kubeconfig, "session", "digits")
    assert session.returncode == 1
    assert "has no Ray cluster now (phase Pending)" in " ".join(session.stderr.split())
    again = run(kube_cluster, kubeconfig, "submit", str(REPO / "examples" / "digits.yaml"))
    assert again.returncode == 1 and "already exists" in again.stderr
    usage = run(kube_cluster, kubeconfig, "--help", columns=100)
    assert ok(usage).startswith("usage: kubectl raytrain")
