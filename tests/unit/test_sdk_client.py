"""TrainJobClient's decisions without a cluster: what train() sends, how a wait follows a watch,
which 404 means what, which Events belong to a job. The real API server is in
tests/integration/test_sdk.py."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from raytrain import (
    CRDNotInstalledError,
    InvalidJobError,
    JobExistsError,
    JobFailedError,
    JobNotFoundError,
    TrainJob,
    TrainJobClient,
    WaitTimeoutError,
)
from raytrain.client import _about
from raytrain_contract.api import v1alpha1 as api

REPO = Path(__file__).resolve().parents[2]


def _status_404(name: str, kind: str = "trainjobs") -> ApiException:
    exc = ApiException(status=404, reason="Not Found")
    exc.body = json.dumps(
        {"kind": "Status", "message": f'{kind} "{name}" not found', "reason": "NotFound",
         "details": {"name": name, "group": "raytrain.dev", "kind": kind}, "code": 404}
    )  # fmt: skip
    return exc


class FakeCustom:
    """CustomObjectsApi over a dict of TrainJobs, answering as the API server does."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.created: list[dict[str, Any]] = []
        self.patches: list[dict[str, Any]] = []
        self.crd_installed = True

    def _check(self) -> None:
        if not self.crd_installed:
            exc = ApiException(status=404, reason="Not Found")
            exc.body = "404 page not found\n"
            raise exc

    def get_namespaced_custom_object(self, g: str, v: str, ns: str, p: str, name: str) -> Any:
        self._check()
        if (ns, name) not in self.objects:
            raise _status_404(name)
        return self.objects[(ns, name)]

    def list_namespaced_custom_object(self, g: str, v: str, ns: str, p: str, **kw: Any) -> Any:
        self._check()
        return {"items": [o for (n, _), o in self.objects.items() if n == ns]}

    def create_namespaced_custom_object(self, g: str, v: str, ns: str, p: str, body: Any) -> Any:
        self._check()
        name = body["metadata"]["name"]
        if (ns, name) in self.objects:
            exc = ApiException(status=409, reason="Conflict")
            exc.body = json.dumps({"message": f'trainjobs "{name}" already exists'})
            raise exc
        self.created.append(body)
        obj = json.loads(json.dumps(body))
        obj["metadata"] |= {"namespace": ns, "generation": 1, "resourceVersion": "1"}
        self.objects[(ns, name)] = obj
        return obj

    def create_cluster_custom_object(self, g: str, v: str, p: str, body: Any) -> Any:
        self._check()
        return self.create_namespaced_custom_object(g, v, "", p, body)

    def patch_namespaced_custom_object(
        self, g: str, v: str, ns: str, p: str, name: str, body: Any
    ) -> Any:
        obj = self.get_namespaced_custom_object(g, v, ns, p, name)
        self.patches.append(body)
        obj["spec"] |= body["spec"]
        obj["metadata"]["generation"] += 1
        return obj


class FakeCore:
    def __init__(self, namespaces: tuple[str, ...] = ("team-a",)) -> None:
        self.namespaces = namespaces
        self.events: list[dict[str, Any]] = []

    def read_namespace(self, name: str) -> Any:
        if name not in self.namespaces:
            raise _status_404(name, "namespaces")
        return SimpleNamespace()

    def list_namespaced_event(self, namespace: str) -> Any:
        return SimpleNamespace(items=self.events)


@pytest.fixture
def fakes(monkeypatch: pytest.MonkeyPatch) -> tuple[TrainJobClient, FakeCustom, FakeCore]:
    custom, core = FakeCustom(), FakeCore()
    monkeypatch.setattr(client, "CustomObjectsApi", lambda api_client: custom)
    monkeypatch.setattr(client, "CoreV1Api", lambda api_client: core)
    monkeypatch.setattr(client, "BatchV1Api", lambda api_client: None)
    return TrainJobClient("team-a", api_client=client.ApiClient()), custom, core


def _spec() -> dict[str, Any]:
    return {
        "image": "raytrain/trainer-runtime:0.1.0",
        "entrypoint": "examples.digits.train:train_loop_per_worker",
        "scaling": {"numWorkers": 2},
        "storage": {"s3": {"uri": "s3://raytrain/checkpoints"}},
    }


# ------------------------------------------------------------------------------------ train


