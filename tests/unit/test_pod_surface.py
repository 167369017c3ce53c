"""The pod surface GPU clusters need: volumes, pull secrets, scheduler, runtime class, host
network, DRA claims, worker resources by Kubernetes name, the network profile, and the
scheduler keys that reach the RayJob and the pods."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from _factories import meta, trainjob
from pydantic import ValidationError

from raytrain_contract.api.v1alpha1 import TrainJob
from raytrain_contract.meta import allowed_from_parent, child_metadata, without_denied
from raytrain_operator.builders.contract import render_contract
from raytrain_operator.builders.rayjob import build_rayjob, spec_hash

PVC = {"pvc": {"claimName": "ckpt", "mountPath": "/mnt/ckpt"}}


def build(**spec: Any) -> dict[str, Any]:
    return build_rayjob(trainjob(**spec), meta(), 0, suspend=False)


def worker(rj: dict[str, Any]) -> dict[str, Any]:
    return rj["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]


def head(rj: dict[str, Any]) -> dict[str, Any]:
    return rj["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]


def ray_container(template: dict[str, Any]) -> dict[str, Any]:
    return template["spec"]["containers"][0]


def test_volumes_and_mounts_reach_the_ray_container() -> None:
    overrides = {
        "volumes": [{"name": "cache", "emptyDir": {"sizeLimit": "100Gi"}}],
        "volumeMounts": [{"name": "cache", "mountPath": "/data/cache"}],
    }
    rj = build(workerTemplate=overrides, head=overrides)
    for template in (worker(rj), head(rj)):
        assert {"name": "cache", "emptyDir": {"sizeLimit": "100Gi"}} in template["spec"]["volumes"]
        mounts = ray_container(template)["volumeMounts"]
        assert {"name": "cache", "mountPath": "/data/cache"} in mounts
        assert "raytrain-shm" in {m["name"] for m in mounts}


@pytest.mark.parametrize(
    ("path", "collides"),
    [("/dev/shm", "/dev/shm"), ("/etc/raytrain", "/etc/raytrain"), ("/mnt/ckpt/x", "/mnt/ckpt")],
)
def test_a_mount_over_the_operators_is_refused(path: str, collides: str) -> None:
    overrides = {
        "volumes": [{"name": "cache", "emptyDir": {}}],
        "volumeMounts": [{"name": "cache", "mountPath": path}],
    }
    with pytest.raises(ValueError, match=f"spec.workerTemplate.volumeMounts.*{collides}"):
        build(workerTemplate=overrides, storage=PVC)


def test_pod_settings_pass_through() -> None:
    overrides = {
        "imagePullSecrets": [{"name": "registry"}],
        "schedulerName": "volcano",
        "runtimeClassName": "nvidia",
        "hostNetwork": True,
        "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": "eight-gpus"}],
    }
    rj = build(workerTemplate=overrides, head={"imagePullSecrets": [{"name": "registry"}]})
    pod = worker(rj)["spec"]
    assert pod["imagePullSecrets"] == [{"name": "registry"}]
    assert pod["schedulerName"] == "volcano"
    assert pod["runtimeClassName"] == "nvidia"
    assert pod["hostNetwork"] is True and pod["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert pod["resourceClaims"] == overrides["resourceClaims"]
    assert ray_container(worker(rj))["resources"]["claims"] == [{"name": "gpus"}]
    submitter = rj["spec"]["submitterPodTemplate"]["spec"]
    assert submitter["imagePullSecrets"] == [{"name": "registry"}]
    assert "hostNetwork" not in head(rj)["spec"]


@pytest.mark.parametrize("role", ["head", "workerTemplate"])
def test_a_host_network_ray_node_listens_on_its_pods_ip(role: str) -> None:
    """On the node's network Ray would pick one of the node's addresses by itself, and the
    kubelet's probes and the head's Service go to the pod's IP: `ray start` gets that IP."""
    rj = build(**{role: {"hostNetwork": True}}, datasets=None)
    cluster = rj["spec"]["rayClusterSpec"]
    group = cluster["headGroupSpec"] if role == "head" else cluster["workerGroupSpecs"][0]
    other = cluster["workerGroupSpecs"][0] if role == "head" else cluster["headGroupSpec"]
    assert group["rayStartParams"]["node-ip-address"] == "$RAYTRAIN_POD_IP"
    env = ray_container(group["template"])["env"]
    assert {
        "name": "RAYTRAIN_POD_IP",
        "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}},
    } in env
    # The group on the pod network keeps Ray's own choice (the pod has one address).
    assert "node-ip-address" not in other["rayStartParams"]
    assert "RAYTRAIN_POD_IP" not in {e["name"] for e in ray_container(other["template"])["env"]}
    if role == "head":
        assert cluster["headGroupSpec"]["rayStartParams"]["num-cpus"] == "0"


