"""The per-job identity of the pods: a ServiceAccount, and a Role/RoleBinding that let the
runtime read its own TrainJob and patch its status (`resourceNames`, through the status
subresource only) and read a pod by name (its own, in the preStop hook), and nothing else."""

from __future__ import annotations

from typing import Any

from raytrain_contract.api.v1alpha1 import GROUP, PLURAL, TrainJob
from raytrain_contract.meta import Meta, child_metadata
from raytrain_operator.builders.names import runtime_account_name
from raytrain_operator.builders.pods import pod_service_account


def build_service_account(meta: Meta) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": child_metadata(meta, runtime_account_name(meta.name)),
    }


def build_role(meta: Meta) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": child_metadata(meta, runtime_account_name(meta.name)),
        "rules": [
            # trainer_runtime/kube.py: the reporter reads the TrainJob through its status
            # subresource (the whole object, annotations included) and patches its status.
            {
                "apiGroups": [GROUP],
                "resources": [f"{PLURAL}/status"],
                "resourceNames": [meta.name],
                "verbs": ["get", "patch"],
            },
            # trainer_runtime/drain.py: a pod's preStop hook reads its own pod's
            # DisruptionTarget condition. KubeRay names the pods (`<cluster>-head-<random>`),
            # so the Role cannot name them: `get` by name, no list or watch, no write. Secrets
            # stay out of reach. tests/unit/test_runtime_role.py keeps these rules to the
            # runtime's calls.
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]},
        ],
    }


def pod_service_accounts(trainjob: TrainJob, meta: Meta) -> list[str]:
    """Distinct service accounts of the head and worker pods (the RoleBinding's subjects)."""
    spec = trainjob.spec
    names = [
        pod_service_account(spec, meta, spec.head),
        pod_service_account(spec, meta, spec.worker_template),
    ]
    return sorted(set(names))


def build_role_binding(trainjob: TrainJob, meta: Meta) -> dict[str, Any]:
    name = runtime_account_name(meta.name)
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": child_metadata(meta, name),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [
            {"kind": "ServiceAccount", "name": sa, "namespace": meta.namespace}
            for sa in pod_service_accounts(trainjob, meta)
        ],
    }


def build_rbac(trainjob: TrainJob, meta: Meta) -> list[dict[str, Any]]:
    """ServiceAccount, Role, RoleBinding, in creation order."""
    return [build_service_account(meta), build_role(meta), build_role_binding(trainjob, meta)]
