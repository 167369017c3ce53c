"""Logs that outlive the Ray cluster, on real pods: a TrainJob whose loop raises leaves its
attempt's driver log and its workers' errors in MinIO, a finished one its metrics history, and
`raytrain logs` reads them back through a reader pod that it deletes afterwards.

Those need the real node (marker `realnode`): they run only inside the network namespace that
`make test` creates (e2e/netns/run.sh), with the images, MinIO and chart of test_realpods.py.
The first test needs only the control plane: the API server admits the reader pod in a
namespace that enforces the `restricted` Pod Security Standard.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from typing import Any

import pytest
from _wait import wait_for
from conftest import KubeCluster
from realpods import pods_of
from test_realpods import (
    DIGITS,
    START_TIMEOUT,
    TRAIN_TIMEOUT,
    RealWorld,
    _apply_digits,
    _trainjob,
    real_world,
)

from raytrain_operator.api.v1alpha1 import TrainJobSpec
from raytrain_operator.builders import reader
from raytrain_operator.builders.meta import Meta

__all__ = ["real_world"]  # the module-scoped fixture, shared with test_realpods.py

pytestmark = [pytest.mark.timeout(1800)]


def _spec(storage: dict[str, Any]) -> TrainJobSpec:
    return TrainJobSpec.model_validate({
        "image": "raytrain/trainer-runtime:0.1.0",
        "entrypoint": "examples.digits.train:train_loop_per_worker",
        "scaling": {"numWorkers": 2},
        "storage": storage,
    })  # fmt: skip


def test_the_api_server_admits_the_reader_pod_under_the_restricted_standard(
    kube_cluster: KubeCluster, namespace: str
) -> None:
    kube_cluster.kubectl(
        "label", "namespace", namespace,
        "pod-security.kubernetes.io/enforce=restricted",
        "pod-security.kubernetes.io/enforce-version=latest",
    )  # fmt: skip
    meta = Meta(name="digits", namespace=namespace, uid="5f0c2a7e-91b3-4c1d-8e2f-0123456789ab")
    s3 = {"s3": {"uri": "s3://bucket/prefix", "endpoint": "http://minio:9000",
                 "credentialsSecret": {"name": "digits-s3"}}}  # fmt: skip
    pvc = {"pvc": {"claimName": "ckpt", "mountPath": "/mnt/ckpt"}}
    for storage in (s3, pvc):
        spec = _spec(storage)
        path = f"{reader.attempt_dir(spec, meta, 0)}/driver.log"
        pod = reader.build_reader_pod(spec, meta, 0, path)
        made = kube_cluster.kubectl(
            "create", "--dry-run=server", "-n", namespace, "-o", "json", "-f", "-",
            input=json.dumps(pod), check=False,
        )  # fmt: skip
        assert made.returncode == 0, made.stderr
        admitted = json.loads(made.stdout)
        assert admitted["metadata"]["name"].startswith("digits-logs-")
        assert admitted["spec"]["containers"][0]["command"][4] == path


def _logs(world: RealWorld, namespace: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "raytrain_operator.cli", "logs", *args, "-n", namespace],
        env=world.cluster.env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def _readers(world: RealWorld, namespace: str) -> list[str]:
    pods = pods_of(world.cluster, namespace, "raytrain.dev/role=log-reader")
    return [p["metadata"]["name"] for p in pods]


@pytest.mark.realnode
def test_a_failed_attempt_leaves_its_logs_in_storage(real_world: RealWorld, namespace: str) -> None:
    assert DIGITS.exists()
    # Every worker fails at once (int("three")): a user exception, not retried.
    _apply_digits(
        real_world,
        namespace,
        "broken",
        config={"epochs": "three"},
        failure={"maxFailures": 0},
        backoffLimit=1,
    )

    def failed() -> dict[str, Any] | None:
        tj = _trainjob(real_world, namespace, "broken")
        return tj if tj.get("status", {}).get("phase") == "Failed" else None

    tj = wait_for(failed, timeout=START_TIMEOUT * 2 + TRAIN_TIMEOUT, what="broken Failed")
    assert tj["status"]["attempt"] == 0, json.dumps(tj["status"], indent=1)

    # No report came before the failure, so there is no metrics file: the message says what
    # the attempt's directory holds instead.
    metrics = _logs(real_world, namespace, "broken", "--attempt", "0", "--metrics")
    assert metrics.returncode == 1
    # Both workers raise, but Ray Train may stop the group on the first failure it sees, before
    # the second is reported: one or two error files, never none.
    held = " ".join(metrics.stderr.split())
    assert re.search(
        r"holds: driver\.log, worker-[01]\.error\.txt(, worker-1\.error\.txt)?\. ", held
    ), held
    rank = re.findall(r"worker-([01])\.error\.txt", held)[0]

    # A worker's error is read from storage, whether or not the cluster is still there.
    worker = _logs(real_world, namespace, "broken", "--attempt", "0", "--worker", rank)
    assert worker.returncode == 0, worker.stderr
    assert "exception: builtins.ValueError" in worker.stdout
    assert "invalid literal for int() with base 10: 'three'" in worker.stdout
    assert "train.py" in worker.stdout  # the end of the traceback, in the user's loop

    driver = _logs(real_world, namespace, "broken", "--attempt", "0")
    assert driver.returncode == 0, driver.stderr
    assert ", attempt 0: 2 workers" in driver.stdout
    assert "training failed: worker" in driver.stdout

    # Without --attempt: live from the submitter pod while it is there, else the stored copy.
    current = _logs(real_world, namespace, "broken")
    assert current.returncode == 0, current.stderr
    assert "training failed: worker" in current.stdout

    missing = _logs(real_world, namespace, "broken", "--attempt", "0", "--worker", "7")
    assert missing.returncode == 1
    err = " ".join(missing.stderr.split())
    assert "no stored log for attempt 0 of TrainJob broken at s3://raytrain/checkpoints/" in err
    assert "worker-7.error.txt" in err and f"worker-{rank}.error.txt" in err

    never = _logs(real_world, namespace, "broken", "--attempt", "1")
    assert never.returncode == 1 and "never started" in never.stderr

    # Every reader pod was deleted.
    assert wait_for(
        lambda: _readers(real_world, namespace) == [] or None,
        timeout=120,
        what="no log reader pod left",
    )


@pytest.mark.realnode
def test_a_finished_runs_metrics_history_is_stored_and_a_new_job_continues_it(
    real_world: RealWorld, namespace: str
) -> None:
    _apply_digits(real_world, namespace, "history", epochs=3)
    waited = real_world.cluster.kubectl(
        "wait", "trainjob/history", "-n", namespace, "--for=condition=Succeeded",
        f"--timeout={TRAIN_TIMEOUT}s", check=False, timeout=TRAIN_TIMEOUT + 60,
    )  # fmt: skip
    assert waited.returncode == 0, waited.stderr
    metrics = _logs(real_world, namespace, "history", "--metrics")
    assert metrics.returncode == 0, metrics.stderr
    lines = [json.loads(x) for x in metrics.stdout.splitlines()]
    assert [r["epoch"] for r in lines] == [0, 1, 2]
    assert all(r["checkpoint"].startswith("s3://raytrain/checkpoints/") for r in lines)
    stored = _logs(real_world, namespace, "history", "--attempt", "0")
    assert stored.returncode == 0, stored.stderr
    assert "finished" in stored.stdout

    # A new TrainJob (a new run) that starts from the finished one's latest checkpoint.
    latest = _trainjob(real_world, namespace, "history")["status"]["checkpoint"]["latestURI"]
    _apply_digits(real_world, namespace, "more", epochs=5, resumeFrom={"trainJob": "history"})
    # Once the new job has recorded where it starts, the old one may go (and free its cluster:
    # the node has room for one at a time).
    wait_for(
        lambda: _trainjob(real_world, namespace, "more").get("status", {}).get("resumedFrom"),
        timeout=120,
        what="status.resumedFrom of the new job",
    )
    real_world.cluster.kubectl("delete", "trainjob", "history", "-n", namespace, "--wait=false")
    waited = real_world.cluster.kubectl(
        "wait", "trainjob/more", "-n", namespace, "--for=condition=Succeeded",
        f"--timeout={START_TIMEOUT + TRAIN_TIMEOUT}s", check=False,
        timeout=START_TIMEOUT + TRAIN_TIMEOUT + 60,
    )  # fmt: skip
    more = _trainjob(real_world, namespace, "more")
    assert waited.returncode == 0, (waited.stderr, json.dumps(more.get("status"), indent=1))
    assert more["status"]["resumedFrom"] == latest
    assert more["status"]["runName"] not in latest  # a run of its own
    continued = _logs(real_world, namespace, "more", "--metrics")
    assert continued.returncode == 0, continued.stderr
    assert [json.loads(x)["epoch"] for x in continued.stdout.splitlines()] == [3, 4]
    driver = _logs(real_world, namespace, "more", "--attempt", "0")
    assert f"the run starts from {latest} (spec.resumeFrom)" in driver.stdout, driver.stdout
