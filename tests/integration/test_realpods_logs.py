"""Logs that outlive the Ray cluster, on real pods: a TrainJob whose loop raises leaves its
attempt's driver log and its workers' errors in MinIO, and `raytrain logs` reads them back
through a reader pod that it deletes afterwards. (A finished run's metrics history, and a new
job continuing it: test_realpods.py's digits test.)

Those need the real node (marker `realnode`): they run only inside the network namespace that
`make test` creates (e2e/netns/run.sh), with the images, MinIO and chart of test_realpods.py.
The first test needs only the control plane: the API server admits the reader pod in a
namespace that enforces the `restricted` Pod Security Standard.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from _wait import wait_for
from conftest import KubeCluster
from realpods import condition, pods_of
from test_realpods import (
    DIGITS,
    START_TIMEOUT,
    TRAIN_TIMEOUT,
    RealWorld,
    _apply_digits,
    _logs,
    _trainjob,
    real_world,
)

from raytrain import reader
from raytrain_contract.api.v1alpha1 import TrainJobSpec
from raytrain_contract.meta import Meta

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


def _readers(world: RealWorld, namespace: str) -> list[str]:
    pods = pods_of(world.cluster, namespace, "raytrain.dev/role=log-reader")
    return [p["metadata"]["name"] for p in pods]


@pytest.mark.realnode
def test_a_python_exception_fails_at_once_with_its_traceback_and_leaves_its_logs_in_storage(
    real_world: RealWorld, namespace: str
) -> None:
    """A bug in the training loop, as the user meets it: the job fails at once (a user's
    exception is not retried, though spec.backoffLimit allows two), its Failed condition quotes
    the traceback, and the attempt's driver log and the workers' errors stay in storage for
    `raytrain logs` after the cluster is gone."""
    assert DIGITS.exists()
    # int("wide") raises ValueError in every worker at once; no in-cluster restart either.
    _apply_digits(
        real_world,
        namespace,
        "broken",
        config={"epochs": 2, "hidden": "wide"},
        failure={"maxFailures": 0},
        backoffLimit=2,
    )

    def failed() -> dict[str, Any] | None:
        tj = _trainjob(real_world, namespace, "broken")
        return tj if tj.get("status", {}).get("phase") == "Failed" else None

    tj = wait_for(failed, timeout=START_TIMEOUT * 2 + TRAIN_TIMEOUT, what="broken Failed")
    status = json.dumps(tj["status"], indent=1)
    assert tj["status"]["attempt"] == 0 and tj["status"]["restarts"] == 0, status
    failed_condition = condition(tj, "Failed") or {}
    assert failed_condition.get("reason") == "UserException", status
    message = failed_condition["message"]
    assert "ValueError" in message and "Traceback (most recent call last):" in message
    assert "examples/digits/train.py" in message and "int(config.get(" in message
    trainer = tj["status"]["trainerStatus"]["message"]
    # The workers that failed before Ray Train stopped the group: one or both.
    assert re.match(r"training failed: worker \d: ValueError: invalid literal for int\(\)", trainer)

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
    assert "invalid literal for int() with base 10: 'wide'" in worker.stdout
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
