"""The longest TrainJob name at the last attempt, through the real API server and KubeRay.

The CRD caps a TrainJob's name (MAX_NAME_LENGTH) so that every name derived from it fits:
ours, and the ones KubeRay derives from the RayJob `<name>-<attempt>` (its RayCluster
`<rayjob>-<5 random>`, the cluster's `<raycluster>-head-svc`, its token Secret, the pods). Here
the operator's own builders make every child of a TrainJob whose name has exactly
MAX_NAME_LENGTH characters, at the last attempt the retry limit allows (names.MAX_ATTEMPT), and
KubeRay must run it: the RayCluster, its head Service under the name the SDK looks up, and the
pods on the KWOK nodes, every name whole and no Warning Event.

Longer names go to KubeRay the same way (the CRD refuses such a TrainJob, so their RayJobs have
no owner). What KubeRay does with them shows how the limit stands: one character more still
runs, but KubeRay starts cutting the names it derives from the RayCluster's to 50 characters,
and from 4 characters more it refuses the RayJob. So MAX_NAME_LENGTH is exact as the longest
name whose derived names KubeRay keeps whole, and 3 characters short of KubeRay's refusal.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from _wait import wait_for
from conftest import KubeCluster

from raytrain_contract.api.v1alpha1 import MAX_NAME_LENGTH, TrainJob
from raytrain_contract.meta import Meta
from raytrain_operator.builders import names
from raytrain_operator.builders.children import ChildContext, build_children

pytestmark = pytest.mark.integration

T_KUBERAY = 180  # KubeRay, the scheduler and KWOK bringing pods to Running
WORKERS = 2
#: KubeRay 1.6.2 cuts a name it derives from the RayCluster's (the token Secret, the pods'
#: prefixes) to this many characters.
KUBERAY_CUT = 50
#: The longest RayJob name KubeRay 1.6.2 accepts: its RayCluster's name, 6 characters more,
#: must stay within 53 (63 less "-serve-svc").
KUBERAY_MAX_RAYJOB_NAME = 47


def _name(length: int) -> str:
    """A TrainJob name of `length` characters, such as users write."""
    return ("digits-resnet50-lr-sweep-" * 4)[: length - 1] + "z"


SPEC: dict[str, Any] = {
    "image": "raytrain/trainer-runtime:0.1.0",
    "entrypoint": "examples.digits.train:train_loop_per_worker",
    "scaling": {"numWorkers": WORKERS, "resourcesPerWorker": {"cpu": "1", "memory": "1Gi"}},
    "storage": {
        "s3": {
            "uri": "s3://raytrain/checkpoints",
            "endpoint": "http://127.0.0.1:9000",
            "credentialsSecret": {"name": "s3-credentials"},
        }
    },
}


def _create(cluster: KubeCluster, namespace: str, obj: dict[str, Any]) -> dict[str, Any]:
    out = cluster.kubectl("create", "-n", namespace, "-o", "json", "-f", "-", input=json.dumps(obj))
    created: dict[str, Any] = json.loads(out.stdout)
    return created


def _children(namespace: str, uid: str, doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every child the operator builds for the TrainJob `doc` at attempt names.MAX_ATTEMPT."""
    trainjob = TrainJob.model_validate({"metadata": doc["metadata"], "spec": doc["spec"]})
    meta = Meta.from_metadata({**doc["metadata"], "namespace": namespace, "uid": uid})
    built = build_children(ChildContext(trainjob, meta, names.MAX_ATTEMPT))
    return {kind: body for kind, body in built.items() if body is not None}


def _create_children(
    cluster: KubeCluster, namespace: str, children: dict[str, dict[str, Any]]
) -> dict[str, Any]:
    """Create the children, the RayJob last as the operator does; the RayJob as stored."""
    for kind, body in children.items():
        if kind != "RayJob":
            _create(cluster, namespace, body)
    return _create(cluster, namespace, children["RayJob"])


