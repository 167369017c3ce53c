"""KubeRay's RayJob schema keeps every pod field a TrainJob can now set.

The API server prunes fields a CRD's schema does not know, silently: a RayJob built with
volumes, DRA claims or a host network that KubeRay's schema lacked would be stored without
them. The operator builds the RayJob of a TrainJob that uses every new field, and the stored
RayJob must still hold each one.

KubeRay's controller writes the whole RayJob back when it adds its finalizer, through Go types
that fill in what the operator left out. Any field so filled in changes the RayJob's spec and
its generation while the job waits in a queue, and Kueue names a workload slice after that
generation: a second slice for the same job, which left it suspended for good. The operator's
RayJob must be what KubeRay would write back.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _wait import wait_for
from conftest import REPO, KubeCluster
from test_operator import (
    T_CREATE,
    Operator,
    crds,
    create,
    get,
    operator,
    pvc,
    running_operator,
    secret,
    trainjob,
)

pytestmark = pytest.mark.integration
__all__ = ["crds", "operator"]  # fixtures used by name

CLAIM_TEMPLATE = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaimTemplate",
    "metadata": {"name": "eight-gpus"},
    "spec": {
        "spec": {
            "devices": {
                "requests": [{"name": "gpus", "exactly": {"deviceClassName": "gpu", "count": 8}}]
            }
        }
    },
}
POD = {
    "volumes": [{"name": "cache", "emptyDir": {"sizeLimit": "10Gi"}}],
    "volumeMounts": [{"name": "cache", "mountPath": "/data/cache", "readOnly": False}],
    "imagePullSecrets": [{"name": "registry"}],
    "schedulerName": "volcano",
    "runtimeClassName": "nvidia",
    "hostNetwork": True,
    "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": "eight-gpus"}],
    "labels": {"kai.scheduler/queue": "team-a"},
    "annotations": {"kueue.x-k8s.io/podset-preferred-topology": "example.com/rack"},
}


def surface(name: str) -> dict[str, Any]:
    """A TrainJob that uses every pod field, a network profile and scheduler metadata."""
    job = trainjob(
        name,
        scaling={
            "numWorkers": 2,
            "useGpu": True,
            "resourcesPerWorker": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": 1},
        },
        network={"profile": "infiniband", "devicesPerPod": 1},
        head={**POD, "resources": {"requests": {"cpu": "1"}, "limits": {"memory": "2Gi"}}},
        workerTemplate={**POD, "resources": {"limits": {"ephemeral-storage": "20Gi"}}},
    )
    job["metadata"]["labels"]["volcano.sh/queue-name"] = "research"
    job["metadata"]["annotations"] = {"argocd.argoproj.io/tracking-id": "app:x"}
    return job


@pytest.fixture
def granting_operator(
    kube_cluster: KubeCluster,
    namespace: str,
    crds: None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Operator]:
    """The operator as the chart runs it with podOverrides.allowHostNetwork,
    allowNetworkProfiles, runtimeClasses and schedulers: the job below uses hostNetwork,
    spec.network, a runtime class and a scheduler, which the defaults refuse
    (test_override_policy_server.py, tests/unit/test_pod_policy.py)."""
    # KubeCluster.env copies os.environ when the operator starts.
    monkeypatch.setenv("RAYTRAIN_ALLOW_HOST_NETWORK", "true")
    monkeypatch.setenv("RAYTRAIN_ALLOW_NETWORK_PROFILES", "true")
    monkeypatch.setenv("RAYTRAIN_RUNTIME_CLASSES", str(POD["runtimeClassName"]))
    monkeypatch.setenv("RAYTRAIN_SCHEDULERS", str(POD["schedulerName"]))
    yield from running_operator(kube_cluster, namespace, tmp_path / "operator.log")


def test_every_new_pod_field_survives_kuberays_schema(
    kube_cluster: KubeCluster, namespace: str, granting_operator: Operator
) -> None:
    name = "surface"
    create(kube_cluster, namespace, secret(f"{name}-s3"))
    # The claim's template must exist: preflight stalls a job whose claim names none.
    create(kube_cluster, namespace, CLAIM_TEMPLATE)
    create(kube_cluster, namespace, surface(name))

    stored = wait_for(
        lambda: get(kube_cluster, namespace, "rayjobs.ray.io", f"{name}-0"),
        timeout=T_CREATE,
        what="the RayJob the operator builds",
    )
    assert stored is not None
    labels = stored["metadata"]["labels"]
    assert labels["volcano.sh/queue-name"] == "research"
    assert "app.kubernetes.io/instance" not in labels
    assert "argocd.argoproj.io/tracking-id" not in (stored["metadata"].get("annotations") or {})
    cluster = stored["spec"]["rayClusterSpec"]
    templates = {
        "head": cluster["headGroupSpec"]["template"],
        "worker": cluster["workerGroupSpecs"][0]["template"],
    }
    for role, template in templates.items():
        pod = template["spec"]
        ray = pod["containers"][0]
        assert {"name": "cache", "emptyDir": {"sizeLimit": "10Gi"}} in pod["volumes"], role
        assert any(m["mountPath"] == "/data/cache" for m in ray["volumeMounts"]), role
        assert pod["imagePullSecrets"] == [{"name": "registry"}], role
        assert pod["schedulerName"] == "volcano", role
        assert pod["runtimeClassName"] == "nvidia", role
        assert pod["hostNetwork"] is True and pod["dnsPolicy"] == "ClusterFirstWithHostNet", role
        assert pod["resourceClaims"] == POD["resourceClaims"], role
        assert ray["resources"]["claims"] == [{"name": "gpus"}], role
        assert template["metadata"]["labels"]["kai.scheduler/queue"] == "team-a", role
        assert template["metadata"]["labels"]["volcano.sh/queue-name"] == "research", role
        annotations = template["metadata"]["annotations"]
        assert annotations["kueue.x-k8s.io/podset-preferred-topology"] == "example.com/rack"
    worker = templates["worker"]["spec"]["containers"][0]
    assert worker["resources"]["limits"]["rdma/ib"] == "1"
    assert worker["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert worker["resources"]["limits"]["ephemeral-storage"] == "20Gi"
    assert worker["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["IPC_LOCK"]}
    assert {e["name"]: e.get("value") for e in worker["env"]}["NCCL_NET"] == "IB"
    submitter = stored["spec"]["submitterPodTemplate"]["spec"]
    assert submitter["imagePullSecrets"] == [{"name": "registry"}]


def test_the_infiniband_example_is_accepted(
    kube_cluster: KubeCluster, namespace: str, crds: None
) -> None:
    text = (REPO / "examples" / "gpu" / "infiniband.yaml").read_text()
    result = kube_cluster.kubectl(
        "create", "-n", namespace, "--dry-run=server", "-f", "-", check=False, input=text
    )
    assert result.returncode == 0, result.stderr


ELASTIC_IN_A_QUEUE = {
    "scaling": {
        "minWorkers": 1,
        "maxWorkers": 3,
        "kueueWorkloadSlices": True,
        "resourcesPerWorker": {"cpu": "1", "memory": "1Gi"},
    },
    "queueName": "team",
}


@pytest.mark.parametrize(
    "variant", ["defaults", "every-pod-field", "elastic-in-a-queue", "pvc-and-env"]
)
def test_kuberays_finalizer_update_leaves_the_rayjobs_spec_as_built(
    kube_cluster: KubeCluster, namespace: str, granting_operator: Operator, variant: str
) -> None:
    name = variant
    create(kube_cluster, namespace, secret(f"{name}-s3"))
    if variant == "every-pod-field":
        create(kube_cluster, namespace, CLAIM_TEMPLATE)
        job = surface(name)
    elif variant == "elastic-in-a-queue":
        job = trainjob(name, **ELASTIC_IN_A_QUEUE)  # no Kueue here: it stays suspended
    elif variant == "pvc-and-env":
        create(kube_cluster, namespace, pvc("ckpt", "ReadWriteMany"))
        job = trainjob(
            name,
            storage={"pvc": {"claimName": "ckpt"}},
            workerTemplate={"env": [{"name": "EMPTY", "value": ""}]},
        )
    else:
        job = trainjob(name)
    create(kube_cluster, namespace, job)

    def finalized() -> dict[str, Any] | None:
        rayjob = get(kube_cluster, namespace, "rayjobs.ray.io", f"{name}-0")
        finalizers = ((rayjob or {}).get("metadata") or {}).get("finalizers") or []
        return rayjob if "ray.io/rayjob-finalizer" in finalizers else None

    rayjob = wait_for(finalized, T_CREATE, "KubeRay to add its finalizer to the RayJob")
    assert rayjob["metadata"]["generation"] == 1, (
        f"KubeRay's update changed the RayJob's spec; the stored spec is:\n{rayjob['spec']}"
    )