def test_train_takes_a_dict_a_typed_spec_or_a_typed_trainjob(fakes: Any) -> None:
    sdk, custom, _ = fakes
    assert sdk.train({"metadata": {"name": "a"}, "spec": _spec()}) == "a"
    assert custom.created[0]["apiVersion"] == "raytrain.dev/v1alpha1"
    assert custom.created[0]["kind"] == "TrainJob"
    assert custom.created[0]["metadata"]["namespace"] == "team-a"

    spec = api.TrainJobSpec.model_validate(_spec())
    assert sdk.train(spec, name="b") == "b"
    sent = custom.created[1]
    # camelCase, no nulls: what the CRD's schema expects
    assert sent["spec"]["scaling"]["numWorkers"] == 2 and "num_workers" not in sent["spec"]
    # only what was set: the operator's defaults (rayVersion, suspend...) are not frozen in
    assert "queueName" not in sent["spec"] and "rayVersion" not in sent["spec"]
    assert "suspend" not in sent["spec"]

    model = api.TrainJob.model_validate({"metadata": {"name": "c"}, "spec": _spec()})
    assert sdk.train(model) == "c" and custom.created[2]["kind"] == "TrainJob"
    assert sdk.train({"metadata": {"name": "x"}, "spec": _spec()}, name="d") == "d"


def test_train_refuses_what_is_not_a_trainjob(fakes: Any, tmp_path: Path) -> None:
    sdk, custom, _ = fakes
    with pytest.raises(InvalidJobError, match=r"needs name=\.\.\."):
        sdk.train(api.TrainJobSpec.model_validate(_spec()))
    with pytest.raises(InvalidJobError, match="kind 'RayJob' is not a TrainJob"):
        sdk.train({"kind": "RayJob", "metadata": {"name": "a"}, "spec": {}})
    with pytest.raises(InvalidJobError, match=r"metadata\.name: the TrainJob has no name"):
        sdk.train({"spec": _spec()})
    with pytest.raises(InvalidJobError, match="needs a spec mapping"):
        sdk.train({"metadata": {"name": "a"}})
    two = tmp_path / "two.yaml"
    job = {"apiVersion": api.API_VERSION, "kind": api.KIND, "metadata": {"name": "a"}}
    two.write_text(yaml.safe_dump_all([job, job]))
    with pytest.raises(InvalidJobError, match="holds 2 TrainJobs"):
        sdk.train(str(two))
    with pytest.raises(InvalidJobError, match=f"cannot read {tmp_path / 'none.yaml'}"):
        sdk.train(tmp_path / "none.yaml")
    assert custom.created == []


