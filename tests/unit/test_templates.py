"""spec.template: how a template's spec merges under a TrainJob's, and when it is read."""

from __future__ import annotations

import copy
import logging
from typing import Any

import kopf
import pytest
from _factories import BASE, UID
from _passes import passed

from raytrain_contract.api import templates
from raytrain_contract.api.v1alpha1 import TrainJob
from raytrain_operator import k8s
from raytrain_operator.handlers import reconcile
from raytrain_operator.handlers import templates as reader

LOG = logging.getLogger("test")

TEMPLATE_SPEC: dict[str, Any] = {
    "image": "registry.example/team/trainer:1.0",
    "entrypoint": "examples.digits.train:train_loop_per_worker",
    "storage": copy.deepcopy(BASE["spec"]["storage"]),
    "scaling": {"resourcesPerWorker": {"cpu": "2", "memory": "4Gi"}, "workersPerPod": 1},
    "backoffLimit": 3,
    "ttlSecondsAfterFinished": 600,
    "config": {"epochs": 5, "optimizer": {"name": "adam", "lr": 0.001}},
    "workerTemplate": {
        "env": [{"name": "NCCL_DEBUG", "value": "WARN"}, {"name": "A", "value": "1"}],
        "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "nodeSelector": {"pool": "gpu"},
    },
}


def template_obj(spec: dict[str, Any] | None = None, rv: str = "7") -> dict[str, Any]:
    return {
        "apiVersion": "raytrain.dev/v1alpha1",
        "kind": "ClusterTrainJobTemplate",
        "metadata": {"name": "team-gpu", "uid": "tmpl-uid", "resourceVersion": rv},
        "spec": copy.deepcopy(TEMPLATE_SPEC if spec is None else spec),
    }


def job_spec(**extra: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"template": {"name": "team-gpu"}, "scaling": {"numWorkers": 2}}
    spec.update(extra)
    return spec


# ------------------------------------------------------------------------------- the merge


def test_the_jobs_values_win_and_objects_merge_field_by_field() -> None:
    spec = job_spec(
        backoffLimit=1,
        config={"optimizer": {"lr": 0.01}},
        workerTemplate={"nodeSelector": {"zone": "a"}},
    )
    merged = templates.merge(TEMPLATE_SPEC, spec)
    assert merged["image"] == TEMPLATE_SPEC["image"]
    assert merged["backoffLimit"] == 1
    assert merged["scaling"] == {
        "resourcesPerWorker": {"cpu": "2", "memory": "4Gi"},
        "workersPerPod": 1,
        "numWorkers": 2,
    }
    assert merged["config"] == {"epochs": 5, "optimizer": {"name": "adam", "lr": 0.01}}
    assert merged["workerTemplate"]["nodeSelector"] == {"pool": "gpu", "zone": "a"}
    # Neither input changes.
    assert TEMPLATE_SPEC["config"]["optimizer"]["lr"] == 0.001
    assert "numWorkers" not in TEMPLATE_SPEC["scaling"]