def test_host_network_workers_with_datasets_keep_their_extra_cpu() -> None:
    rj = build(
        workerTemplate={"hostNetwork": True},
        datasets={"train": {"uri": "s3://bucket/train.parquet"}},
        scaling={"numWorkers": 2, "resourcesPerWorker": {"cpu": 2}},
    )
    params = rj["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["rayStartParams"]
    assert params == {"node-ip-address": "$RAYTRAIN_POD_IP", "num-cpus": "3"}


def test_worker_template_resources_are_added_and_a_conflict_is_refused() -> None:
    rj = build(
        scaling={"numWorkers": 2, "resourcesPerWorker": {"cpu": 2}},
        workerTemplate={"resources": {"limits": {"ephemeral-storage": "50Gi"}}},
    )
    res = ray_container(worker(rj))["resources"]
    assert res["limits"] == {"cpu": "2", "ephemeral-storage": "50Gi"}
    with pytest.raises(
        ValueError, match=r"workerTemplate.resources.limits.rdma/ib.*resourcesPerWorker.rdma/ib"
    ):
        build(
            scaling={"numWorkers": 2, "resourcesPerWorker": {"rdma/ib": 1}},
            workerTemplate={"resources": {"limits": {"rdma/ib": 1}}},
        )


def test_kubernetes_resource_names_per_worker() -> None:
    tj = trainjob(
        scaling={
            "numWorkers": 4,
            "workersPerPod": 2,
            "resourcesPerWorker": {"cpu": 4, "nvidia.com/gpu": 1, "rdma/ib": 1},
        }
    )
    rj = build_rayjob(tj, meta(), 0, suspend=False)
    limits = ray_container(worker(rj))["resources"]["limits"]
    assert limits == {"cpu": "8", "nvidia.com/gpu": "2", "rdma/ib": "2"}
    scaling = render_contract(tj, meta(), 0)["scaling"]
    assert scaling["useGpu"] is True
    assert scaling["resourcesPerWorker"] == {"CPU": 4.0, "GPU": 1.0}
    tolerations = worker(rj)["spec"]["tolerations"]
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in tolerations


def test_gpu_shorthand_and_kubernetes_name_render_the_same() -> None:
    short = build(scaling={"numWorkers": 2, "resourcesPerWorker": {"gpu": 2}})
    named = build(scaling={"numWorkers": 2, "resourcesPerWorker": {"nvidia.com/gpu": 2}})
    assert worker(short)["spec"] == worker(named)["spec"]


def test_neuron_cores_become_rays_resource() -> None:
    tj = trainjob(scaling={"numWorkers": 2, "resourcesPerWorker": {"aws.amazon.com/neuroncore": 2}})
    assert render_contract(tj, meta(), 0)["scaling"]["resourcesPerWorker"] == {
        "CPU": 1.0,
        "neuron_cores": 2.0,
    }


@pytest.mark.parametrize(
    ("resources", "words"),
    [
        ({"gpu": 1, "nvidia.com/gpu": 1}, "gpu and nvidia.com/gpu are the same resource"),
        ({"cpus": 2}, "'cpus' is not a resource name"),
        ({"rdma/ib": "0.5"}, "rdma/ib: '0.5' must be a whole number"),
        ({"amd.com/gpu": 1, "nvidia.com/gpu": 1}, "one GPU resource per worker"),
    ],
)
def test_bad_resource_names_are_refused(resources: dict[str, Any], words: str) -> None:
    with pytest.raises(ValidationError, match=words):
        trainjob(scaling={"numWorkers": 1, "resourcesPerWorker": resources})


@pytest.mark.parametrize(
    ("profile", "device", "variable"),
    [("infiniband", "rdma/ib", "NCCL_NET"), ("efa", "vpc.amazonaws.com/efa", "FI_PROVIDER")],
)
def test_network_profile(profile: str, device: str, variable: str) -> None:
    rj = build(
        network={"profile": profile, "devicesPerPod": 4},
        workerTemplate={"env": [{"name": "NCCL_DEBUG", "value": "INFO"}]},
    )
    container = ray_container(worker(rj))
    assert container["resources"]["limits"][device] == "4"
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["IPC_LOCK"]}
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert variable in env
    assert env["NCCL_DEBUG"] == "INFO"  # the user's value wins
    assert [e["name"] for e in container["env"]].count("NCCL_DEBUG") == 1
    head_container = ray_container(head(rj))
    assert head_container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert device not in head_container["resources"].get("limits", {})