def test_train_of_the_example_file_creates_its_secret_first(
    fakes: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    sdk, custom, _ = fakes
    others: list[tuple[str, str]] = []

    def create_from_dict(api_client: Any, doc: dict[str, Any], namespace: str) -> None:
        others.append((doc["kind"], namespace))
        exc = ApiException(status=409, reason="Conflict")  # it exists already: left as it is
        raise __import__("kubernetes").utils.FailToCreateError([exc])

    monkeypatch.setattr("kubernetes.utils.create_from_dict", create_from_dict)
    assert sdk.train(REPO / "examples" / "digits.yaml") == "digits"
    assert others == [("Secret", "team-a")]
    assert custom.created[0]["spec"]["config"]["epochs"] == 8


def test_train_of_the_template_example_creates_the_template_first(
    fakes: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    sdk, custom, _ = fakes
    monkeypatch.setattr("kubernetes.utils.create_from_dict", lambda *a, **kw: None)
    assert sdk.train(REPO / "examples" / "template.yaml") == "digits-from-template"
    assert [c["kind"] for c in custom.created] == ["ClusterTrainJobTemplate", "TrainJob"]
    assert ("", "cpu-digits") in custom.objects  # cluster-scoped: no namespace
    # Once there, a second submission leaves the template as it is.
    custom.objects.pop(("team-a", "digits-from-template"))
    assert sdk.train(REPO / "examples" / "template.yaml") == "digits-from-template"


def test_checkpoints_of_a_job_whose_storage_comes_from_its_template(fakes: Any) -> None:
    sdk, custom, _ = fakes
    custom.objects[("team-a", "t")] = {
        "metadata": {"name": "t", "namespace": "team-a"},
        "spec": {"template": {"name": "defaults"}, "scaling": {"numWorkers": 1}},
        "status": {
            "template": {
                "kind": "ClusterTrainJobTemplate",
                "name": "defaults",
                "spec": {"storage": {"s3": {"uri": "s3://team/ckpt"}}},
            },
            "checkpoint": {"latestURI": "s3://team/ckpt/run/checkpoint_000001", "count": 1},
        },
    }
    assert sdk.get_checkpoints("t").storage == "s3://team/ckpt"


def test_a_second_train_of_the_same_name_says_delete_or_rename(fakes: Any) -> None:
    sdk, _, _ = fakes
    sdk.train({"metadata": {"name": "a"}, "spec": _spec()})
    with pytest.raises(JobExistsError, match="'a' already exists in namespace 'team-a'"):
        sdk.train({"metadata": {"name": "a"}, "spec": _spec()})


# ---------------------------------------------------------------------------------- errors


def test_not_found_tells_a_missing_job_from_a_missing_namespace_or_crd(fakes: Any) -> None:
    sdk, custom, _ = fakes
    with pytest.raises(JobNotFoundError, match="no TrainJob 'x' in namespace 'team-a'"):
        sdk.get_job("x")
    with pytest.raises(LookupError, match="namespace 'elsewhere' does not exist"):
        sdk.get_job("x", namespace="elsewhere")
    with pytest.raises(LookupError, match="namespace 'elsewhere' does not exist"):
        sdk.list_jobs(namespace="elsewhere")
    assert sdk.list_jobs() == []  # an empty namespace that exists is no error
    custom.crd_installed = False
    with pytest.raises(CRDNotInstalledError, match=r"kubectl apply --server-side -f crds/"):
        sdk.get_job("x")


# ------------------------------------------------------------------------------------ wait


def _job(rv: str, phase: str, *conds: tuple[str, str, int], gen: int = 1) -> dict[str, Any]:
    return {
        "metadata": {"name": "digits", "namespace": "team-a", "resourceVersion": rv,
                     "generation": gen},
        "spec": {},
        "status": {
            "phase": phase,
            "conditions": [
                {"type": t, "status": "True", "reason": r, "message": "", "observedGeneration": g}
                for t, r, g in [(c[0], c[1], c[2]) for c in conds]
            ],
        },
    }  # fmt: skip


class ScriptedWatch:
    """Each stream yields the next scripted batch of events; an empty batch is a quiet watch."""

    batches: list[list[dict[str, Any]]] = []
    calls: list[dict[str, Any]] = []

    def stream(self, func: Any, *args: Any, **kwargs: Any) -> Iterator[dict[str, Any]]:
        ScriptedWatch.calls.append(kwargs)
        yield from ScriptedWatch.batches.pop(0) if ScriptedWatch.batches else []


@pytest.fixture
def scripted(monkeypatch: pytest.MonkeyPatch) -> type[ScriptedWatch]:
    ScriptedWatch.batches, ScriptedWatch.calls = [], []
    monkeypatch.setattr(watch, "Watch", ScriptedWatch)
    return ScriptedWatch


def test_wait_follows_the_watch_from_the_version_it_read(fakes: Any, scripted: Any) -> None:
    sdk, custom, _ = fakes
    custom.objects[("team-a", "digits")] = _job("5", "Created", ("Created", "RayJobCreated", 1))
    scripted.batches = [
        [{"type": "MODIFIED", "object": _job("6", "Running", ("Running", "Training", 1))}],
        [{"type": "MODIFIED", "object": _job("7", "Succeeded", ("Succeeded", "Done", 1))}],
    ]
    seen: list[str] = []
    job = sdk.wait_for_job_status(
        "digits",
        {"Complete"},  # as code written for Kubeflow's TrainerClient calls it
        timeout=30,
        polling_interval=2,
        callbacks=[lambda j: seen.append(j.phase)],
    )
    assert job.phase == "Succeeded" and seen == ["Created", "Running", "Succeeded"]
    assert [c["resource_version"] for c in scripted.calls] == ["5", "6"]
    assert scripted.calls[0]["field_selector"] == "metadata.name=digits"


def test_wait_raises_failed_with_the_reason_and_the_job(fakes: Any, scripted: Any) -> None:
    sdk, custom, _ = fakes
    custom.objects[("team-a", "digits")] = _job("5", "Failed", ("Failed", "DeadlineExceeded", 1))
    with pytest.raises(JobFailedError, match=r"failed \(DeadlineExceeded: \) while waiting") as err:
        sdk.wait_for_job_status("digits", ["Running", "Succeeded"], timeout=30)
    assert isinstance(err.value.job, TrainJob) and scripted.calls == []


def test_wait_times_out_naming_the_last_conditions(
    fakes: Any, scripted: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    sdk, custom, _ = fakes
    custom.objects[("team-a", "digits")] = _job("5", "Running", ("Running", "Training", 1))
    clock = iter([0.0, 0.0, 5.0, 11.0])
    monkeypatch.setattr("raytrain.client.time.monotonic", lambda: next(clock))
    scripted.batches = [[]]  # the watch ends quietly: the job is read again
    with pytest.raises(WaitTimeoutError) as err:
        sdk.wait_for_job_status("digits", "Succeeded", timeout=10)
    assert str(err.value) == (
        "TrainJob team-a/digits is not Succeeded after 10s: phase Running; "
        "conditions: Running=True (Training)"
    )
    # each watch asks the server to end it by the deadline; a quiet one is followed by a read
    assert [c["timeout_seconds"] for c in scripted.calls] == [10, 5]


def test_a_stale_condition_keeps_waiting(fakes: Any, scripted: Any) -> None:
    sdk, custom, _ = fakes
    custom.objects[("team-a", "digits")] = _job("5", "Running", ("Running", "R", 1), gen=2)
    scripted.batches = [
        [{"type": "MODIFIED", "object": _job("6", "Running", ("Running", "R", 2), gen=2)}]
    ]
    assert sdk.wait_for_job_status("digits", "Running", timeout=30).generation == 2
    assert len(scripted.calls) == 1


def test_a_job_deleted_while_waiting_is_not_found(fakes: Any, scripted: Any) -> None:
    sdk, custom, _ = fakes
    custom.objects[("team-a", "digits")] = _job("5", "Running")
    scripted.batches = [[{"type": "DELETED", "object": _job("6", "Running")}]]
    with pytest.raises(JobNotFoundError, match="was deleted while waiting"):
        sdk.wait_for_job_status("digits", timeout=30)


def test_wait_refuses_an_unknown_status_before_calling_anything(fakes: Any) -> None:
    sdk, _, _ = fakes
    with pytest.raises(ValueError, match="'Completed' is not a TrainJob status"):
        sdk.wait_for_job_status("digits", "Completed")


# ------------------------------------------------------------------------ suspend, events


def test_suspend_patches_only_spec_suspend_and_only_when_needed(fakes: Any) -> None:
    sdk, custom, _ = fakes
    sdk.train({"metadata": {"name": "a"}, "spec": _spec()})
    assert sdk.suspend_job("a").suspended
    assert sdk.suspend_job("a").generation == 2
    assert not sdk.resume_job("a").suspended
    assert custom.patches == [{"spec": {"suspend": True}}, {"spec": {"suspend": False}}]


def _involved(kind: str, name: str, uid: str = "") -> dict[str, Any]:
    return {"involvedObject": {"kind": kind, "name": name, "uid": uid}}


@pytest.mark.parametrize(
    ("kind", "name", "uid", "about"),
    [
        ("TrainJob", "a", "u-a", True),
        ("TrainJob", "a", "u-old", False),  # a deleted TrainJob of the same name
        ("RayJob", "a-0", "", True),
        ("RayJob", "a-2", "", True),
        ("RayJob", "a-3", "", False),  # no such attempt yet
        ("Job", "a-1", "", True),  # KubeRay's submitter Job
        ("Pod", "a-1-abcde", "", True),  # its pod
        ("RayCluster", "a-2-x7k2p", "", True),
        ("Pod", "a-2-x7k2p-head-q9z8w", "", True),
        ("Pod", "a-2-x7k2p-workers-worker-q9z8w", "", True),
        ("TrainJob", "a-1", "u-other", False),  # another TrainJob
        ("RayJob", "a-1-0", "", False),  # ... and its children
        ("Pod", "a-1-0-x7k2p-head-q9z8w", "", False),
        ("ConfigMap", "a-contract", "", False),
        ("Pod", "ab-0", "", False),
    ],
)
def test_events_belong_to_the_job_by_uid_or_child_name(
    kind: str, name: str, uid: str, about: bool
) -> None:
    job = TrainJob(name="a", namespace="ns", phase="Running", attempt=2, uid="u-a")
    assert _about(_involved(kind, name, uid), job) is about


T0 = "2026-11-22T08:0"


def test_events_come_oldest_first(fakes: Any) -> None:
    sdk, custom, core = fakes
    custom.objects[("team-a", "a")] = {"metadata": {"name": "a", "uid": "u"}, "status": {}}
    core.events = [
        {**_involved("TrainJob", "a", "u"), "reason": "Late", "lastTimestamp": T0 + "2:00Z"},
        {**_involved("RayJob", "a-0"), "reason": "Early", "lastTimestamp": T0 + "1:00Z"},
        {**_involved("Pod", "other"), "reason": "Else", "lastTimestamp": T0 + "0:00Z"},
        {**_involved("TrainJob", "a", "u"), "reason": "Untimed"},
    ]  # fmt: skip
    assert [e.reason for e in sdk.get_job_events("a")] == ["Untimed", "Early", "Late"]
