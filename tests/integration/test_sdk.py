"""`raytrain.TrainJobClient` against a real API server with the TrainJob CRD installed.

No operator runs here: the tests write the TrainJob's status through the status subresource
with kubectl, as the operator would, and check what the SDK reads, waits for and changes.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import KubeCluster

from raytrain import (
    ConfigError,
    InvalidJobError,
    JobExistsError,
    JobFailedError,
    JobNotFoundError,
    JobStateError,
    NamespaceNotFoundError,
    TrainJob,
    TrainJobClient,
    WaitTimeoutError,
)
from raytrain_contract.api import v1alpha1 as api

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
T0 = "2026-11-23T10:00:00Z"


@pytest.fixture(scope="module")
def crds(kube_cluster: KubeCluster) -> None:
    kube_cluster.kubectl(
        "apply", "--server-side", "--force-conflicts", "--field-manager=raytrain-tests",
        "-f", str(REPO / "crds"),
    )  # fmt: skip
    kube_cluster.kubectl(
        "wait", "--for=condition=Established", "crd/trainjobs.raytrain.dev", "--timeout=60s"
    )


@pytest.fixture
def kubeconfig(kube_cluster: KubeCluster, namespace: str, tmp_path: Path) -> Path:
    """A copy of the cluster's kubeconfig whose current context defaults to the test's namespace
    (how a user sets a default namespace: `kubectl config set-context --current -n NS`)."""
    path = tmp_path / "kubeconfig"
    path.write_text(kube_cluster.kubeconfig.read_text())
    kube_cluster.kubectl("config", f"--kubeconfig={path}", "set-context", "--current",
                         f"--namespace={namespace}")  # fmt: skip
    return path


@pytest.fixture
def sdk(kubeconfig: Path, crds: None) -> TrainJobClient:
    return TrainJobClient(kubeconfig=str(kubeconfig))


def manifest(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": api.API_VERSION,
        "kind": api.KIND,
        "metadata": {"name": name},
        "spec": {
            "image": "raytrain/trainer-runtime:0.1.0",
            "entrypoint": "examples.digits.train:train_loop_per_worker",
            "scaling": {"numWorkers": 2},
            "storage": {"s3": {"uri": "s3://raytrain/checkpoints"}},
            **spec,
        },
    }


def condition(
    ctype: str, status: bool, reason: str, message: str = "", gen: int = 1
) -> dict[str, Any]:
    return {
        "type": ctype,
        "status": "True" if status else "False",
        "reason": reason,
        "message": message,
        "lastTransitionTime": T0,
        "observedGeneration": gen,
    }


def set_status(kube: KubeCluster, namespace: str, name: str, status: dict[str, Any]) -> None:
    """Write status as the operator does: a merge patch of the status subresource."""
    kube.kubectl(
        "patch", "trainjob.raytrain.dev", name, "-n", namespace, "--subresource=status",
        "--type=merge", "-p", json.dumps({"status": status}),
    )  # fmt: skip


def spec_of(kube: KubeCluster, namespace: str, name: str) -> dict[str, Any]:
    obj: dict[str, Any] = kube.get_json("trainjob.raytrain.dev", name, "-n", namespace)
    return obj


RUNNING = {
    "phase": "Running",
    "attempt": 1,
    "restarts": 1,
    "rayJobName": "digits-1",
    "rayClusterName": "digits-1-abcde",
    "runName": "digits-0123456789ab",
    "dashboardURL": "digits-1-abcde-head-svc.ns.svc.cluster.local:8265",
    "workers": {"desired": 2, "ready": 2},
    "trainerStatus": {
        "progressPercentage": 40,
        "epoch": 3,
        "step": 12,
        "estimatedRemainingSeconds": 90,
        "metrics": [{"name": "accuracy", "value": "0.91"}, {"name": "loss", "value": "0.3"}],
    },
    "checkpoint": {
        "latestURI": "s3://raytrain/checkpoints/digits-0123456789ab/checkpoint_000003",
        "bestURI": "s3://raytrain/checkpoints/digits-0123456789ab/checkpoint_000002",
        "bestMetric": "0.92",
        "count": 3,
    },
    "conditions": [
        condition("Created", True, "RayJobCreated"),
        condition("Running", True, "Training", "epoch 3 of 8"),
        condition("Suspended", False, "NotSuspended"),
        condition("Succeeded", False, "NotFinished"),
        condition("Failed", False, "NotFailed"),
    ],
}


def test_train_from_a_dict_a_file_and_a_typed_spec_then_get_and_list(
    sdk: TrainJobClient, kube_cluster: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    assert sdk.namespace == namespace  # the context's namespace, not `default`
    assert sdk.train(manifest("from-dict")) == "from-dict"

    # A file: its Secret is created first, the TrainJob after it.
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s3-creds"},
              "stringData": {"AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "b"}}  # fmt: skip
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump_all([secret, manifest("from-file")]))
    assert sdk.train(str(path)) == "from-file"
    assert kube_cluster.get_json("secret", "s3-creds", "-n", namespace)["metadata"]["name"]

    spec = api.TrainJobSpec.model_validate(manifest("x")["spec"] | {"config": {"epochs": 8}})
    assert sdk.train(spec, name="from-spec") == "from-spec"
    assert spec_of(kube_cluster, namespace, "from-spec")["spec"]["config"] == {"epochs": 8}

    job = sdk.get_job("from-dict")
    assert isinstance(job, TrainJob)
    assert (job.name, job.namespace, job.phase, job.suspended) == (
        "from-dict", namespace, "Pending", False,
    )  # fmt: skip
    assert job.uid and job.creation_timestamp is not None and job.generation == 1
    assert job.checkpoints.storage == "s3://raytrain/checkpoints"

    names = [j.name for j in sdk.list_jobs()]
    assert sorted(names) == ["from-dict", "from-file", "from-spec"]
    everywhere = {(j.namespace, j.name) for j in sdk.list_jobs(all_namespaces=True)}
    assert (namespace, "from-spec") in everywhere


def test_status_is_read_into_typed_fields(
    sdk: TrainJobClient, kube_cluster: KubeCluster, namespace: str
) -> None:
    sdk.train(manifest("digits"))
    set_status(kube_cluster, namespace, "digits", RUNNING)
    job = sdk.get_job("digits")
    assert job.phase == "Running" and job.progress == 40 and job.epoch == 3 and job.step == 12
    assert job.metrics == {"accuracy": "0.91", "loss": "0.3"}
    assert (job.attempt, job.restarts) == (1, 1)
    assert (job.ray_job_name, job.ray_cluster_name) == ("digits-1", "digits-1-abcde")
    assert (job.workers_desired, job.workers_ready) == (2, 2)
    assert job.has_condition("Running") and not job.has_condition("Succeeded")
    running = job.condition("Running")
    assert running is not None and running.message == "epoch 3 of 8"

    ckpt = sdk.get_checkpoints("digits")
    assert ckpt.latest_uri == RUNNING["checkpoint"]["latestURI"]  # type: ignore[index]
    assert ckpt.best_uri == RUNNING["checkpoint"]["bestURI"]  # type: ignore[index]
    assert (ckpt.best_metric, ckpt.count) == ("0.92", 3)
    assert ckpt.uris == [ckpt.latest_uri, ckpt.best_uri]


def test_suspend_and_resume_set_spec_suspend(
    sdk: TrainJobClient, kube_cluster: KubeCluster, namespace: str
) -> None:
    sdk.train(manifest("digits"))
    job = sdk.suspend_job("digits")
    assert job.suspended and spec_of(kube_cluster, namespace, "digits")["spec"]["suspend"] is True
    assert job.generation == 2  # a spec change: conditions of generation 1 are now stale
    assert sdk.suspend_job("digits").suspended  # already suspended: no error, no change
    job = sdk.resume_job("digits")
    assert not job.suspended
    assert spec_of(kube_cluster, namespace, "digits")["spec"]["suspend"] is False

    set_status(kube_cluster, namespace, "digits", {"phase": "Succeeded"})
    with pytest.raises(JobStateError, match="has Succeeded; a finished job cannot be suspended"):
        sdk.suspend_job("digits")


def _finish_when_watched(
    kube: KubeCluster, namespace: str, name: str, status: dict[str, Any]
) -> tuple[threading.Event, threading.Thread]:
    """Patch `status` once the waiter has seen the job (its first callback), from a thread."""
    seen = threading.Event()

    def finish() -> None:
        if seen.wait(timeout=30):
            set_status(kube, namespace, name, status)

    thread = threading.Thread(target=finish, daemon=True)
    thread.start()
    return seen, thread


def test_wait_for_complete_returns_once_succeeded(
    sdk: TrainJobClient, kube_cluster: KubeCluster, namespace: str
) -> None:
    sdk.train(manifest("digits"))
    set_status(kube_cluster, namespace, "digits", RUNNING)
    done = {
        "phase": "Succeeded",
        "trainerStatus": {"progressPercentage": 100, "epoch": 8},
        "conditions": [
            *RUNNING["conditions"][:1],  # type: ignore[index]
            condition("Running", False, "Finished"),
            condition("Succeeded", True, "TrainingSucceeded", "8 epochs"),
        ],
    }
    seen, thread = _finish_when_watched(kube_cluster, namespace, "digits", done)
    phases: list[str] = []

    def callback(job: TrainJob) -> None:
        phases.append(job.phase)
        seen.set()

    job = sdk.wait_for_job_status("digits", "Complete", timeout=60, callbacks=[callback])
    thread.join(timeout=30)
    assert job.phase == "Succeeded" and job.progress == 100
    assert phases[0] == "Running" and phases[-1] == "Succeeded"


def test_wait_ends_when_the_job_fails_and_times_out_naming_the_conditions(
    sdk: TrainJobClient, kube_cluster: KubeCluster, namespace: str
) -> None:
    sdk.train(manifest("digits"))
    set_status(kube_cluster, namespace, "digits", RUNNING)
    with pytest.raises(WaitTimeoutError) as timeout:
        sdk.wait_for_job_status("digits", {"Succeeded", "Suspended"}, timeout=2)
    text = str(timeout.value)
    assert f"TrainJob {namespace}/digits is not Succeeded or Suspended after 2s" in text
    assert "phase Running" in text and "Running=True (Training)" in text
    assert isinstance(timeout.value, TimeoutError) and timeout.value.job is not None

    failed = {
        "phase": "Failed",
        "conditions": [condition("Failed", True, "BackoffLimitExceeded", "2 attempts failed")],
    }
    seen, thread = _finish_when_watched(kube_cluster, namespace, "digits", failed)
    with pytest.raises(JobFailedError, match="BackoffLimitExceeded: 2 attempts failed") as err:
        sdk.wait_for_job_status("digits", timeout=60, callbacks=[lambda job: seen.set()])
    thread.join(timeout=30)
    assert isinstance(err.value, RuntimeError) and err.value.job.phase == "Failed"
    # waiting for Failed is met by it
    assert sdk.wait_for_job_status("digits", "Failed", timeout=10).phase == "Failed"


def test_a_condition_of_an_older_generation_does_not_end_a_wait(
    sdk: TrainJobClient, kube_cluster: KubeCluster, namespace: str
) -> None:
    sdk.train(manifest("digits"))
    set_status(kube_cluster, namespace, "digits", RUNNING)
    sdk.suspend_job("digits")  # generation 2; the Running condition is of generation 1
    with pytest.raises(WaitTimeoutError):
        sdk.wait_for_job_status("digits", "Running", timeout=1)


def test_delete(sdk: TrainJobClient, kube_cluster: KubeCluster, namespace: str) -> None:
    sdk.train(manifest("digits"))
    sdk.delete_job("digits")
    with pytest.raises(JobNotFoundError, match=f"no TrainJob 'digits' in namespace '{namespace}'"):
        sdk.get_job("digits")
    with pytest.raises(JobNotFoundError):
        sdk.delete_job("digits")


def _event(name: str, kind: str, obj: str, reason: str, when: str, uid: str = "") -> dict[str, Any]:
    involved: dict[str, Any] = {"kind": kind, "name": obj, "apiVersion": "v1"}
    if uid:
        involved["uid"] = uid
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name},
        "involvedObject": involved,
        "reason": reason,
        "message": f"{reason} of {obj}",
        "type": "Warning" if reason == "BackOff" else "Normal",
        "firstTimestamp": when,
        "lastTimestamp": when,
        "count": 1,
        "source": {"component": "test"},
    }


def test_events_of_the_job_and_its_children_only(
    sdk: TrainJobClient, kube_cluster: KubeCluster, namespace: str
) -> None:
    sdk.train(manifest("a"))
    sdk.train(manifest("a-1"))
    set_status(kube_cluster, namespace, "a", {"attempt": 1, "rayJobName": "a-1"})
    uid = sdk.get_job("a").uid or ""
    other_uid = sdk.get_job("a-1").uid or ""
    events = [
        _event("e1", "TrainJob", "a", "Created", "2026-11-23T10:00:01Z", uid),
        _event("e2", "RayJob", "a-0", "Submitted", "2026-11-23T10:00:02Z"),
        _event("e3", "Pod", "a-1-x7k2p-head-abcde", "BackOff", "2026-11-23T10:00:04Z"),
        _event("e4", "Job", "a-1", "SuccessfulCreate", "2026-11-23T10:00:03Z"),
        # TrainJob a-1 and its children belong to another job
        _event("x1", "TrainJob", "a-1", "Created", "2026-11-23T10:00:01Z", other_uid),
        _event("x2", "RayJob", "a-1-0", "Submitted", "2026-11-23T10:00:02Z"),
        _event("x3", "Pod", "a-1-0-qwert-head-zxcvb", "Pulled", "2026-11-23T10:00:02Z"),
        # attempt 2 of a does not exist yet
        _event("x4", "RayJob", "a-2", "Submitted", "2026-11-23T10:00:02Z"),
    ]
    for ev in events:
        ev["involvedObject"]["namespace"] = namespace
        kube_cluster.kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(ev))
    found = sdk.get_job_events("a")
    assert [(e.involved_object_kind, e.involved_object_name, e.reason) for e in found] == [
        ("TrainJob", "a", "Created"),
        ("RayJob", "a-0", "Submitted"),
        ("Job", "a-1", "SuccessfulCreate"),
        ("Pod", "a-1-x7k2p-head-abcde", "BackOff"),
    ]
    assert found[-1].type == "Warning" and found[-1].event_time is not None


def test_errors_name_the_namespace_the_job_the_field_and_the_context(
    sdk: TrainJobClient, kubeconfig: Path, namespace: str
) -> None:
    with pytest.raises(NamespaceNotFoundError, match="namespace 'no-such-ns' does not exist"):
        sdk.list_jobs(namespace="no-such-ns")
    with pytest.raises(NamespaceNotFoundError, match="namespace 'no-such-ns' does not exist"):
        sdk.get_job("digits", namespace="no-such-ns")
    with pytest.raises(NamespaceNotFoundError, match="kubectl create namespace no-such-ns"):
        sdk.train(manifest("digits"), namespace="no-such-ns")
    with pytest.raises(JobNotFoundError, match="raytrain list -A"):
        sdk.get_job("nothing-here")
    with pytest.raises(ConfigError, match="context 'nope' is not in kubeconfig") as err:
        TrainJobClient(kubeconfig=str(kubeconfig), context="nope")
    assert "its contexts are" in str(err.value)

    with pytest.raises(InvalidJobError) as refused:
        sdk.train(manifest("digits", scaling={"numWorkers": 0}))
    assert "spec.scaling.numWorkers" in str(refused.value)
    with pytest.raises(InvalidJobError, match=r"exactly one of storage\.pvc"):
        sdk.train(manifest("digits", storage={}))
    sdk.train(manifest("digits"))
    with pytest.raises(JobExistsError, match=f"'digits' already exists in namespace '{namespace}'"):
        sdk.train(manifest("digits"))


@pytest.fixture
def two_namespaces(kube_cluster: KubeCluster, namespace: str) -> Iterator[str]:
    other = f"{namespace[:50]}-b"
    kube_cluster.kubectl("create", "namespace", other)
    try:
        yield other
    finally:
        kube_cluster.kubectl("delete", "namespace", other, "--wait=false", check=False)


def test_namespace_argument_and_manifest_namespace(
    sdk: TrainJobClient, kubeconfig: Path, two_namespaces: str, namespace: str
) -> None:
    assert sdk.train(manifest("digits"), namespace=two_namespaces) == "digits"
    assert sdk.get_job("digits", namespace=two_namespaces).namespace == two_namespaces
    with pytest.raises(JobNotFoundError):
        sdk.get_job("digits")
    declared = manifest("other")
    declared["metadata"]["namespace"] = two_namespaces
    with pytest.raises(InvalidJobError, match="remove one of them"):
        sdk.train(declared, namespace=namespace)
    TrainJobClient(two_namespaces, kubeconfig=str(kubeconfig)).train(declared)
    assert [j.name for j in sdk.list_jobs(namespace=two_namespaces)] == ["digits", "other"]