def _ownerless_children(name: str, namespace: str) -> dict[str, dict[str, Any]]:
    """The children of a TrainJob the CRD would refuse, built all the same, without the owner
    that cannot exist (the garbage collector would delete them for it)."""
    doc = {"metadata": {"name": name}, "spec": SPEC}
    children = _children(namespace, str(uuid.uuid4()), doc)
    for body in children.values():
        body["metadata"].pop("ownerReferences", None)
    return children


def _warnings(cluster: KubeCluster, namespace: str) -> list[str]:
    events = cluster.get_json("events", "-n", namespace)["items"]
    return [
        f"{e['involvedObject']['kind']}/{e['involvedObject']['name']}: {e.get('reason')}: "
        f"{e.get('message')}"
        for e in events
        if e.get("type") == "Warning"
        and e["involvedObject"]["kind"] in ("RayJob", "RayCluster", "Service", "Job", "Secret")
        # KubeRay creating a RayCluster its informer has not seen yet (it reconciles again and
        # goes on): a race of its cache on a busy machine, whatever the names.
        and not (
            e.get("reason") == "FailedToCreateRayCluster"
            and "already exists" in (e.get("message") or "")
        )
    ]


def _run_under_kuberay(cluster: KubeCluster, namespace: str, rayjob: str) -> dict[str, Any]:
    """Wait for KubeRay's RayCluster, head Service and Running pods of `rayjob`; what it made."""

    def cluster_name() -> str | None:
        status = cluster.get_json("rayjob", rayjob, "-n", namespace).get("status") or {}
        refused = status.get("jobDeploymentStatus") == "ValidationFailed"
        assert not refused, (status, _warnings(cluster, namespace))
        return status.get("rayClusterName") or None

    raycluster = wait_for(cluster_name, T_KUBERAY, f"KubeRay's RayCluster of RayJob {rayjob}")
    service = f"{raycluster}-head-svc"
    wait_for(
        lambda: (
            cluster.kubectl("get", "service", service, "-n", namespace, check=False).returncode == 0
        ),
        T_KUBERAY,
        f"the head Service {service} (the name the SDK's dashboard looks up)",
    )

    def pods_running() -> list[dict[str, Any]] | None:
        pods: list[dict[str, Any]] = cluster.get_json(
            "pods", "-n", namespace, "-l", f"ray.io/cluster={raycluster}"
        )["items"]
        running = [p for p in pods if p["status"].get("phase") == "Running"]
        return pods if len(pods) == 1 + WORKERS and len(running) == len(pods) else None

    pods = wait_for(pods_running, T_KUBERAY, f"the head and {WORKERS} worker pods Running")
    kinds = sorted(p["metadata"]["labels"]["ray.io/node-type"] for p in pods)
    assert kinds == ["head"] + ["worker"] * WORKERS
    secrets = cluster.get_json("secrets", "-n", namespace, "-l", f"ray.io/cluster={raycluster}")
    return {
        "raycluster": raycluster,
        "pods": sorted(p["metadata"]["name"] for p in pods),
        "secrets": [s["metadata"]["name"] for s in secrets["items"]],
    }


