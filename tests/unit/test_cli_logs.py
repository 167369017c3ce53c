"""`raytrain logs` reads the driver's output from KubeRay's submitter pod, or says why not."""

from __future__ import annotations

import argparse
from types import SimpleNamespace
from typing import Any

import pytest
from kubernetes import client, watch

from raytrain_operator.builders.pods import SUBMITTER_CONTAINER
from raytrain_operator.cli import build_parser, cluster, driverlog


def _pod(
    name: str,
    created: str,
    owner: str | None = "digits-0",
    *,
    kind: str = "Job",
    controller: bool = True,
    state: dict[str, Any] | None = None,
    **status: Any,
) -> dict[str, Any]:
    refs = []
    if owner is not None:
        refs = [{"kind": kind, "name": owner, "controller": controller, "apiVersion": "batch/v1"}]
    statuses = []
    if state is not None:
        statuses = [{"name": SUBMITTER_CONTAINER, "state": state}]
    return {
        "metadata": {
            "name": name,
            "creationTimestamp": created,
            "labels": {driverlog.JOB_NAME_LABEL: "digits-0"},
            "ownerReferences": refs,
        },
        "status": {"containerStatuses": statuses, **status},
    }


def test_the_selector_is_the_job_controllers_label_for_the_rayjobs_name() -> None:
    # KubeRay names the submitter Job like the RayJob (rayjob_controller.go, createNewK8sJob)
    assert driverlog.submitter_selector("digits-0") == "batch.kubernetes.io/job-name=digits-0"


def test_the_newest_pod_of_a_retried_job_is_read() -> None:
    pods = [
        _pod("digits-0-aaaaa", "2026-11-22T08:00:00Z"),
        _pod("digits-0-ccccc", "2026-11-22T08:02:00Z"),
        _pod("digits-0-bbbbb", "2026-11-22T08:01:00Z"),
    ]
    picked = driverlog.pick_submitter_pod(pods, "digits-0")
    assert picked is not None and picked["metadata"]["name"] == "digits-0-ccccc"


def test_only_pods_the_job_controls_count_whatever_their_labels() -> None:
    pods = [
        _pod("impostor", "2026-11-22T09:00:00Z", owner=None),
        _pod("other-job", "2026-11-22T09:00:00Z", owner="digits-1"),
        _pod("not-a-job", "2026-11-22T09:00:00Z", kind="ReplicaSet"),
        _pod("not-controller", "2026-11-22T09:00:00Z", controller=False),
        _pod("digits-0-aaaaa", "2026-11-22T08:00:00Z"),
    ]
    picked = driverlog.pick_submitter_pod(pods, "digits-0")
    assert picked is not None and picked["metadata"]["name"] == "digits-0-aaaaa"
    assert driverlog.pick_submitter_pod(pods[:4], "digits-0") is None
    assert driverlog.pick_submitter_pod([], "digits-0") is None


def test_a_running_or_finished_container_has_a_log() -> None:
    states: list[dict[str, Any]] = [{"running": {}}, {"terminated": {"exitCode": 0}}]
    for state in states:
        pod = _pod("p", "t", state=state)
        assert driverlog.container_state(pod, SUBMITTER_CONTAINER).started


def test_a_waiting_container_says_why() -> None:
    pod = _pod("p", "t", state={"waiting": {"reason": "ImagePullBackOff"}})
    state = driverlog.container_state(pod, SUBMITTER_CONTAINER)
    assert not state.started and state.reason == "ImagePullBackOff"
    # another container of the pod running says nothing about the submitter
    other = _pod("p", "t")
    other["status"]["containerStatuses"] = [{"name": "sidecar", "state": {"running": {}}}]
    assert not driverlog.container_state(other, SUBMITTER_CONTAINER).started


