"""spec.template on the real API server: the CRDs' rules, and the operator building a job from a
template it reads once and keeps."""

from __future__ import annotations

import json
from typing import Any

import pytest
from _wait import wait_for
from conftest import KubeCluster
from test_operator import (
    T_CREATE,
    Operator,
    condition,
    crds,
    create,
    get,
    operator,
    secret,
    trainjob,
    wait_condition,
)

pytestmark = pytest.mark.integration
__all__ = ["crds", "operator"]  # fixtures

IMAGE_1 = "registry.example/team/trainer:1.0"
IMAGE_2 = "registry.example/team/trainer:2.0"


def template(kind: str, name: str, **spec: Any) -> dict[str, Any]:
    base = trainjob(name)["spec"]
    body: dict[str, Any] = {
        "image": IMAGE_1,
        "entrypoint": base["entrypoint"],
        "storage": base["storage"],
        "scaling": {"resourcesPerWorker": {"cpu": "1", "memory": "1Gi"}},
        "backoffLimit": 2,
        "workerTemplate": {"env": [{"name": "TEAM_DEFAULT", "value": "yes"}]},
    }
    body.update(spec)
    return {
        "apiVersion": "raytrain.dev/v1alpha1",
        "kind": kind,
        "metadata": {"name": name},
        "spec": body,
    }


def job(name: str, ref: dict[str, Any], **spec: Any) -> dict[str, Any]:
    doc = trainjob(name)
    doc["spec"] = {"template": ref, "config": {"epochs": 2}, "scaling": {"numWorkers": 2}, **spec}
    return doc


