"""The runtime-scope admission policy of the chart against a real API server and KubeRay.

Two elastic TrainJobs run under the operator; KubeRay binds its autoscaler Role (patch on every
pod and RayCluster of the namespace) to each head pod's account, the job's `<job>-runtime`. The
requests are sent with a real token of that account bound to the job's head pod (`kubectl
create token --bound-object-kind Pod`), as the training code and Ray's autoscaler in that pod
hold it. RBAC lets the account patch the other job's RayCluster and any pod; with the policy it
may only scale its own RayCluster, as the autoscaler does.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _wait import wait_for
from conftest import KubeCluster
from test_operator import T_KUBERAY, crds, create, get, operator, secret, trainjob  # noqa: F401 - fixtures, used by name
from test_status_policy_server import helm, policy_docs  # noqa: F401 - fixture, used by name

pytestmark = pytest.mark.integration

TEMPLATE = "templates/runtime-scope-policy.yaml"
ELASTIC = {"minWorkers": 1, "maxWorkers": 3, "resourcesPerWorker": {"cpu": "1", "memory": "1Gi"}}


class Token:
    """kubectl as one ServiceAccount token, with the cluster's address and CA and no client
    certificate (the admin kubeconfig's certificate would win over the token)."""

    def __init__(self, cluster: KubeCluster, token: str, path: Path) -> None:
        raw = json.loads(
            cluster.kubectl("config", "view", "--raw", "--minify", "-o", "json").stdout
        )
        server = raw["clusters"][0]["cluster"]
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "c", "cluster": server}],
            "users": [{"name": "u", "user": {"token": token}}],
            "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
            "current-context": "c",
        }
        path.write_text(json.dumps(config))
        self.cluster = cluster
        self.path = path

    def kubectl(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [self.cluster.kubectl_path, f"--kubeconfig={self.path}", *args],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip


def running_cluster(cluster: KubeCluster, ns: str, job: str) -> tuple[str, dict[str, Any]]:
    """(RayCluster name, head pod) once KubeRay made both and bound its Role."""

    def ready() -> tuple[str, dict[str, Any]] | None:
        rayjob = get(cluster, ns, "rayjobs.ray.io", f"{job}-0") or {}
        name = rayjob.get("status", {}).get("rayClusterName")
        if not name:
            return None
        heads = cluster.get_json(
            "pods", "-n", ns, "-l", f"raytrain.dev/trainjob={job},raytrain.dev/role=head"
        )["items"]
        binding = cluster.kubectl("get", "rolebinding", "-n", ns, name, check=False)
        if len(heads) != 1 or binding.returncode != 0:
            return None
        return name, heads[0]

    return wait_for(ready, T_KUBERAY, f"{job}'s RayCluster, head pod and KubeRay's RoleBinding")


def token_of_pod(
    cluster: KubeCluster, ns: str, account: str, pod: dict[str, Any], path: Path
) -> Token:
    """kubectl with a token of `account` bound to `pod`, as the pod's containers hold it."""
    token = cluster.kubectl(
        "create", "token", account, "-n", ns, "--duration=10m",
        "--bound-object-kind=Pod", f"--bound-object-name={pod['metadata']['name']}",
        f"--bound-object-uid={pod['metadata']['uid']}",
    ).stdout.strip()  # fmt: skip
    return Token(cluster, token, path)


def scale(
    as_job: Token, ns: str, raycluster: str, replicas: int
) -> subprocess.CompletedProcess[str]:
    """The JSON patch Ray's autoscaler sends (ray/autoscaler/_private/kuberay/node_provider.py)."""
    patch = [{"op": "replace", "path": "/spec/workerGroupSpecs/0/replicas", "value": replicas}]
    return as_job.kubectl(
        "patch", "rayclusters.ray.io", raycluster, "-n", ns, "--type=json", "-p", json.dumps(patch)
    )


def workers(cluster: KubeCluster, ns: str, raycluster: str) -> int:
    obj = cluster.get_json("rayclusters.ray.io", "-n", ns, raycluster)
    replicas: int = obj["spec"]["workerGroupSpecs"][0]["replicas"]
    return replicas


def label_pod(as_job: Token, ns: str, pod: str) -> subprocess.CompletedProcess[str]:
    """A label of a new value each time (kubectl sends nothing for a label it already sees)."""
    value = uuid.uuid4().hex[:8]
    return as_job.kubectl("label", "pod", pod, "-n", ns, "--overwrite", f"tampered={value}")


@pytest.fixture
def scope_policy(
    kube_cluster: KubeCluster,
    helm: str,  # noqa: F811 (the fixture imported above)
) -> Iterator[list[dict[str, Any]]]:
    docs = policy_docs(helm, "scope-policy", TEMPLATE)
    yield docs
    for doc in reversed(docs):
        kube_cluster.kubectl(
            "delete", doc["kind"].lower(), doc["metadata"]["name"], "--ignore-not-found"
        )


@pytest.mark.usefixtures("operator")
def test_an_elastic_jobs_account_may_only_scale_its_own_raycluster(
    kube_cluster: KubeCluster, namespace: str, scope_policy: list[dict[str, Any]], tmp_path: Path
) -> None:
    ns = namespace
    for job in ("scope-a", "scope-b"):
        create(kube_cluster, ns, secret(f"{job}-s3"))
        create(kube_cluster, ns, trainjob(job, scaling=ELASTIC))
    cluster_a, head_a = running_cluster(kube_cluster, ns, "scope-a")
    cluster_b, head_b = running_cluster(kube_cluster, ns, "scope-b")
    role = kube_cluster.get_json("rolebinding", "-n", ns, cluster_a)
    assert {"kind": "ServiceAccount", "name": "scope-a-runtime", "namespace": ns} in [
        {k: s.get(k) for k in ("kind", "name", "namespace")} for s in role["subjects"]
    ], role["subjects"]
    as_a = token_of_pod(kube_cluster, ns, "scope-a-runtime", head_a, tmp_path / "a.kubeconfig")

    # What users saw: RBAC alone lets job a's code scale job b's cluster and change its pods.
    # Asked of RBAC (a SelfSubjectAccessReview with the token), not sent: the chart installed by
    # the real-pod tests may already enforce the policy in this cluster.
    for resource in (f"rayclusters.ray.io/{cluster_b}", f"pods/{head_b['metadata']['name']}"):
        allowed = as_a.kubectl("auth", "can-i", "patch", resource, "-n", ns)
        assert allowed.stdout.strip() == "yes", (resource, allowed.stdout, allowed.stderr)

    for doc in scope_policy:
        kube_cluster.apply(doc)

    def enforced() -> subprocess.CompletedProcess[str] | None:
        proc = scale(as_a, ns, cluster_b, 3)
        return proc if "ValidatingAdmissionPolicy" in proc.stderr else None

    refused = wait_for(enforced, 60, "the runtime-scope policy to be enforced")
    assert (
        f"ServiceAccount scope-a-runtime may scale the RayCluster of TrainJob scope-a only, "
        f"not RayCluster {cluster_b}" in refused.stderr
    ), refused.stderr
    # (a probe sent before the policy was in force went through: read what it left)
    replicas_b = workers(kube_cluster, ns, cluster_b)
    again = scale(as_a, ns, cluster_b, 1 if replicas_b != 1 else 2)
    assert again.returncode != 0 and "may scale the RayCluster of TrainJob scope-a only" in (
        again.stderr
    ), again.stderr
    assert workers(kube_cluster, ns, cluster_b) == replicas_b

    for pod in (head_b["metadata"]["name"], head_a["metadata"]["name"]):
        proc = label_pod(as_a, ns, pod)
        assert proc.returncode != 0
        assert (
            "ServiceAccount scope-a-runtime is the per-job runtime account of TrainJob scope-a: "
            f"it may not UPDATE pods ({pod}); it may only scale its own RayCluster"
        ) in proc.stderr, proc.stderr

    # Its own cluster: the autoscaler's patch passes, anything more does not.
    own = scale(as_a, ns, cluster_a, 2)
    assert own.returncode == 0, own.stderr
    assert workers(kube_cluster, ns, cluster_a) == 2
    for path, value, field in [
        ("/spec/workerGroupSpecs/0/template/spec/serviceAccountName", "default", "template"),
        ("/spec/workerGroupSpecs/0/maxReplicas", 50, "maxReplicas"),
        ("/spec/headGroupSpec/template/spec/serviceAccountName", "default", "spec.headGroupSpec"),
        ("/metadata/labels/raytrain.dev~1trainjob", "scope-b", "metadata.labels"),
    ]:
        patch = json.dumps([{"op": "replace", "path": path, "value": value}])
        proc = as_a.kubectl(
            "patch", "rayclusters.ray.io", cluster_a, "-n", ns, "--type=json", "-p", patch
        )
        assert proc.returncode != 0, f"{path} was accepted"
        assert field in proc.stderr and "ValidatingAdmissionPolicy" in proc.stderr, proc.stderr
    deleted = as_a.kubectl("delete", "rayclusters.ray.io", cluster_a, "-n", ns, "--wait=false")
    assert deleted.returncode != 0 and "forbidden" in deleted.stderr.lower(), deleted.stderr


def test_an_account_of_your_own_named_runtime_keeps_its_rights(
    kube_cluster: KubeCluster, namespace: str, scope_policy: list[dict[str, Any]], tmp_path: Path
) -> None:
    """Not a job's Ray pod: a `tools-runtime` account whose token is bound to a pod
    `tools-shell`."""
    ns = namespace
    for doc in scope_policy:
        kube_cluster.apply(doc)
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "tools-runtime"}}
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "tools"},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "patch"]}],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "tools"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "tools"},
        "subjects": [{"kind": "ServiceAccount", "name": "tools-runtime", "namespace": ns}],
    }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "tools-shell"},
        "spec": {
            "serviceAccountName": "tools-runtime",
            "containers": [{"name": "c", "image": "raytrain/trainer-runtime:0.1.0"}],
        },
    }
    for obj in (account, role, binding, pod):
        create(kube_cluster, ns, obj)
    created = kube_cluster.get_json("pods", "-n", ns, "tools-shell")
    as_tools = token_of_pod(kube_cluster, ns, "tools-runtime", created, tmp_path / "tools")
    # A TrainJob's account from such a pod would be refused: wait until the policy is in force.
    job_pod = {**pod, "metadata": {"name": "tools-0-abcde-head-fghij"}}
    create(kube_cluster, ns, job_pod)
    job_like_pod = kube_cluster.get_json("pods", "-n", ns, job_pod["metadata"]["name"])
    job_like = token_of_pod(kube_cluster, ns, "tools-runtime", job_like_pod, tmp_path / "job")

    def enforced() -> bool:
        proc = label_pod(job_like, ns, "tools-shell")
        return "ValidatingAdmissionPolicy" in proc.stderr

    wait_for(enforced, 60, "the runtime-scope policy to be enforced")
    proc = label_pod(as_tools, ns, "tools-shell")
    assert proc.returncode == 0, proc.stderr