def test_network_profile_and_the_same_device_in_resources_per_worker_conflict() -> None:
    with pytest.raises(ValueError, match=r"spec\.network\.profile: infiniband adds rdma/ib"):
        build(
            network={"profile": "infiniband"},
            scaling={"numWorkers": 1, "resourcesPerWorker": {"rdma/ib": 1}},
        )


SCHEDULER_LABELS = {
    "kueue.x-k8s.io/priority-class": "high",
    "volcano.sh/queue-name": "research",
    "kai.scheduler/queue": "team-a",
    "yunikorn.apache.org/queue": "root.ml",
}
SCHEDULER_ANNOTATIONS = {
    "kueue.x-k8s.io/podset-required-topology": "cloud.provider.com/rack",
    "scheduling.volcano.sh/group-name": "pg",
}
NEVER = {
    "kueue.x-k8s.io/queue-name": "sneaky",
    "kueue.x-k8s.io/managed": "true",
    "argocd.argoproj.io/instance": "app",
    "kustomize.toolkit.fluxcd.io/name": "x",
    "app.kubernetes.io/instance": "app",
    "kopf.zalando.org/last-handled-configuration": "{}",
}


def test_scheduler_keys_reach_the_rayjob_and_pods_but_not_gitops_keys() -> None:
    m = meta(
        labels={**SCHEDULER_LABELS, **NEVER},
        annotations={**SCHEDULER_ANNOTATIONS, **NEVER},
    )
    rj = build_rayjob(trainjob(), m, 0, suspend=False)
    for md in (rj["metadata"], worker(rj)["metadata"], head(rj)["metadata"]):
        assert SCHEDULER_LABELS.items() <= md["labels"].items()
        assert SCHEDULER_ANNOTATIONS.items() <= md["annotations"].items()
        for key in NEVER:
            assert key not in md["labels"] and key not in md["annotations"]
    # Other children (ConfigMap, RBAC) do not need them.
    assert "volcano.sh/queue-name" not in child_metadata(m, "x")["labels"]


def test_scheduler_keys_in_explicit_pod_overrides() -> None:
    overrides = {"labels": {**SCHEDULER_LABELS}, "annotations": {**SCHEDULER_ANNOTATIONS}}
    rj = build(workerTemplate=overrides)
    md = worker(rj)["metadata"]
    assert SCHEDULER_LABELS.items() <= md["labels"].items()
    assert SCHEDULER_ANNOTATIONS.items() <= md["annotations"].items()
    assert without_denied(NEVER) == {}
    assert allowed_from_parent(NEVER, scheduling=True) == {}


def test_unused_new_fields_leave_the_spec_hash_alone() -> None:
    # The hash of a spec without the new fields, as the 0.1.0 operator computed it.
    plain = trainjob()
    with_unset = trainjob(network=None, head={"volumes": None, "hostNetwork": None})
    assert spec_hash(plain) != spec_hash(trainjob(network={"profile": "efa"}))
    assert spec_hash(with_unset) == spec_hash(trainjob(head={}))


GPU_EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "gpu" / "infiniband.yaml"


def test_the_infiniband_example_renders() -> None:
    doc = yaml.safe_load(GPU_EXAMPLE.read_text())
    tj = TrainJob.model_validate(doc)
    m = meta(name=doc["metadata"]["name"], labels=doc["metadata"]["labels"])
    rj = build_rayjob(tj, m, 0, suspend=False)
    assert rj["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == "high"
    assert rj["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "gpu"
    limits = ray_container(worker(rj))["resources"]["limits"]
    assert limits == {
        "cpu": "80",
        "memory": "1600Gi",
        "nvidia.com/gpu": "8",
        "rdma/ib": "1",
        "ephemeral-storage": "50Gi",
    }
    scaling = render_contract(tj, m, 0)["scaling"]
    assert scaling["resourcesPerWorker"] == {"CPU": 10.0, "GPU": 1.0, "memory": 200 * 2**30}