def test_named_lists_merge_by_name_and_tolerations_add_up() -> None:
    spec = job_spec(
        workerTemplate={
            "env": [{"name": "B", "value": "2"}, {"name": "NCCL_DEBUG", "value": "INFO"}],
            "tolerations": [
                {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"},
                {"key": "spot", "operator": "Exists"},
            ],
        },
        retryPolicy={"exitCodes": [{"code": 3, "retry": True}]},
    )
    merged = templates.merge(
        {**TEMPLATE_SPEC, "retryPolicy": {"exitCodes": [{"code": 3, "retry": False}]}}, spec
    )
    assert merged["workerTemplate"]["env"] == [
        {"name": "NCCL_DEBUG", "value": "INFO"},
        {"name": "A", "value": "1"},
        {"name": "B", "value": "2"},
    ]
    assert merged["workerTemplate"]["tolerations"] == [
        {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "spot", "operator": "Exists"},
    ]
    assert merged["retryPolicy"]["exitCodes"] == [{"code": 3, "retry": True}]


def test_the_merged_spec_is_a_valid_trainjob() -> None:
    merged = templates.merge(TEMPLATE_SPEC, job_spec())
    tj = TrainJob.model_validate({"metadata": BASE["metadata"], "spec": merged})
    assert tj.spec.image == TEMPLATE_SPEC["image"]
    assert tj.spec.scaling.num_workers == 2 and tj.spec.backoff_limit == 3


def test_the_ttl_of_a_finished_job_is_found_in_its_template() -> None:
    spec = job_spec()
    status = {"template": {"kind": "ClusterTrainJobTemplate", "name": "team-gpu", "spec": {}}}
    status["template"]["spec"] = {"ttlSecondsAfterFinished": 600}
    assert templates.effective_value(spec, status, "ttlSecondsAfterFinished") == 600
    assert templates.effective_value({**spec, "ttlSecondsAfterFinished": 5}, status, "x") is None
    other = {"template": {**status["template"], "name": "other"}}
    assert templates.effective_value(spec, other, "ttlSecondsAfterFinished") is None


# ------------------------------------------------------------------------------ the reading


class Templates:
    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.reads = 0
        self.forbidden = False

    def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        self.reads += 1
        if self.forbidden:
            raise k8s.ApiException(403, "Forbidden", '{"message": "cannot get"}')
        ns = "" if kind == "ClusterTrainJobTemplate" else namespace
        return copy.deepcopy(self.objects.get((kind, ns, name)))


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> Templates:
    fake = Templates()
    monkeypatch.setattr(k8s, "get_template", fake.get)
    return fake


def test_a_missing_template_names_the_field_and_the_fix(api: Templates) -> None:
    got = reader.resolve("team-a", job_spec(), {})
    assert got.problem is not None
    assert "spec.template: ClusterTrainJobTemplate 'team-gpu' not found" in got.problem
    assert "kubectl get clustertrainjobtemplates" in got.problem
    spec = job_spec(template={"kind": "TrainJobTemplate", "name": "mine"})
    got = reader.resolve("team-a", spec, {})
    assert got.problem is not None
    assert "TrainJobTemplate 'mine' not found in namespace team-a" in got.problem


def test_a_forbidden_template_says_which_permission_is_missing(api: Templates) -> None:
    api.forbidden = True
    got = reader.resolve("team-a", job_spec(), {})
    assert got.problem is not None and "403" in got.problem
    assert "get on clustertrainjobtemplates.raytrain.dev" in got.problem


def test_the_template_is_kept_in_status_and_read_again_only_before_the_start(
    api: Templates,
) -> None:
    api.objects[("ClusterTrainJobTemplate", "", "team-gpu")] = template_obj()
    first = reader.resolve("team-a", job_spec(), {})
    assert first.problem is None and first.write
    assert first.snapshot is not None and first.snapshot["resourceVersion"] == "7"
    assert first.spec["image"] == TEMPLATE_SPEC["image"]

    # Edited before the first attempt: the job takes the edit.
    edited = {**TEMPLATE_SPEC, "image": "registry.example/team/trainer:2.0"}
    api.objects[("ClusterTrainJobTemplate", "", "team-gpu")] = template_obj(edited, rv="8")
    pending = reader.resolve("team-a", job_spec(), {"template": first.snapshot})
    assert pending.write and pending.spec["image"].endswith(":2.0")

    # Started: the copy in status is used; the template is not even read.
    reads = api.reads
    running = {"template": pending.snapshot, "startTime": "2026-11-27T01:00:00Z", "attempt": 0}
    api.objects[("ClusterTrainJobTemplate", "", "team-gpu")] = template_obj(
        {**TEMPLATE_SPEC, "image": "registry.example/team/trainer:3.0"}, rv="9"
    )
    kept = reader.resolve("team-a", job_spec(), running)
    assert api.reads == reads and not kept.write
    assert kept.spec["image"].endswith(":2.0")

    # Deleted while it runs: nothing changes either.
    api.objects.clear()
    assert reader.resolve("team-a", job_spec(), running).problem is None

    # Another template named (while suspended): it is read.
    api.objects[("TrainJobTemplate", "team-a", "mine")] = template_obj(rv="3")
    other = job_spec(template={"kind": "TrainJobTemplate", "name": "mine"})
    moved = reader.resolve("team-a", other, running)
    assert moved.write and moved.snapshot is not None and moved.snapshot["name"] == "mine"


def test_a_job_without_a_template_drops_a_stale_copy(api: Templates) -> None:
    spec = copy.deepcopy(BASE["spec"])
    got = reader.resolve("team-a", spec, {"template": {"kind": "x", "name": "y", "spec": {}}})
    assert got.write and got.snapshot is None and got.spec == spec
    assert api.reads == 0


# --------------------------------------------------------------------------------- a pass


def body(spec: dict[str, Any], status: dict[str, Any] | None = None) -> kopf.Body:
    return kopf.Body(
        {
            "apiVersion": "raytrain.dev/v1alpha1",
            "kind": "TrainJob",
            "metadata": {
                "name": "digits",
                "namespace": "team-a",
                "uid": UID,
                "generation": 1,
                "creationTimestamp": "2026-11-27T00:59:00Z",
            },
            "spec": spec,
            "status": status or {},
        }
    )


@pytest.fixture
def passes(monkeypatch: pytest.MonkeyPatch, api: Templates) -> list[Any]:
    built: list[Any] = []
    # Parses are cached by uid, generation and template version, which these tests reuse.
    monkeypatch.setattr(
        reconcile.apply, "run", lambda state, actions, tj, *a, **kw: built.append(tj) or []
    )
    monkeypatch.setattr(reconcile.preflight, "check", lambda *a, **kw: None)
    monkeypatch.setattr(k8s, "get_rayjob", lambda ns, name: None)
    monkeypatch.setattr(kopf, "info", lambda *a, **kw: None)
    monkeypatch.setattr(kopf, "warn", lambda *a, **kw: None)
    return built


def test_a_pass_builds_from_the_template_and_records_it(api: Templates, passes: list[Any]) -> None:
    api.objects[("ClusterTrainJobTemplate", "", "team-gpu")] = template_obj()
    patch = kopf.Patch()
    plan = passed(patch, "create", body(job_spec()), LOG, {}, {})
    assert plan.phase != "Stalled", plan.status
    (tj,) = passes
    assert tj.spec.image == TEMPLATE_SPEC["image"] and tj.spec.backoff_limit == 3
    snap = patch["status"]["template"]
    assert snap["name"] == "team-gpu" and snap["resourceVersion"] == "7"
    assert snap["spec"] == TEMPLATE_SPEC


def stalled_pass(spec: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """One create pass that must stall: its Stalled condition and its status patch."""
    patch = kopf.Patch()
    plan = passed(patch, "create", body(spec), LOG, {}, {})
    assert plan.phase == "Stalled"
    status = dict(patch["status"])
    return next(c for c in status["conditions"] if c["type"] == "Stalled"), status


def test_a_pass_without_its_template_stalls_with_the_reason(
    api: Templates, passes: list[Any]
) -> None:
    stalled, status = stalled_pass(job_spec())
    assert stalled["reason"] == "TemplateUnavailable"
    assert "'team-gpu' not found" in stalled["message"]
    assert "template" not in status


def test_a_bad_value_from_the_template_is_blamed_on_the_template(
    api: Templates, passes: list[Any]
) -> None:
    bad = {**TEMPLATE_SPEC, "backoffLimit": 1000}
    api.objects[("ClusterTrainJobTemplate", "", "team-gpu")] = template_obj(bad)
    stalled, _ = stalled_pass(job_spec())
    assert stalled["reason"] == "InvalidSpec"
    assert "spec.backoffLimit (from ClusterTrainJobTemplate team-gpu)" in stalled["message"]
    assert "fix this field of the template" in stalled["message"]
    # The job's own value is the job's fault.
    stalled, _ = stalled_pass(job_spec(backoffLimit=1000))
    assert "spec.backoffLimit:" in stalled["message"]
    assert "fix this field of the TrainJob" in stalled["message"]


def test_a_running_job_keeps_building_from_its_copy(api: Templates, passes: list[Any]) -> None:
    api.objects[("ClusterTrainJobTemplate", "", "team-gpu")] = template_obj()
    first = kopf.Patch()
    passed(first, "create", body(job_spec()), LOG, {}, {})
    snap = first["status"]["template"]
    api.objects[("ClusterTrainJobTemplate", "", "team-gpu")] = template_obj(
        {**TEMPLATE_SPEC, "image": "registry.example/team/trainer:9.9"}, rv="8"
    )
    status = {"template": snap, "startTime": "2026-11-27T01:00:00Z", "attempt": 0}
    patch = kopf.Patch()
    passed(patch, "resync", body(job_spec(), status), LOG, {}, {})
    assert passes[-1].spec.image == TEMPLATE_SPEC["image"]
    assert "template" not in (patch.get("status") or {})