def test_the_longest_name_at_the_last_attempt_runs_under_kuberay_with_every_name_whole(
    kube_cluster: KubeCluster, namespace: str
) -> None:
    name = _name(MAX_NAME_LENGTH)
    assert len(name) == MAX_NAME_LENGTH and names.name_problems(name) == []
    # The API server takes the TrainJob: its CRD allows the name.
    doc = {"apiVersion": "raytrain.dev/v1alpha1", "kind": "TrainJob"}
    owner = _create(kube_cluster, namespace, {**doc, "metadata": {"name": name}, "spec": SPEC})
    children = _children(namespace, owner["metadata"]["uid"], owner)
    # Every child of ours is taken as built: ServiceAccount, Role, RoleBinding, the contract
    # ConfigMap, the PodDisruptionBudget, the NetworkPolicy and the RayJob.
    assert {"ServiceAccount", "ConfigMap", "NetworkPolicy", "RayJob"} <= set(children)
    rayjob = _create_children(kube_cluster, namespace, children)["metadata"]["name"]
    assert rayjob == names.rayjob_name(name, names.MAX_ATTEMPT)

    made = _run_under_kuberay(kube_cluster, namespace, rayjob)
    # KubeRay's names as it really makes them: the RayCluster is the RayJob's name and 5
    # random characters, and nothing derived from it is cut.
    raycluster = made["raycluster"]
    assert raycluster.startswith(rayjob + "-") and len(raycluster) == len(rayjob) + 6
    # Nothing KubeRay derives from it is cut: at this limit the RayCluster's name has exactly
    # KubeRay's 50 characters (one more is the next test's).
    assert len(raycluster) <= KUBERAY_CUT, raycluster
    assert all(pod.startswith(raycluster + "-") for pod in made["pods"]), made["pods"]
    assert made["secrets"] == [raycluster], "the Ray token's Secret is named after the cluster"
    assert _warnings(kube_cluster, namespace) == []
    # KubeRay's objects hang under the RayJob, the RayJob under the TrainJob: nothing was
    # garbage-collected for a missing owner.
    assert kube_cluster.get_json("rayjob", rayjob, "-n", namespace)["metadata"]["ownerReferences"]


def test_one_character_more_still_runs_but_kuberay_cuts_the_names_it_derives(
    kube_cluster: KubeCluster, namespace: str
) -> None:
    """Where MAX_NAME_LENGTH is exact: one character more, KubeRay still runs the job without
    a Warning, but cuts what it derives from the RayCluster's name to 50 characters, from the
    front for its token Secret and from the end for the pods."""
    name = _name(MAX_NAME_LENGTH + 1)
    assert names.name_problems(name), "the operator refuses a name over the limit"
    rayjob = _create_children(kube_cluster, namespace, _ownerless_children(name, namespace))
    made = _run_under_kuberay(kube_cluster, namespace, rayjob["metadata"]["name"])
    raycluster = made["raycluster"]
    assert len(raycluster) == KUBERAY_CUT + 1
    assert made["secrets"] == [raycluster[1:]]
    assert not any(pod.startswith(raycluster) for pod in made["pods"]), made["pods"]
    assert all(pod.startswith(raycluster[:KUBERAY_CUT] + "-") for pod in made["pods"])
    assert _warnings(kube_cluster, namespace) == []


def test_kuberay_refuses_a_rayjob_name_past_its_own_limit(
    kube_cluster: KubeCluster, namespace: str
) -> None:
    """Where MAX_NAME_LENGTH is conservative: KubeRay refuses a RayJob only past 47 characters,
    a TrainJob name 4 characters over ours at the last attempt, and makes no RayCluster for it
    (it neither cuts the name nor runs the job)."""
    longest = KUBERAY_MAX_RAYJOB_NAME - len(names.rayjob_name("", names.MAX_ATTEMPT))
    assert longest == MAX_NAME_LENGTH + 3
    name = _name(longest + 1)
    rayjob = _create_children(kube_cluster, namespace, _ownerless_children(name, namespace))
    rayjob_name = rayjob["metadata"]["name"]
    assert len(rayjob_name) == KUBERAY_MAX_RAYJOB_NAME + 1

    def refused() -> dict[str, Any] | None:
        got = kube_cluster.get_json("rayjob", rayjob_name, "-n", namespace)
        status: dict[str, Any] = got.get("status") or {}
        return status if status.get("jobDeploymentStatus") == "ValidationFailed" else None

    status = wait_for(refused, T_KUBERAY, f"KubeRay to refuse RayJob {rayjob_name}")
    expected = f"RayJob name should be no more than {KUBERAY_MAX_RAYJOB_NAME} characters"
    assert expected in status.get("message", ""), status
    assert not status.get("rayClusterName"), status
    assert kube_cluster.get_json("rayclusters", "-n", namespace)["items"] == []
    warnings = wait_for(lambda: _warnings(kube_cluster, namespace), 60, "KubeRay's Warning")
    assert any("InvalidRayJobMetadata" in w and expected in w for w in warnings), warnings
