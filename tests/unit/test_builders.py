"""Every mapping from a TrainJob to its children, one behaviour per test."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml
from _factories import ROOT_EXAMPLES, meta, trainjob

from raytrain_contract.api import templates
from raytrain_contract.api.v1alpha1 import TrainJob
from raytrain_contract.meta import Meta, allowed_from_parent
from raytrain_operator.builders import quantities
from raytrain_operator.builders.contract import build_contract_configmap, render_contract
from raytrain_operator.builders.rayjob import (
    ANNOTATION_FIELD_HASHES,
    as_kuberay_writes_it,
    build_rayjob,
    changed_fields,
)
from raytrain_operator.builders.rbac import build_rbac, build_role, build_role_binding

S3 = {"uri": "s3://bucket/prefix"}


def head(rj: dict[str, Any]) -> dict[str, Any]:
    return rj["spec"]["rayClusterSpec"]["headGroupSpec"]


def group(rj: dict[str, Any]) -> dict[str, Any]:
    groups = rj["spec"]["rayClusterSpec"]["workerGroupSpecs"]
    assert len(groups) == 1
    return groups[0]


def pods(rj: dict[str, Any]) -> list[dict[str, Any]]:
    return [head(rj)["template"], group(rj)["template"]]


def container(template: dict[str, Any]) -> dict[str, Any]:
    return template["spec"]["containers"][0]


def env(template: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e for e in container(template)["env"]}


def build(tj: TrainJob | None = None, m: Meta | None = None, **kw: Any) -> dict[str, Any]:
    return build_rayjob(tj or trainjob(), m or meta(), kw.pop("attempt", 0), suspend=False)


# ----------------------------------------------------------------------------------- RayJob


def test_rayjob_shape() -> None:
    rj = build(attempt=2)
    assert rj["apiVersion"] == "ray.io/v1" and rj["kind"] == "RayJob"
    assert rj["metadata"]["name"] == "digits-2"
    spec = rj["spec"]
    assert spec["entrypoint"] == "python -m trainer_runtime"
    assert spec["shutdownAfterJobFinishes"] is True
    assert 0 < spec["ttlSecondsAfterFinished"] <= 300
    assert spec["submissionMode"] == "K8sJobMode"
    assert spec["backoffLimit"] == 0
    assert "suspend" not in spec  # false, as KubeRay writes it back
    assert "activeDeadlineSeconds" not in spec
    assert spec["rayClusterSpec"]["rayVersion"] == "2.60.0"


def test_suspend_is_passed_through() -> None:
    assert build_rayjob(trainjob(), meta(), 0, suspend=True)["spec"]["suspend"] is True


def test_the_rayjob_is_what_kuberays_go_types_write_back() -> None:
    # KubeRay's finalizer update goes through Go types: a worker group without scaleStrategy
    # gains {}, and omitempty falses and empty env values vanish. Either moves the generation
    # Kueue names workload slices after.
    rj = build_rayjob(trainjob(), meta(), 0, suspend=False)
    assert rj["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["scaleStrategy"] == {}
    written = as_kuberay_writes_it(
        {
            "suspend": False,
            "template": {
                "spec": {
                    "hostNetwork": False,
                    "automountServiceAccountToken": False,
                    "securityContext": {"sysctls": [{"name": "net.x", "value": ""}]},
                    "volumes": [{"name": "cache", "emptyDir": {}}],
                    "containers": [
                        {
                            "name": "ray",
                            "env": [{"name": "EMPTY", "value": ""}, {"name": "A", "value": "1"}],
                            "volumeMounts": [
                                {"name": "cache", "mountPath": "/c", "readOnly": False}
                            ],
                        }
                    ],
                }
            },
        }
    )
    assert written == {
        "template": {
            "spec": {
                "automountServiceAccountToken": False,  # a pointer in Go: false is kept
                "securityContext": {"sysctls": [{"name": "net.x", "value": ""}]},
                "volumes": [{"name": "cache", "emptyDir": {}}],
                "containers": [
                    {
                        "name": "ray",
                        "env": [{"name": "EMPTY"}, {"name": "A", "value": "1"}],
                        "volumeMounts": [{"name": "cache", "mountPath": "/c"}],
                    }
                ],
            }
        }
    }


def test_owner_reference_is_the_trainjob_as_controller() -> None:
    for obj in [
        build(),
        build_contract_configmap(trainjob(), meta(), 0),
        *build_rbac(trainjob(), meta()),
    ]:
        (ref,) = obj["metadata"]["ownerReferences"]
        assert ref["kind"] == "TrainJob" and ref["apiVersion"] == "raytrain.dev/v1alpha1"
        assert ref["uid"] == meta().uid and ref["controller"] is True


def test_head_runs_no_training() -> None:
    params = head(build())["rayStartParams"]
    assert params["num-cpus"] == "0"
    assert params["dashboard-host"] == "0.0.0.0"


def test_fixed_workers_become_replicas_divided_by_workers_per_pod() -> None:
    g = group(build(trainjob(scaling={"numWorkers": 8, "workersPerPod": 4})))
    assert g["groupName"] == "workers"
    assert (g["replicas"], g["minReplicas"], g["maxReplicas"]) == (2, 2, 2)
    rj = build(trainjob(scaling={"numWorkers": 8, "workersPerPod": 4}))
    assert rj["spec"]["rayClusterSpec"]["enableInTreeAutoscaling"] is False


def test_a_search_has_workers_for_each_trial_it_runs_at_once() -> None:
    tune = {"paramSpace": {"lr": {"grid": [0.1, 0.2, 0.3]}}, "metric": "accuracy"}
    one = group(build(trainjob(scaling={"numWorkers": 2}, tune=tune)))
    assert (one["replicas"], one["minReplicas"], one["maxReplicas"]) == (2, 2, 2)
    three = {**tune, "maxConcurrentTrials": 3}
    g = group(build(trainjob(scaling={"numWorkers": 4, "workersPerPod": 2}, tune=three)))
    assert (g["replicas"], g["minReplicas"], g["maxReplicas"]) == (6, 6, 6)
    g = group(build(trainjob(scaling={"minWorkers": 1, "maxWorkers": 2}, tune=three)))
    assert (g["replicas"], g["minReplicas"], g["maxReplicas"]) == (3, 3, 6)


def test_elastic_workers_enable_the_autoscaler_between_min_and_max() -> None:
    rj = build(trainjob(scaling={"minWorkers": 2, "maxWorkers": 6, "workersPerPod": 2}))
    g = group(rj)
    assert (g["replicas"], g["minReplicas"], g["maxReplicas"]) == (1, 1, 3)
    assert rj["spec"]["rayClusterSpec"]["enableInTreeAutoscaling"] is True


def test_elastic_with_kueue_is_a_fixed_shape_without_autoscaler() -> None:
    tj = trainjob(scaling={"minWorkers": 2, "maxWorkers": 6}, queueName="team-a")
    rj = build(tj)
    assert rj["spec"]["rayClusterSpec"]["enableInTreeAutoscaling"] is False
    g = group(rj)
    assert g["replicas"] == g["minReplicas"] == g["maxReplicas"] == 6


def test_elastic_with_kueue_slices_starts_small_with_the_autoscaler() -> None:
    scaling = {"minWorkers": 2, "maxWorkers": 6, "workersPerPod": 2, "kueueWorkloadSlices": True}
    rj = build(trainjob(scaling=scaling, queueName="team-a"))
    assert rj["metadata"]["annotations"]["kueue.x-k8s.io/elastic-job"] == "true"
    assert rj["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    assert rj["spec"]["rayClusterSpec"]["enableInTreeAutoscaling"] is True
    # Kueue admits the first slice at the RayJob's replicas; Ray's autoscaler asks for more.
    g = group(rj)
    assert (g["replicas"], g["minReplicas"], g["maxReplicas"]) == (1, 1, 3)
    # The autoscaler's container is hardened like the others.
    assert "securityContext" in rj["spec"]["rayClusterSpec"]["autoscalerOptions"]
    # Without a queue there is nothing to mark; a fixed job with a queue is not elastic.
    plain = build(trainjob(scaling={"minWorkers": 2, "maxWorkers": 6}, queueName="team-a"))
    assert "kueue.x-k8s.io/elastic-job" not in plain["metadata"]["annotations"]


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        (
            {"scaling": {"numWorkers": 2, "kueueWorkloadSlices": True}, "queueName": "q"},
            "instead of numWorkers",
        ),
        ({"scaling": {"minWorkers": 1, "maxWorkers": 2, "kueueWorkloadSlices": True}}, "needs"),
    ],
)
def test_kueue_slices_need_an_elastic_queued_job(spec: dict[str, Any], field: str) -> None:
    with pytest.raises(ValueError, match=r"spec\.scaling\.kueueWorkloadSlices") as caught:
        trainjob(**spec)
    assert field in str(caught.value)


def test_worker_resources_are_per_worker_times_workers_per_pod() -> None:
    tj = trainjob(
        scaling={
            "numWorkers": 4,
            "workersPerPod": 2,
            "useGpu": True,
            "resourcesPerWorker": {"cpu": "1500m", "memory": "3Gi", "gpu": 2},
        }
    )
    res = container(group(build(tj))["template"])["resources"]
    want = {"cpu": "3", "memory": "6Gi", "nvidia.com/gpu": "4"}
    assert res["requests"] == want and res["limits"] == want


def test_use_gpu_without_a_gpu_count_means_one_gpu_per_worker() -> None:
    tj = trainjob(scaling={"numWorkers": 2, "useGpu": True})
    res = container(group(build(tj))["template"])["resources"]
    assert res["limits"]["nvidia.com/gpu"] == "1"
    assert res["requests"]["cpu"] == "1"
    tolerations = group(build(tj))["template"]["spec"]["tolerations"]
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in tolerations


def test_no_gpu_without_use_gpu() -> None:
    res = container(group(build())["template"])["resources"]
    assert "nvidia.com/gpu" not in res["limits"]


def test_custom_resources_go_to_the_worker_group() -> None:
    tj = trainjob(
        scaling={
            "numWorkers": 2,
            "workersPerPod": 2,
            "resourcesPerWorker": {"custom": {"tpu_slice": 0.5}},
        }
    )
    assert group(build(tj))["resources"] == {"tpu_slice": "1"}


def test_accelerator_type_is_a_required_node_affinity() -> None:
    tj = trainjob(
        scaling={"numWorkers": 2, "useGpu": True, "acceleratorType": "NVIDIA-A100-SXM4-80GB"}
    )
    affinity = group(build(tj))["template"]["spec"]["affinity"]
    terms = affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert terms == [
        {
            "matchExpressions": [
                {
                    "key": "nvidia.com/gpu.product",
                    "operator": "In",
                    "values": ["NVIDIA-A100-SXM4-80GB"],
                }
            ]
        }
    ]


def _placement(strategy: str) -> dict[str, Any]:
    tj = trainjob(scaling={"numWorkers": 2, "placementStrategy": strategy})
    return group(build(tj))["template"]["spec"]


SELECTOR = {"matchLabels": {"raytrain.dev/trainjob": "digits", "raytrain.dev/role": "worker"}}


def test_strict_spread_is_required_anti_affinity_on_hostname() -> None:
    (term,) = _placement("STRICT_SPREAD")["affinity"]["podAntiAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    assert term == {"labelSelector": SELECTOR, "topologyKey": "kubernetes.io/hostname"}


def test_spread_is_a_soft_topology_spread() -> None:
    spec = _placement("SPREAD")
    (tsc,) = spec["topologySpreadConstraints"]
    assert tsc["whenUnsatisfiable"] == "ScheduleAnyway" and tsc["labelSelector"] == SELECTOR
    assert "podAntiAffinity" not in spec.get("affinity", {})


def test_strict_pack_is_required_pod_affinity() -> None:
    (term,) = _placement("STRICT_PACK")["affinity"]["podAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    assert term["labelSelector"] == SELECTOR


def test_pack_is_preferred_pod_affinity() -> None:
    (pref,) = _placement("PACK")["affinity"]["podAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"
    ]
    assert pref["podAffinityTerm"]["labelSelector"] == SELECTOR


def test_user_affinity_is_merged_not_replaced() -> None:
    user = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
                ]
            }
        },
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 1, "podAffinityTerm": {"topologyKey": "zone"}}
            ]
        },
    }
    tj = trainjob(
        scaling={
            "numWorkers": 2,
            "useGpu": True,
            "acceleratorType": "L4",
            "placementStrategy": "STRICT_SPREAD",
        },
        workerTemplate={"affinity": user},
    )
    affinity = group(build(tj))["template"]["spec"]["affinity"]
    (term,) = affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert [e["key"] for e in term["matchExpressions"]] == ["zone", "nvidia.com/gpu.product"]
    anti = affinity["podAntiAffinity"]
    assert len(anti["preferredDuringSchedulingIgnoredDuringExecution"]) == 1
    assert len(anti["requiredDuringSchedulingIgnoredDuringExecution"]) == 1
    # the user's input is not modified
    assert (
        len(
            user["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
                "nodeSelectorTerms"
            ][0]["matchExpressions"]
        )
        == 1
    )


def test_pod_overrides_reach_their_pods() -> None:
    tj = trainjob(
        imagePullPolicy="IfNotPresent",
        head={
            "resources": {"requests": {"cpu": "2"}},
            "nodeSelector": {"pool": "cpu"},
            "priorityClassName": "high",
            "labels": {"team": "vision"},
        },
        workerTemplate={
            "tolerations": [{"key": "spot", "operator": "Exists"}],
            "env": [
                {"name": "NCCL_DEBUG", "value": "INFO"},
                {"name": "RAYTRAIN_CONTRACT", "value": "/x"},
            ],
            "envFrom": [{"configMapRef": {"name": "extra"}}],
            "serviceAccountName": "trainer",
            "annotations": {"note": "x"},
        },
    )
    rj = build(tj)
    h, w = head(rj)["template"], group(rj)["template"]
    assert container(h)["resources"] == {"requests": {"cpu": "2"}}
    assert h["spec"]["nodeSelector"] == {"pool": "cpu"}
    assert h["spec"]["priorityClassName"] == "high"
    assert h["metadata"]["labels"]["team"] == "vision"
    assert {"key": "spot", "operator": "Exists"} in w["spec"]["tolerations"]
    assert env(w)["NCCL_DEBUG"]["value"] == "INFO"
    # ours win over a user variable of the same name
    assert env(w)["RAYTRAIN_CONTRACT"]["value"] == "/etc/raytrain/contract.json"
    assert container(w)["envFrom"] == [{"configMapRef": {"name": "extra"}}]
    assert w["spec"]["serviceAccountName"] == "trainer"
    assert h["spec"]["serviceAccountName"] == "digits-runtime"
    assert w["metadata"]["annotations"]["note"] == "x"
    assert all(container(t)["imagePullPolicy"] == "IfNotPresent" for t in (h, w))


def test_labels_vocabulary_on_the_rayjob_and_every_pod() -> None:
    rj = build(attempt=1)
    assert rj["metadata"]["labels"]["raytrain.dev/trainjob"] == "digits"
    assert rj["metadata"]["labels"]["raytrain.dev/attempt"] == "1"
    for template, role in zip(pods(rj), ("head", "worker"), strict=True):
        labels = template["metadata"]["labels"]
        assert labels["raytrain.dev/trainjob"] == "digits"
        assert labels["raytrain.dev/attempt"] == "1"
        assert labels["raytrain.dev/role"] == role


def submitter(rj: dict[str, Any]) -> dict[str, Any]:
    template: dict[str, Any] = rj["spec"]["submitterPodTemplate"]
    return template


def all_pods(rj: dict[str, Any]) -> list[dict[str, Any]]:
    return [*pods(rj), submitter(rj)]


def shm(template: dict[str, Any]) -> dict[str, Any]:
    """The /dev/shm volume of a Ray pod, checked to be mounted in its Ray container."""
    (mount,) = [m for m in container(template)["volumeMounts"] if m["mountPath"] == "/dev/shm"]
    (volume,) = [v for v in template["spec"]["volumes"] if v["name"] == mount["name"]]
    return dict(volume["emptyDir"])


def test_submitter_pod_has_our_labels_and_leaves_the_command_to_kuberay() -> None:
    tj = trainjob(imagePullPolicy="Never")
    template = submitter(build(tj, attempt=1))
    labels = template["metadata"]["labels"]
    assert labels["raytrain.dev/trainjob"] == "digits"
    assert labels["raytrain.dev/attempt"] == "1"
    assert labels["raytrain.dev/role"] == "submitter"
    spec = template["spec"]
    assert spec["restartPolicy"] == "Never"  # a Job's pods: Never or OnFailure
    assert spec["automountServiceAccountToken"] is False
    (c,) = spec["containers"]
    # KubeRay writes its `ray job submit` command only into a container without one
    assert c["name"] == "ray-job-submitter"
    assert "command" not in c and "args" not in c
    assert c["image"] == tj.spec.image and c["imagePullPolicy"] == "Never"
    assert c["resources"]["limits"] == {"cpu": "1", "memory": "1Gi"}


def test_the_submitter_is_placed_like_the_head() -> None:
    toleration = {"key": "pool", "operator": "Equal", "value": "train", "effect": "NoSchedule"}
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "zone", "operator": "In", "values": ["a"]}]}]}}}  # fmt: skip
    head = {
        "nodeSelector": {"pool": "train"},
        "tolerations": [toleration],
        "affinity": affinity,
        "priorityClassName": "training",
    }
    spec = submitter(build(trainjob(head=head)))["spec"]
    assert spec["nodeSelector"] == {"pool": "train"}
    assert spec["tolerations"] == [toleration]
    assert spec["affinity"] == affinity
    assert spec["priorityClassName"] == "training"
    # Without head overrides the scheduler picks: no placement of our own.
    plain = submitter(build())["spec"]
    assert not {"nodeSelector", "tolerations", "affinity", "priorityClassName"} & set(plain)


def test_every_pod_runs_as_the_runtime_user_without_privileges() -> None:
    for template in all_pods(build()):
        ctx = template["spec"]["securityContext"]
        assert ctx["runAsNonRoot"] is True
        assert (ctx["runAsUser"], ctx["runAsGroup"], ctx["fsGroup"]) == (1000, 1000, 1000)
        assert ctx["fsGroupChangePolicy"] == "OnRootMismatch"
        assert ctx["seccompProfile"] == {"type": "RuntimeDefault"}
        for c in template["spec"]["containers"]:
            assert c["securityContext"]["allowPrivilegeEscalation"] is False
            assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}


def test_the_autoscaler_sidecar_gets_the_same_container_context() -> None:
    elastic = build(trainjob(scaling={"minWorkers": 1, "maxWorkers": 3}))
    options = elastic["spec"]["rayClusterSpec"]["autoscalerOptions"]
    assert options["securityContext"] == container(head(elastic)["template"])["securityContext"]
    assert "autoscalerOptions" not in build()["spec"]["rayClusterSpec"]


def test_no_process_of_ours_is_pid_1() -> None:
    # KubeRay's bash/`ray start` wrapper would be PID 1 and ignore SIGTERM: the pause is PID 1
    for template in all_pods(build()):
        assert template["spec"]["shareProcessNamespace"] is True


def test_termination_grace_defaults_and_follows_the_pod_overrides() -> None:
    default = build()
    assert {t["spec"]["terminationGracePeriodSeconds"] for t in all_pods(default)} == {120}
    rj = build(trainjob(head={"terminationGracePeriodSeconds": 600}, workerTemplate={"labels": {}}))
    assert head(rj)["template"]["spec"]["terminationGracePeriodSeconds"] == 600
    assert group(rj)["template"]["spec"]["terminationGracePeriodSeconds"] == 120
    rj = build(trainjob(workerTemplate={"terminationGracePeriodSeconds": 5}))
    assert group(rj)["template"]["spec"]["terminationGracePeriodSeconds"] == 5
    with pytest.raises(ValueError, match=r"spec\.head\.terminationGracePeriodSeconds"):
        trainjob(head={"terminationGracePeriodSeconds": 0})


@pytest.mark.parametrize(
    ("scaling", "size"),
    [
        # 40% of the limit: Ray's object store (30%) and room for DataLoader/NCCL segments
        ({"numWorkers": 2, "resourcesPerWorker": {"memory": "2Gi"}}, "820Mi"),
        ({"numWorkers": 4, "workersPerPod": 2, "resourcesPerWorker": {"memory": "4Gi"}}, "3277Mi"),
        ({"numWorkers": 1, "resourcesPerWorker": {"memory": "10G"}}, "3815Mi"),
    ],
)
def test_worker_dev_shm_is_memory_sized_for_the_object_store(
    scaling: dict[str, Any], size: str
) -> None:
    template = group(build(trainjob(scaling=scaling)))["template"]
    volume = shm(template)
    assert volume == {"medium": "Memory", "sizeLimit": size}
    limit = quantities.parse(container(template)["resources"]["limits"]["memory"])
    # Ray keeps its store in /dev/shm only when all of it fits there
    assert quantities.parse(size) >= limit * quantities.parse("0.3")
    assert quantities.parse(size) < limit


def test_head_dev_shm_follows_the_heads_memory_limit() -> None:
    assert shm(head(build())["template"]) == {"medium": "Memory", "sizeLimit": "1639Mi"}
    tj = trainjob(head={"resources": {"limits": {"memory": "10Gi"}}})
    assert shm(head(build(tj))["template"])["sizeLimit"] == "4Gi"


def test_dev_shm_without_a_memory_limit_has_no_size_limit() -> None:
    # Ray then sizes its store from the node's memory; any fixed size could be too small
    template = group(build(trainjob(scaling={"numWorkers": 2})))["template"]
    assert "memory" not in container(template)["resources"]["limits"]
    assert shm(template) == {"medium": "Memory"}
    tj = trainjob(head={"resources": {"requests": {"memory": "4Gi"}}})
    assert shm(head(build(tj))["template"]) == {"medium": "Memory"}


def test_a_head_memory_limit_that_is_no_quantity_names_the_field() -> None:
    tj = trainjob(head={"resources": {"limits": {"memory": "lots"}}})
    with pytest.raises(ValueError, match=r"spec\.head\.resources\.limits\.memory: 'lots'"):
        build(tj)


def test_parent_labels_and_annotations_are_copied_by_allow_list_only() -> None:
    m = meta(
        labels={
            "team": "vision",
            "app.kubernetes.io/part-of": "recsys",
            "app.kubernetes.io/instance": "argo-app",
            "argocd.argoproj.io/instance": "x",
            "kustomize.toolkit.fluxcd.io/name": "y",
            "helm.toolkit.fluxcd.io/name": "z",
            "example.com/other": "w",
        },
        annotations={
            "kubectl.kubernetes.io/last-applied-configuration": "{}",
            "kopf.zalando.org/last-handled-configuration": "{}",
            "raytrain.dev/last-handled-configuration": "{}",
            "owner": "alice",
        },
    )
    rj = build(m=m)
    for labels in [rj["metadata"]["labels"], *(p["metadata"]["labels"] for p in pods(rj))]:
        assert labels["team"] == "vision"
        for key in (
            "app.kubernetes.io/part-of",
            "app.kubernetes.io/instance",
            "argocd.argoproj.io/instance",
            "kustomize.toolkit.fluxcd.io/name",
            "helm.toolkit.fluxcd.io/name",
            "example.com/other",
        ):
            assert key not in labels
    for annos in [
        rj["metadata"]["annotations"],
        *(p["metadata"]["annotations"] for p in pods(rj)),
    ]:
        assert annos["owner"] == "alice"
        assert not any(k.startswith(("kubectl.kubernetes.io/", "kopf.zalando.org/")) for k in annos)
        assert "raytrain.dev/last-handled-configuration" not in annos


def test_allow_list_drops_prefixed_keys_it_does_not_know() -> None:
    assert allowed_from_parent({"a": "1", "x.io/b": "2", "app.kubernetes.io/name": "n"}) == {
        "a": "1",
    }


def test_queue_name_becomes_the_kueue_label() -> None:
    rj = build(trainjob(queueName="team-a-queue"))
    assert rj["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a-queue"
    assert "kueue.x-k8s.io/queue-name" not in build()["metadata"]["labels"]


# ----------------------------------------------------------------------------------- storage


def test_s3_credentials_are_secret_references_on_every_pod() -> None:
    tj = trainjob(
        storage={
            "s3": {
                **S3,
                "endpoint": "http://minio:9000",
                "region": "eu-west-1",
                "credentialsSecret": {
                    "name": "creds",
                    "accessKeyIdKey": "id",
                    "secretAccessKeyKey": "key",
                    "sessionTokenKey": "tok",
                },
            }
        }
    )
    for template in pods(build(tj)):
        e = env(template)
        assert e["AWS_ACCESS_KEY_ID"] == {
            "name": "AWS_ACCESS_KEY_ID",
            "valueFrom": {"secretKeyRef": {"name": "creds", "key": "id"}},
        }
        assert e["AWS_SECRET_ACCESS_KEY"]["valueFrom"]["secretKeyRef"] == {
            "name": "creds",
            "key": "key",
        }
        assert e["AWS_SESSION_TOKEN"]["valueFrom"]["secretKeyRef"] == {
            "name": "creds",
            "key": "tok",
        }
        assert e["AWS_ENDPOINT_URL"]["value"] == "http://minio:9000"
        assert e["AWS_REGION"]["value"] == e["AWS_DEFAULT_REGION"]["value"] == "eu-west-1"
        assert all("value" not in e[k] for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"))


def test_s3_with_irsa_uses_the_users_service_account() -> None:
    tj = trainjob(storage={"s3": {**S3, "serviceAccountName": "irsa-trainer"}})
    rj = build(tj)
    for template in pods(rj):
        assert template["spec"]["serviceAccountName"] == "irsa-trainer"
        assert "AWS_ACCESS_KEY_ID" not in env(template)
    binding = build_role_binding(tj, meta())
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "irsa-trainer", "namespace": "team-a"}
    ]


def test_pvc_is_mounted_at_the_same_path_on_every_pod() -> None:
    tj = trainjob(
        storage={"pvc": {"claimName": "ckpt", "mountPath": "/mnt/ckpt", "subPath": "team/runs"}}
    )
    rj = build(tj)
    for template in pods(rj):
        vols = {v["name"]: v for v in template["spec"]["volumes"]}
        assert vols["raytrain-storage"]["persistentVolumeClaim"] == {"claimName": "ckpt"}
        mounts = {m["name"]: m for m in container(template)["volumeMounts"]}
        assert mounts["raytrain-storage"]["mountPath"] == "/mnt/ckpt"
        assert not any(k.startswith("AWS_") for k in env(template))
    assert render_contract(tj, meta(), 0)["storage"] == {
        "type": "pvc",
        "path": "/mnt/ckpt/team/runs",
    }


def test_pvc_without_sub_path_uses_the_mount_path() -> None:
    tj = trainjob(storage={"pvc": {"claimName": "ckpt"}})
    assert render_contract(tj, meta(), 0)["storage"] == {"type": "pvc", "path": "/mnt/raytrain"}


def test_contract_volume_and_env_on_every_pod() -> None:
    for template in pods(build()):
        vols = {v["name"]: v for v in template["spec"]["volumes"]}
        assert vols["raytrain-contract"]["configMap"]["name"] == "digits-contract"
        mounts = {m["name"]: m for m in container(template)["volumeMounts"]}
        assert mounts["raytrain-contract"] == {
            "name": "raytrain-contract",
            "mountPath": "/etc/raytrain",
            "readOnly": True,
        }
        e = env(template)
        assert e["RAYTRAIN_CONTRACT"]["value"] == "/etc/raytrain/contract.json"
        assert e["RAYTRAIN_TRAINJOB_NAMESPACE"]["value"] == "team-a"
        assert e["RAYTRAIN_TRAINJOB_NAME"]["value"] == "digits"


# ----------------------------------------------------------------------------------- contract


def test_contract_document() -> None:
    doc = render_contract(trainjob(), meta(), 1)
    assert doc["contractVersion"] == 1
    assert doc["trainJob"] == {
        "apiVersion": "raytrain.dev/v1alpha1",
        "namespace": "team-a",
        "name": "digits",
        "uid": meta().uid,
    }
    assert doc["runName"] == "digits-5f0c2a7e91b3"
    assert doc["attempt"] == 1
    assert doc["entrypoint"] == "examples.digits.train:train_loop_per_worker"
    assert doc["config"] == {"epochs": 5, "lr": 0.05}
    assert doc["scaling"]["resourcesPerWorker"] == {"CPU": 1.0, "memory": 2 * 1024**3}
    assert doc["scaling"]["useGpu"] is False and doc["scaling"]["numWorkers"] == 2
    assert doc["torch"] == {"backend": "gloo", "timeoutSeconds": 1800}
    assert doc["storage"] == {
        "type": "s3",
        "path": "s3://bucket/prefix",
        "endpoint": "http://127.0.0.1:9000",
        "region": "us-east-1",
    }
    assert doc["checkpoint"] == {"numToKeep": None, "scoreAttribute": None, "scoreOrder": None}
    assert doc["failure"] == {"maxFailures": 0}
    assert doc["datasets"] == {} and doc["tune"] is None
    assert doc["report"]["enabled"] is True
    assert "digits-s3" not in json.dumps(doc)  # credentials never in the document


def test_contract_gpu_defaults_to_nccl_and_converts_quantities() -> None:
    tj = trainjob(
        scaling={
            "numWorkers": 2,
            "useGpu": True,
            "resourcesPerWorker": {"cpu": "500m", "memory": "1G", "custom": {"x": 2}},
        }
    )
    doc = render_contract(tj, meta(), 0)
    assert doc["scaling"]["resourcesPerWorker"] == {
        "CPU": 0.5,
        "GPU": 1.0,
        "memory": 10**9,
        "x": 2.0,
    }
    assert doc["torch"]["backend"] == "nccl"


def test_contract_tune_and_datasets() -> None:
    tj = trainjob(
        datasets={"train": {"uri": "s3://bucket/data/", "format": "csv", "split": False}},
        tune={
            "paramSpace": {"lr": {"loguniform": [0.001, 0.1]}},
            "numSamples": 4,
            "metric": "accuracy",
            "scheduler": {"type": "ASHA", "maxT": 10},
        },
        checkpoint={"numToKeep": 2, "scoreAttribute": "accuracy", "scoreOrder": "max"},
        failure={"maxFailures": 3},
    )
    doc = render_contract(tj, meta(), 0)
    assert doc["datasets"] == {
        "train": {"uri": "s3://bucket/data/", "format": "csv", "split": False}
    }
    assert doc["tune"] == {
        "paramSpace": {"lr": {"loguniform": [0.001, 0.1]}},
        "numSamples": 4,
        "metric": "accuracy",
        "mode": "max",
        "maxConcurrentTrials": None,
        "scheduler": {"type": "ASHA", "maxT": 10, "gracePeriod": 1, "reductionFactor": 2.0},
    }
    assert doc["checkpoint"] == {"numToKeep": 2, "scoreAttribute": "accuracy", "scoreOrder": "max"}
    assert doc["failure"] == {"maxFailures": 3}


def test_contract_configmap_holds_the_document() -> None:
    cm = build_contract_configmap(trainjob(), meta(), 3)
    assert cm["metadata"]["name"] == "digits-contract"
    assert json.loads(cm["data"]["contract.json"]) == render_contract(trainjob(), meta(), 3)


# ----------------------------------------------------------------------------------- RBAC


def test_role_allows_only_this_trainjob() -> None:
    role = build_role(meta())
    assert role["metadata"]["name"] == "digits-runtime"
    assert role["rules"] == [
        {
            "apiGroups": ["raytrain.dev"],
            "resources": ["trainjobs/status"],
            "resourceNames": ["digits"],
            "verbs": ["get", "patch"],
        },
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]},
    ]


def test_role_binding_binds_the_pods_accounts() -> None:
    sa, _, binding = build_rbac(trainjob(), meta())
    assert sa["kind"] == "ServiceAccount" and sa["metadata"]["name"] == "digits-runtime"
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": "digits-runtime",
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "digits-runtime", "namespace": "team-a"}
    ]
    tj = trainjob(head={"serviceAccountName": "custom"})
    names = [s["name"] for s in build_role_binding(tj, meta())["subjects"]]
    assert names == ["custom", "digits-runtime"]


# ----------------------------------------------------------------------------------- quantities


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1", 1),
        ("500m", 0.5),
        ("2Gi", 2 * 1024**3),
        ("1G", 10**9),
        ("1.5", 1.5),
        ("1e3", 1000),
        (2, 2),
    ],
)
def test_quantities_parse(text: str | int, value: float) -> None:
    assert float(quantities.parse(text)) == value


@pytest.mark.parametrize("bad", ["", "abc", "1Q", "-1", "1.2.3"])
def test_bad_quantities_name_the_field(bad: str) -> None:
    with pytest.raises(ValueError, match=r"spec\.x"):
        quantities.parse(bad, "spec.x")


def test_examples_build() -> None:
    for path in ROOT_EXAMPLES:
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
        for doc in docs:
            if doc.get("kind") == "TrainJob":
                tj = TrainJob.model_validate(templates.expand(doc, docs))
                rj = build(tj, meta(name=doc["metadata"]["name"]))
                assert rj["metadata"]["name"] == f"{doc['metadata']['name']}-0"


def test_the_rayjob_in_docs_operator_md_is_what_the_builder_renders() -> None:
    root = ROOT_EXAMPLES[0].parents[1]
    text = (root / "docs" / "operator.md").read_text()
    section = text[text.index("## The RayJob for `examples/digits.yaml`") :]
    documented = yaml.safe_load(section.split("```yaml\n", 1)[1].split("```", 1)[0])
    (doc,) = [
        d
        for d in yaml.safe_load_all((root / "examples" / "digits.yaml").read_text())
        if d["kind"] == "TrainJob"
    ]
    rendered = build(TrainJob.model_validate(doc), meta(name="digits"))
    assert documented == rendered, (
        "docs/operator.md shows an outdated RayJob; paste this instead:\n"
        + yaml.safe_dump(rendered, sort_keys=False)
    )


def test_every_ray_container_knows_its_attempt_and_cluster() -> None:
    rj = build_rayjob(trainjob(), meta(), 3, suspend=False)
    cluster = rj["spec"]["rayClusterSpec"]
    templates = [cluster["headGroupSpec"]["template"]] + [
        g["template"] for g in cluster["workerGroupSpecs"]
    ]
    for template in templates:
        e = env(template)
        assert e["RAYTRAIN_ATTEMPT"] == {"name": "RAYTRAIN_ATTEMPT", "value": "3"}
        assert e["RAYTRAIN_RAYJOB"]["value"] == "digits-3"
        field = e["RAYTRAIN_RAYCLUSTER"]["valueFrom"]["fieldRef"]["fieldPath"]
        assert field == "metadata.labels['ray.io/cluster']"


def test_the_rayjob_records_a_hash_per_built_field() -> None:
    rj = build_rayjob(trainjob(), meta(), 0, suspend=False)
    built = rj["metadata"]["annotations"][ANNOTATION_FIELD_HASHES]
    assert changed_fields(trainjob(), built) == []
    assert changed_fields(trainjob(ttlSecondsAfterFinished=5, suspend=True), built) == []
    edited = trainjob(scaling={"numWorkers": 4}, config={"epochs": 1})
    assert changed_fields(edited, built) == ["spec.config", "spec.scaling"]
    assert changed_fields(edited, "not json") is None


def test_a_job_with_datasets_sizes_ray_datas_parquet_footer_readers_to_its_worker_pods() -> None:
    def env(rj: dict[str, Any], spec: dict[str, Any]) -> dict[str, str]:
        (c,) = [c for c in spec["template"]["spec"]["containers"] if c["name"].startswith("ray")]
        return {e["name"]: e.get("value") for e in c["env"]}

    data = {"train": {"uri": "s3://bucket/t/", "format": "parquet"}}
    rj = build(trainjob(scaling={"numWorkers": 4, "workersPerPod": 2}, datasets=data))
    assert env(rj, group(rj))["RAY_DATA_PARQUET_FOOTER_NUM_ACTORS"] == "2"
    assert env(rj, head(rj))["RAY_DATA_PARQUET_FOOTER_NUM_ACTORS"] == "2"
    big = build(trainjob(scaling={"numWorkers": 100}, datasets=data))
    assert env(big, group(big))["RAY_DATA_PARQUET_FOOTER_NUM_ACTORS"] == "32"
    plain = build(trainjob(scaling={"numWorkers": 4}))
    assert "RAY_DATA_PARQUET_FOOTER_NUM_ACTORS" not in env(plain, group(plain))
    mine = {"env": [{"name": "RAY_DATA_PARQUET_FOOTER_NUM_ACTORS", "value": "8"}]}
    rj = build(trainjob(scaling={"numWorkers": 4}, datasets=data, workerTemplate=mine))
    assert env(rj, group(rj))["RAY_DATA_PARQUET_FOOTER_NUM_ACTORS"] == "8"
