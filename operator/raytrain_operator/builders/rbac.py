"""The per-job identity of the pods: a ServiceAccount, and a Role/RoleBinding that let the
runtime read its own TrainJob and patch its status, and nothing else (`resourceNames`)."""

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
            {
                "apiGroups": [GROUP],
                "resources": [f"{PLURAL}/status"],
                "resourceNames": [meta.name],
                "verbs": ["get", "patch"],
            },
            {
                "apiGroups": [GROUP],
                "resources": [PLURAL],
                "resourceNames": [meta.name],
                "verbs": ["get"],
            },
            # The head's preStop hook reads its own pod's DisruptionTarget condition (pod names
            # are KubeRay's random ones: no resourceNames). Secrets stay out of reach.
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
