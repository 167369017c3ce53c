"""`raytrain logs` and `TrainJobClient.get_job_logs` read the driver's output from KubeRay's
submitter pod, or say why not."""

from __future__ import annotations

import argparse
from types import SimpleNamespace
from typing import Any

import pytest
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from raytrain import LogsUnavailableError, TrainJobClient, driverlog
from raytrain.cli import build_parser, cluster
from raytrain_contract.pods import SUBMITTER_CONTAINER


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
    """The CoreV1Api calls reading the driver's log makes."""

    def __init__(self, pods: list[dict[str, Any]]) -> None:
        self.pods = pods
        self.selectors: list[str] = []
        self.reads: list[tuple[str, str, dict[str, Any]]] = []

    def list_namespaced_pod(self, namespace: str, label_selector: str) -> Any:
        self.selectors.append(label_selector)
        return SimpleNamespace(items=self.pods, metadata=SimpleNamespace(resource_version="7"))

    def read_namespaced_pod_log(self, name: str, namespace: str, **kwargs: Any) -> Any:
        # As the kubernetes client answers: raw (urllib3's response, its bytes in .data) when
        # asked not to preload, else the repr of those bytes, which is what it returns for a log.
        raw = b"epoch 1 loss 0.3\n"
        preload = kwargs.pop("_preload_content", True)
        self.reads.append((name, namespace, kwargs))
        return str(raw) if preload else SimpleNamespace(data=raw)


class _FakeCustom:
    """The TrainJob, and no RayJob (the user may not read them)."""

    def __init__(self, trainjob: dict[str, Any]) -> None:
        self.trainjob = trainjob

    def get_namespaced_custom_object(
        self, group: str, v: str, ns: str, plural: str, name: str
    ) -> Any:
        if plural == "trainjobs":
            return self.trainjob
        raise ApiException(status=403, reason="Forbidden")


class _FakeBatch:
    def read_namespaced_job(self, name: str, namespace: str) -> Any:
        raise ApiException(status=404, reason="Not Found")


def _sdk(
    monkeypatch: pytest.MonkeyPatch, core: _FakeCore, status: dict[str, Any]
) -> TrainJobClient:
    trainjob = {"metadata": {"name": "digits", "namespace": "team-a"}, "status": status}
    monkeypatch.setattr(client, "CoreV1Api", lambda api_client: core)
    monkeypatch.setattr(client, "CustomObjectsApi", lambda api_client: _FakeCustom(trainjob))
    monkeypatch.setattr(client, "BatchV1Api", lambda api_client: _FakeBatch())
    return TrainJobClient("team-a", api_client=client.ApiClient())


def _run_logs(
    monkeypatch: pytest.MonkeyPatch, pods: list[dict[str, Any]], status: dict[str, Any]
) -> tuple[_FakeCore, int]:
    core = _FakeCore(pods)
    sdk = _sdk(monkeypatch, core, status)
    monkeypatch.setattr(cluster, "_client", lambda args: sdk)
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


def test_the_sdk_returns_lines_and_raises_a_typed_error(monkeypatch: pytest.MonkeyPatch) -> None:
    pods = [_pod("digits-0-aaaaa", "t", state={"terminated": {"exitCode": 0}})]
    sdk = _sdk(monkeypatch, _FakeCore(pods), {"phase": "Succeeded", "rayJobName": "digits-0"})
    assert list(sdk.get_job_logs("digits")) == ["epoch 1 loss 0.3"]
    sdk = _sdk(monkeypatch, _FakeCore([]), {"phase": "Succeeded", "rayJobName": "digits-0"})
    with pytest.raises(LogsUnavailableError, match="is gone: the TrainJob is Succeeded"):
        sdk.get_job_logs("digits")


class _FakeWatch:
    """One event per stream: the pods changed."""

    calls: list[dict[str, Any]] = []

    def stream(self, func: Any, *args: Any, **kwargs: Any) -> Any:
        _FakeWatch.calls.append(kwargs)
        yield {"type": "MODIFIED"}


def test_follow_waits_for_the_submitter_container_to_start(
    monkeypatch: pytest.MonkeyPatch,
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
    sdk = _sdk(monkeypatch, core, {"phase": "Created"})
    _FakeWatch.calls = []
    monkeypatch.setattr(watch, "Watch", _FakeWatch)

    notes: list[str] = []
    name = sdk._wait_for_submitter("team-a", "digits", "digits-0", notes.append)
    assert name == "digits-0-aaaaa" and listings == []
    # it watched from each listing's version instead of polling
    assert [c["resource_version"] for c in _FakeWatch.calls] == ["7", "7"]
    assert notes == [
        "waiting for KubeRay's submitter pod of RayJob digits-0 (TrainJob phase: Created)",
        "waiting for the submitter pod digits-0-aaaaa (ContainerCreating)",
    ]


def test_follow_gives_up_when_the_job_ended_without_a_submitter(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sdk = _sdk(monkeypatch, _FakeCore([]), {"phase": "Failed"})
    with pytest.raises(LogsUnavailableError, match="is gone: the TrainJob is Failed"):
        sdk._wait_for_submitter("team-a", "digits", "digits-0", lambda note: None)