def head_container(rayjob: dict[str, Any]) -> dict[str, Any]:
    head = rayjob["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    return dict(head["containers"][0])


def worker_env(rayjob: dict[str, Any]) -> dict[str, Any]:
    group = rayjob["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]
    return {e["name"]: e.get("value") for e in group["containers"][0].get("env") or []}


def test_the_crds_require_a_template_or_the_fields_it_gives(
    kube_cluster: KubeCluster, namespace: str, crds: None
) -> None:
    bare = trainjob("bare")
    del bare["spec"]["image"], bare["spec"]["storage"]
    refused = kube_cluster.kubectl(
        "create", "-n", namespace, "-f", "-", input=json.dumps(bare), check=False
    )
    assert refused.returncode != 0
    assert "spec.image is required (unless spec.template names a template" in refused.stderr
    assert "spec.storage is required" in refused.stderr

    # A template may give part of an object (scaling without a size); the job gives the rest.
    create(kube_cluster, namespace, template("TrainJobTemplate", "part"))
    create(kube_cluster, namespace, job("uses", {"kind": "TrainJobTemplate", "name": "part"}))
    listed = kube_cluster.kubectl("get", "tjt", "-n", namespace).stdout
    assert "part" in listed and IMAGE_1 in listed

    # Once started, the job's template cannot change unless it is suspended.
    kube_cluster.kubectl(
        "patch", "trainjob", "uses", "-n", namespace, "--subresource=status", "--type=merge",
        "-p", json.dumps({"status": {"startTime": "2026-11-27T00:00:00Z"}}),
    )  # fmt: skip
    moved = kube_cluster.kubectl(
        "patch", "trainjob", "uses", "-n", namespace, "--type=merge",
        "-p", json.dumps({"spec": {"template": {"kind": "TrainJobTemplate", "name": "other"}}}),
        check=False,
    )  # fmt: skip
    assert moved.returncode != 0
    assert "spec.template are immutable once the job has started" in moved.stderr


def test_a_job_is_built_from_its_template_and_keeps_the_copy_it_started_with(
    kube_cluster: KubeCluster, namespace: str, operator: Operator
) -> None:
    ns, name = namespace, "tpl"
    ref = {"kind": "TrainJobTemplate", "name": "team"}
    create(kube_cluster, ns, secret(f"{name}-s3"))
    create(kube_cluster, ns, job(name, ref))

    # The template does not exist yet: the job waits, saying so.
    stalled = wait_condition(kube_cluster, ns, name, "Stalled")
    assert stalled["reason"] == "TemplateUnavailable"
    assert f"TrainJobTemplate 'team' not found in namespace {ns}" in stalled["message"]
    assert get(kube_cluster, ns, "rayjobs.ray.io", f"{name}-0") is None

    tmpl = template("TrainJobTemplate", "team")
    tmpl["spec"]["storage"]["s3"]["credentialsSecret"]["name"] = f"{name}-s3"
    create(kube_cluster, ns, tmpl)
    rj = wait_for(lambda: get(kube_cluster, ns, "rayjobs.ray.io", f"{name}-0"), T_CREATE, "RayJob")
    assert head_container(rj)["image"] == IMAGE_1
    assert worker_env(rj)["TEAM_DEFAULT"] == "yes"
    wait_for(
        lambda: condition(kube_cluster, ns, name, "Stalled") is None, T_CREATE, "Stalled removed"
    )
    tj = get(kube_cluster, ns, "trainjobs.raytrain.dev", name) or {}
    kept = tj["status"]["template"]
    assert (kept["kind"], kept["name"]) == ("TrainJobTemplate", "team")
    assert kept["spec"]["image"] == IMAGE_1
    wait_for(
        lambda: (
            (get(kube_cluster, ns, "trainjobs.raytrain.dev", name) or {})
            .get("status", {})
            .get("startTime")
        ),
        T_CREATE * 3,
        "status.startTime",
    )

    # The template changes under the running job; a spec edit makes the operator look again.
    kube_cluster.kubectl(
        "patch", "tjt", "team", "-n", ns, "--type=merge",
        "-p", json.dumps({"spec": {"image": IMAGE_2}}),
    )  # fmt: skip
    kube_cluster.kubectl(
        "patch", "trainjob", name, "-n", ns, "--type=merge",
        "-p", json.dumps({"spec": {"config": {"epochs": 3}}}),
    )  # fmt: skip
    # A running job's spec edit waits for the next attempt: the pass over generation 2 says so
    # in Reconciling (SpecChangePending), about that generation.
    wait_for(
        lambda: (
            (condition(kube_cluster, ns, name, "Reconciling") or {}).get("observedGeneration") == 2
        ),
        T_CREATE,
        "the pass over generation 2",
    )
    tj = get(kube_cluster, ns, "trainjobs.raytrain.dev", name) or {}
    assert tj["status"]["template"] == kept
    rj = get(kube_cluster, ns, "rayjobs.ray.io", f"{name}-0") or {}
    assert head_container(rj)["image"] == IMAGE_1


def test_a_cluster_template_serves_every_namespace(
    kube_cluster: KubeCluster, namespace: str, operator: Operator
) -> None:
    ns, name = namespace, "ctpl"
    cluster_name = f"{ns}-defaults"[:63].rstrip("-")
    tmpl = template("ClusterTrainJobTemplate", cluster_name, image=IMAGE_2)
    tmpl["spec"]["storage"]["s3"]["credentialsSecret"]["name"] = f"{name}-s3"
    kube_cluster.kubectl("create", "-f", "-", input=json.dumps(tmpl))
    try:
        create(kube_cluster, ns, secret(f"{name}-s3"))
        create(kube_cluster, ns, job(name, {"name": cluster_name}))
        rj = wait_for(
            lambda: get(kube_cluster, ns, "rayjobs.ray.io", f"{name}-0"), T_CREATE, "RayJob"
        )
        assert head_container(rj)["image"] == IMAGE_2
        tj = get(kube_cluster, ns, "trainjobs.raytrain.dev", name) or {}
        assert tj["status"]["template"]["kind"] == "ClusterTrainJobTemplate"
    finally:
        kube_cluster.kubectl("delete", "ctjt", cluster_name, "--ignore-not-found", check=False)


def test_a_job_and_its_template_that_break_a_rule_together_stall_naming_both(
    kube_cluster: KubeCluster, namespace: str, operator: Operator
) -> None:
    """Each object passes the API server alone: the template's numWorkers (5) and the job's
    workersPerPod (2) break the CRD's rule only once merged. The job stalls saying which field
    came from where, and nothing is created (before, its RayJob waited forever for a pod of
    two workers to hold five)."""
    ns, name = namespace, "split"
    tmpl = template(
        "TrainJobTemplate",
        "five",
        scaling={"numWorkers": 5, "resourcesPerWorker": {"cpu": "1", "memory": "1Gi"}},
    )
    tmpl["spec"]["storage"]["s3"]["credentialsSecret"]["name"] = f"{name}-s3"
    create(kube_cluster, ns, tmpl)
    create(kube_cluster, ns, secret(f"{name}-s3"))
    doc = job(name, {"kind": "TrainJobTemplate", "name": "five"}, scaling={"workersPerPod": 2})
    create(kube_cluster, ns, doc)
    stalled = wait_condition(kube_cluster, ns, name, "Stalled")
    assert stalled["reason"] == "InvalidSpec", stalled
    message = stalled["message"]
    assert "spec.scaling.numWorkers must be a multiple of spec.scaling.workersPerPod" in message
    assert "spec.scaling.numWorkers from TrainJobTemplate five" in message, message
    assert "spec.scaling.workersPerPod from the TrainJob" in message, message
    assert get(kube_cluster, ns, "rayjobs.ray.io", f"{name}-0") is None