def test_an_unscheduled_pod_says_unschedulable() -> None:
    pod = _pod(
        "p",
        "t",
        phase="Pending",
        conditions=[{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
    )
    assert driverlog.container_state(pod, SUBMITTER_CONTAINER) == driverlog.ContainerState(
        False, "Unschedulable"
    )
    assert driverlog.container_state(_pod("p", "t", phase="Pending"), SUBMITTER_CONTAINER) == (
        driverlog.ContainerState(False, "Pending")
    )


def test_missing_before_kuberay_submits_suggests_follow() -> None:
    text = driverlog.missing_message(
        "digits", "Created", "digits-0", job_exists=False, head_pod=None, job_id=None
    )
    assert "RayJob digits-0" in text and "Kubernetes Job digits-0" in text
    assert "does not exist yet" in text and "Created" in text
    assert "raytrain logs digits -f" in text


def test_missing_after_the_end_says_it_is_gone() -> None:
    text = driverlog.missing_message(
        "digits", "Succeeded", "digits-0", job_exists=False, head_pod=None, job_id=None
    )
    assert "is gone" in text and "Succeeded" in text and "-f" not in text


def test_missing_pod_of_an_existing_job_and_the_heads_copy() -> None:
    text = driverlog.missing_message(
        "digits",
        "Running",
        "digits-0",
        job_exists=True,
        head_pod="digits-0-x7k2p-head-abcde",
        job_id="digits-0-q9z8w",
    )
    assert "has no pod" in text
    assert (
        "kubectl exec digits-0-x7k2p-head-abcde -- cat "
        "/tmp/ray/session_latest/logs/job-driver-digits-0-q9z8w.log"
    ) in text


def test_not_started_names_the_pod_the_reason_and_what_to_do() -> None:
    text = driverlog.not_started_message(
        "digits-0-aaaaa", driverlog.ContainerState(False, "ContainerCreating"), "digits"
    )
    assert "digits-0-aaaaa" in text and "ContainerCreating" in text
    assert "raytrain logs digits -f" in text and "kubectl describe pod digits-0-aaaaa" in text


def test_logs_parses_follow_and_tail() -> None:
    args = build_parser().parse_args(["logs", "digits", "-f", "--tail", "20", "-n", "team-a"])
    assert (args.name, args.follow, args.tail, args.namespace) == ("digits", True, 20, "team-a")


class _FakeCore:
    """The two CoreV1Api calls `raytrain logs` makes without -f."""

    def __init__(self, pods: list[dict[str, Any]]) -> None:
        self.pods = pods
        self.selectors: list[str] = []
        self.reads: list[tuple[str, str, dict[str, Any]]] = []

    def list_namespaced_pod(self, namespace: str, label_selector: str) -> Any:
        self.selectors.append(label_selector)
        return SimpleNamespace(items=self.pods, metadata=SimpleNamespace(resource_version="7"))

    def read_namespaced_pod_log(self, name: str, namespace: str, **kwargs: Any) -> str:
        self.reads.append((name, namespace, kwargs))
        return "epoch 1 loss 0.3\n"


def _run_logs(
    monkeypatch: pytest.MonkeyPatch, pods: list[dict[str, Any]], status: dict[str, Any]
) -> tuple[_FakeCore, int]:
    core = _FakeCore(pods)
    trainjob = {"metadata": {"name": "digits"}, "status": status}
    monkeypatch.setattr(cluster, "_connect", lambda args: (client.ApiClient(), "team-a"))
    monkeypatch.setattr(cluster, "_get", lambda api_client, ns, name: trainjob)
    monkeypatch.setattr(cluster, "_rayjob", lambda api_client, ns, name: None)
    monkeypatch.setattr(cluster, "_job_exists", lambda api_client, ns, name: False)
    monkeypatch.setattr(client, "CoreV1Api", lambda api_client: core)
    args = argparse.Namespace(name="digits", follow=False, tail=20, namespace="team-a")
    return core, cluster.logs(args)


def test_logs_reads_the_submitter_container_of_the_current_rayjob(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pods = [_pod("digits-0-aaaaa", "2026-11-22T08:00:00Z", state={"running": {}})]
    core, code = _run_logs(monkeypatch, pods, {"phase": "Running", "rayJobName": "digits-0"})
    assert code == 0
    assert core.selectors == ["batch.kubernetes.io/job-name=digits-0"]
    assert core.reads == [
        ("digits-0-aaaaa", "team-a", {"container": "ray-job-submitter", "tail_lines": 20})
    ]
    assert capsys.readouterr().out == "epoch 1 loss 0.3\n"


def test_logs_without_a_submitter_pod_says_what_is_missing(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    core, code = _run_logs(monkeypatch, [], {"phase": "Created", "rayJobName": "digits-0"})
    assert code == 1 and core.reads == []
    err = " ".join(capsys.readouterr().err.split())
    assert "submitter pod of RayJob digits-0" in err and "does not exist yet" in err


def test_logs_of_a_pod_that_has_not_started_reads_nothing(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pods = [_pod("digits-0-aaaaa", "t", state={"waiting": {"reason": "ContainerCreating"}})]
    core, code = _run_logs(monkeypatch, pods, {"phase": "Running", "rayJobName": "digits-0"})
    assert code == 1 and core.reads == []
    assert "ContainerCreating" in capsys.readouterr().err


def test_logs_before_a_rayjob_exists(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    core, code = _run_logs(monkeypatch, [], {"phase": "Pending"})
    assert code == 1 and core.selectors == []
    assert "has no RayJob yet" in capsys.readouterr().err


class _FakeWatch:
    """One event per stream: the pods changed."""

    calls: list[dict[str, Any]] = []

    def stream(self, func: Any, *args: Any, **kwargs: Any) -> Any:
        _FakeWatch.calls.append(kwargs)
        yield {"type": "MODIFIED"}


def test_follow_waits_for_the_submitter_container_to_start(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    listings = [
        [],
        [_pod("digits-0-aaaaa", "t", state={"waiting": {"reason": "ContainerCreating"}})],
        [_pod("digits-0-aaaaa", "t", state={"running": {}})],
    ]
    core = _FakeCore([])
    core.list_namespaced_pod = lambda namespace, label_selector: SimpleNamespace(  # type: ignore[method-assign]
        items=listings.pop(0), metadata=SimpleNamespace(resource_version="7")
    )
    trainjob = {"metadata": {"name": "digits"}, "status": {"phase": "Created"}}
    monkeypatch.setattr(cluster, "_get", lambda api_client, ns, name: trainjob)
    monkeypatch.setattr(client, "CoreV1Api", lambda api_client: core)
    _FakeWatch.calls = []
    monkeypatch.setattr(watch, "Watch", _FakeWatch)

    name = cluster._wait_for_submitter(client.ApiClient(), "team-a", "digits", "digits-0")
    assert name == "digits-0-aaaaa" and listings == []
    # it watched from each listing's version instead of polling
    assert [c["resource_version"] for c in _FakeWatch.calls] == ["7", "7"]
    err = " ".join(capsys.readouterr().err.split())
    assert "waiting for KubeRay's submitter pod of RayJob digits-0" in err
    assert "waiting for the submitter pod digits-0-aaaaa (ContainerCreating)" in err


def test_follow_gives_up_when_the_job_ended_without_a_submitter(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    core = _FakeCore([])
    trainjob = {"metadata": {"name": "digits"}, "status": {"phase": "Failed"}}
    monkeypatch.setattr(cluster, "_get", lambda api_client, ns, name: trainjob)
    monkeypatch.setattr(cluster, "_rayjob", lambda api_client, ns, name: None)
    monkeypatch.setattr(cluster, "_job_exists", lambda api_client, ns, name: False)
    monkeypatch.setattr(client, "CoreV1Api", lambda api_client: core)
    with pytest.raises(cluster.CLIError, match="is gone: the TrainJob is Failed"):
        cluster._wait_for_submitter(client.ApiClient(), "team-a", "digits", "digits-0")
