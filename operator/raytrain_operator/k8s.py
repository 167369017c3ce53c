"""Thin helpers over the Kubernetes API: create, server-side apply, get-or-none, delete-if-present.

Every write names our field manager (`raytrain-operator`), so an object's managedFields show
what the operator owns. All calls go through `call`, which counts failures by verb and resource
for the metrics; 404 on read/delete and 409 on create are answers, not errors. Secret values
are never logged: the only thing read from a Secret is the list of its keys.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any, TypeVar

import kubernetes
from kubernetes.client.exceptions import ApiException

from raytrain_operator import metrics
from raytrain_operator.api.v1alpha1 import GROUP, PLURAL, VERSION

T = TypeVar("T")
RAY_GROUP, RAY_VERSION, RAYJOBS = "ray.io", "v1", "rayjobs"
RAYCLUSTERS = "rayclusters"
#: Our name in every object's managedFields: server-side apply tracks what we own under it.
FIELD_MANAGER = "raytrain-operator"
APPLY_PATCH = "application/apply-patch+yaml"


@functools.lru_cache(maxsize=1)
def client() -> kubernetes.client.ApiClient:
    try:
        kubernetes.config.load_incluster_config()
    except kubernetes.config.ConfigException:
        kubernetes.config.load_kube_config()
    return kubernetes.client.ApiClient()


def core() -> Any:
    return kubernetes.client.CoreV1Api(client())


def rbac() -> Any:
    return kubernetes.client.RbacAuthorizationV1Api(client())


def policy() -> Any:
    return kubernetes.client.PolicyV1Api(client())


def custom() -> Any:
    return kubernetes.client.CustomObjectsApi(client())


def call(verb: str, resource: str, fn: Callable[[], T], *, ok: tuple[int, ...] = ()) -> T | None:
    """Run one API call; None for an expected status in `ok` (404, 409), else raise."""
    try:
        return fn()
    except ApiException as exc:
        if exc.status in ok:
            return None
        metrics.API_ERRORS.labels(verb=verb, resource=resource).inc()
        raise


def _sanitize(obj: Any) -> dict[str, Any]:
    if isinstance(obj, dict):
        return obj
    result: dict[str, Any] = client().sanitize_for_serialization(obj)
    return result


# ------------------------------------------------------------------------------ typed objects

_CORE_KINDS = {
    "ConfigMap": ("configmaps", "config_map"),
    "ServiceAccount": ("serviceaccounts", "service_account"),
}
_RBAC_KINDS = {"Role": ("roles", "role"), "RoleBinding": ("rolebindings", "role_binding")}
_POLICY_KINDS = {"PodDisruptionBudget": ("poddisruptionbudgets", "pod_disruption_budget")}


def _api_for(kind: str) -> tuple[Any, str, str]:
    if kind in _CORE_KINDS:
        resource, suffix = _CORE_KINDS[kind]
        return core(), resource, suffix
    if kind in _POLICY_KINDS:
        resource, suffix = _POLICY_KINDS[kind]
        return policy(), resource, suffix
    resource, suffix = _RBAC_KINDS[kind]
    return rbac(), resource, suffix


def get(kind: str, namespace: str, name: str) -> dict[str, Any] | None:
    """A ConfigMap, ServiceAccount, Role or RoleBinding, or None."""
    if kind == "RayJob":
        return get_rayjob(namespace, name)
    api, resource, suffix = _api_for(kind)
    fn = getattr(api, f"read_namespaced_{suffix}")
    obj = call("get", resource, lambda: fn(name, namespace), ok=(404,))
    return None if obj is None else _sanitize(obj)


def create(body: dict[str, Any]) -> dict[str, Any] | None:
    """Create a child as our field manager; None when its name is taken (409)."""
    kind = body["kind"]
    namespace = body["metadata"]["namespace"]
    if kind == "RayJob":
        created = call(
            "create",
            RAYJOBS,
            lambda: custom().create_namespaced_custom_object(
                RAY_GROUP, RAY_VERSION, namespace, RAYJOBS, body, field_manager=FIELD_MANAGER
            ),
            ok=(409,),
        )
    else:
        api, resource, suffix = _api_for(kind)
        fn = getattr(api, f"create_namespaced_{suffix}")
        created = call(
            "create",
            resource,
            lambda: fn(namespace, body, field_manager=FIELD_MANAGER),
            ok=(409,),
        )
    return None if created is None else _sanitize(created)


def apply(body: dict[str, Any]) -> dict[str, Any]:
    """Server-side apply of a whole child as `raytrain-operator`, forcing conflicts.

    The body is the complete configuration we want: the API server sets every field in it,
    takes over fields another manager changed (force), and drops fields we applied before and
    no longer send. Callers apply only objects they own: apply would adopt anything.
    """
    kind = body["kind"]
    namespace = body["metadata"]["namespace"]
    name = body["metadata"]["name"]
    options: dict[str, Any] = {
        "field_manager": FIELD_MANAGER,
        "force": True,
        "_content_type": APPLY_PATCH,
    }
    if kind == "RayJob":
        result = call(
            "apply",
            RAYJOBS,
            lambda: custom().patch_namespaced_custom_object(
                RAY_GROUP, RAY_VERSION, namespace, RAYJOBS, name, body, **options
            ),
        )
    else:
        api, resource, suffix = _api_for(kind)
        fn = getattr(api, f"patch_namespaced_{suffix}")
        result = call("apply", resource, lambda: fn(name, namespace, body, **options))
    return _sanitize(result)


def delete(kind: str, namespace: str, name: str) -> None:
    if kind == "RayJob":
        delete_rayjob(namespace, name)
        return
    api, resource, suffix = _api_for(kind)
    fn = getattr(api, f"delete_namespaced_{suffix}")
    call("delete", resource, lambda: fn(name, namespace), ok=(404,))


# ------------------------------------------------------------------------------------ RayJobs


def get_rayjob(namespace: str, name: str) -> dict[str, Any] | None:
    obj = call(
        "get",
        RAYJOBS,
        lambda: custom().get_namespaced_custom_object(
            RAY_GROUP, RAY_VERSION, namespace, RAYJOBS, name
        ),
        ok=(404,),
    )
    return None if obj is None else _sanitize(obj)


def patch_rayjob(namespace: str, name: str, body: dict[str, Any]) -> None:
    call(
        "patch",
        RAYJOBS,
        lambda: custom().patch_namespaced_custom_object(
            RAY_GROUP, RAY_VERSION, namespace, RAYJOBS, name, body, field_manager=FIELD_MANAGER
        ),
        ok=(404,),
    )


def delete_rayjob(namespace: str, name: str) -> None:
    """Delete in the foreground: the RayJob stays (with a deletionTimestamp) until the garbage
    collector has removed its RayCluster, submitter Job and their pods (KubeRay makes them with
    blockOwnerDeletion), so "the RayJob is gone" means "its pods are gone"."""
    call(
        "delete",
        RAYJOBS,
        lambda: custom().delete_namespaced_custom_object(
            RAY_GROUP,
            RAY_VERSION,
            namespace,
            RAYJOBS,
            name,
            body={"propagationPolicy": "Foreground"},
        ),
        ok=(404,),
    )


def list_rayjobs(namespace: str, label_selector: str) -> list[dict[str, Any]]:
    result = call(
        "list",
        RAYJOBS,
        lambda: custom().list_namespaced_custom_object(
            RAY_GROUP, RAY_VERSION, namespace, RAYJOBS, label_selector=label_selector
        ),
    )
    return [dict(item) for item in (result or {}).get("items") or []]


def list_rayjob_names(namespace: str, label_selector: str) -> list[str]:
    return [str(item["metadata"]["name"]) for item in list_rayjobs(namespace, label_selector)]


# ------------------------------------------------------------------------------------ TrainJobs


def get_trainjob(namespace: str, name: str) -> dict[str, Any] | None:
    """The TrainJob as the API server has it now (not as a watch event delivered it)."""
    obj = call(
        "get",
        PLURAL,
        lambda: custom().get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name),
        ok=(404,),
    )
    return None if obj is None else _sanitize(obj)


def patch_trainjob(
    namespace: str, name: str, body: dict[str, Any], *, subresource: str | None = None
) -> bool:
    """Merge-patch a TrainJob (or its status); False when a precondition in the body (uid,
    resourceVersion) no longer holds (409) or the TrainJob is gone (404)."""
    api = custom()
    fn = (
        api.patch_namespaced_custom_object_status
        if subresource == "status"
        else api.patch_namespaced_custom_object
    )
    result = call(
        "patch",
        PLURAL,
        lambda: fn(
            GROUP,
            VERSION,
            namespace,
            PLURAL,
            name,
            body,
            field_manager=FIELD_MANAGER,
            _content_type="application/merge-patch+json",
        ),
        ok=(404, 409),
    )
    return result is not None


def remove_trainjob_finalizer(
    namespace: str, name: str, finalizers: list[str], finalizer: str
) -> bool:
    """Remove one finalizer from a TrainJob; False when the object changed or is gone.

    A JSON patch that first tests the entry: a merge patch would rewrite the whole list and
    could drop a finalizer another controller added meanwhile.
    """
    index = finalizers.index(finalizer)
    path = f"/metadata/finalizers/{index}"
    ops = [{"op": "test", "path": path, "value": finalizer}, {"op": "remove", "path": path}]
    result = call(
        "patch",
        PLURAL,
        lambda: custom().patch_namespaced_custom_object(
            GROUP,
            VERSION,
            namespace,
            PLURAL,
            name,
            ops,
            field_manager=FIELD_MANAGER,
            _content_type="application/json-patch+json",
        ),
        ok=(404, 409, 422),
    )
    return result is not None


# ------------------------------------------------------------------------------ preflight reads


def pvc_access_modes(namespace: str, name: str) -> list[str] | None:
    """Access modes a PersistentVolumeClaim asks for, or None when it does not exist."""
    pvc = call(
        "get",
        "persistentvolumeclaims",
        lambda: core().read_namespaced_persistent_volume_claim(name, namespace),
        ok=(404,),
    )
    if pvc is None:
        return None
    return list(pvc.spec.access_modes or [])


def secret_keys(namespace: str, name: str) -> set[str] | None:
    """Names of a Secret's keys (never its values), or None when it does not exist."""
    secret = call(
        "get",
        "secrets",
        lambda: core().read_namespaced_secret(name, namespace),
        ok=(404,),
    )
    if secret is None:
        return None
    return set((secret.data or {}).keys())


def list_pods(namespace: str, label_selector: str) -> list[dict[str, Any]] | None:
    """Pods matching a selector; None when the operator may not list pods (403)."""
    result = call(
        "list",
        "pods",
        lambda: core().list_namespaced_pod(namespace, label_selector=label_selector),
        ok=(403,),
    )
    if result is None:
        return None
    return [_sanitize(pod) for pod in result.items or []]


def api_message(exc: ApiException) -> str:
    """The API server's own message from an error response (its Status body), else the reason."""
    try:
        body = json.loads(exc.body or "{}")
    except (TypeError, ValueError):
        body = {}
    message = body.get("message") if isinstance(body, dict) else None
    return str(message or exc.reason or f"HTTP {exc.status}")


def service_account_exists(namespace: str, name: str) -> bool:
    account = call(
        "get",
        "serviceaccounts",
        lambda: core().read_namespaced_service_account(name, namespace),
        ok=(404,),
    )
    return account is not None
