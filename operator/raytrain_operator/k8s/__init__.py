"""Thin helpers over the Kubernetes API: create, server-side apply, get-or-none, delete-if-present.

Every write names our field manager (`raytrain-operator`), so an object's managedFields show
what the operator owns. All calls go through `call`, which counts failures by verb and resource
for the metrics; 404 on read/delete and 409 on create are answers, not errors. Secret values
are never logged: the only thing read from a Secret is the list of its keys. The paths of the
TrainJob's children come from the registry in builders/children.py.

The HTTP client itself (credentials, connections, `request`, `watch`, `call`) is in
k8s/client.py; its names are importable from here as before.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

from raytrain_contract.api.v1alpha1 import (
    CLUSTER_TEMPLATE_KIND,
    CLUSTER_TEMPLATE_PLURAL,
    GROUP,
    PLURAL,
    TEMPLATE_PLURAL,
    VERSION,
)
from raytrain_operator import metrics
from raytrain_operator.builders.children import BY_KIND
from raytrain_operator.builders.children import RAY_GROUP as RAY_GROUP
from raytrain_operator.builders.children import RAY_VERSION as RAY_VERSION
from raytrain_operator.builders.children import RAYJOBS as RAYJOBS
from raytrain_operator.k8s.client import APPLY_PATCH as APPLY_PATCH
from raytrain_operator.k8s.client import FIELD_MANAGER as FIELD_MANAGER
from raytrain_operator.k8s.client import JSON_PATCH as JSON_PATCH
from raytrain_operator.k8s.client import MERGE_PATCH as MERGE_PATCH
from raytrain_operator.k8s.client import SERVICE_ACCOUNT_DIR as SERVICE_ACCOUNT_DIR
from raytrain_operator.k8s.client import TIMEOUT_SECONDS as TIMEOUT_SECONDS
from raytrain_operator.k8s.client import TOKEN_REREAD_SECONDS as TOKEN_REREAD_SECONDS
from raytrain_operator.k8s.client import ApiException as ApiException
from raytrain_operator.k8s.client import ClientOptions as ClientOptions
from raytrain_operator.k8s.client import Endpoint as Endpoint
from raytrain_operator.k8s.client import WritesPaused as WritesPaused
from raytrain_operator.k8s.client import _path as _path
from raytrain_operator.k8s.client import call as call
from raytrain_operator.k8s.client import configure as configure
from raytrain_operator.k8s.client import endpoint as endpoint
from raytrain_operator.k8s.client import endpoint_from as endpoint_from
from raytrain_operator.k8s.client import in_cluster_info as in_cluster_info
from raytrain_operator.k8s.client import log as log
from raytrain_operator.k8s.client import request as request
from raytrain_operator.k8s.client import watch as watch

RAYCLUSTERS = "rayclusters"

# ------------------------------------------------------------------------------ typed objects


def _kind_path(kind: str, namespace: str, name: str = "") -> tuple[str, str]:
    """The plural and the path of a child kind of the registry (builders/children.py)."""
    child = BY_KIND[kind]
    return child.plural, _path(child.group, child.version, namespace, child.plural, name)


def get(kind: str, namespace: str, name: str) -> dict[str, Any] | None:
    """A child of a TrainJob (a kind of builders/children.py's registry), or None."""
    resource, path = _kind_path(kind, namespace, name)
    result: dict[str, Any] | None = call("get", resource, lambda: request("GET", path), ok=(404,))
    return result


def create(body: dict[str, Any]) -> dict[str, Any] | None:
    """Create a child as our field manager; None when its name is taken (409)."""
    resource, path = _kind_path(body["kind"], body["metadata"]["namespace"])
    query = {"fieldManager": FIELD_MANAGER}
    created: dict[str, Any] | None = call(
        "create", resource, lambda: request("POST", path, body, query=query), ok=(409,)
    )
    return created


def apply(body: dict[str, Any]) -> dict[str, Any]:
    """Server-side apply of a whole child as `raytrain-operator`, forcing conflicts.

    The body is the complete configuration we want: the API server sets every field in it,
    takes over fields another manager changed (force), and drops fields we applied before and
    no longer send. Callers apply only objects they own: apply would adopt anything.
    """
    meta = body["metadata"]
    resource, path = _kind_path(body["kind"], meta["namespace"], meta["name"])
    query = {"fieldManager": FIELD_MANAGER, "force": "true"}
    result: dict[str, Any] | None = call(
        "apply",
        resource,
        lambda: request("PATCH", path, body, query=query, content_type=APPLY_PATCH),
    )
    return result or {}


def delete(kind: str, namespace: str, name: str, uid: str | None = None) -> None:
    """Delete a child if present; in the foreground when its kind says so (the RayJob). With
    `uid`, only the object of that uid (a precondition): one that was deleted and created again
    by someone else since it was read is left alone (409 Conflict, taken as done)."""
    resource, path = _kind_path(kind, namespace, name)
    body: dict[str, Any] | None = None
    if BY_KIND[kind].foreground or uid is not None:
        body = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if BY_KIND[kind].foreground:
            body["propagationPolicy"] = "Foreground"
        if uid is not None:
            body["preconditions"] = {"uid": uid}
    call("delete", resource, lambda: request("DELETE", path, body), ok=(404, 409))


def list_names(kind: str, namespace: str, label_selector: str) -> list[str]:
    """Names of the children of a kind that match a label selector."""
    resource, path = _kind_path(kind, namespace)
    query = {"labelSelector": label_selector}
    result = call("list", resource, lambda: request("GET", path, query=query))
    return [str(item["metadata"]["name"]) for item in (result or {}).get("items") or []]


# ------------------------------------------------------------------------------------ RayJobs


def get_rayjob(namespace: str, name: str) -> dict[str, Any] | None:
    return get("RayJob", namespace, name)


def patch_rayjob(namespace: str, name: str, body: dict[str, Any]) -> None:
    path = _path(RAY_GROUP, RAY_VERSION, namespace, RAYJOBS, name)
    query = {"fieldManager": FIELD_MANAGER}
    call(
        "patch",
        RAYJOBS,
        lambda: request("PATCH", path, body, query=query, content_type=MERGE_PATCH),
        ok=(404,),
    )


def delete_rayjob(namespace: str, name: str) -> None:
    """Delete in the foreground: the RayJob stays (with a deletionTimestamp) until the garbage
    collector has removed its RayCluster, submitter Job and their pods (KubeRay makes them with
    blockOwnerDeletion), so "the RayJob is gone" means "its pods are gone"."""
    delete("RayJob", namespace, name)


def list_rayjobs(namespace: str, label_selector: str) -> list[dict[str, Any]]:
    path = _path(RAY_GROUP, RAY_VERSION, namespace, RAYJOBS)
    query = {"labelSelector": label_selector}
    result = call("list", RAYJOBS, lambda: request("GET", path, query=query))
    return [dict(item) for item in (result or {}).get("items") or []]


#: What a list asks for to get each object's metadata only (PartialObjectMetadataList): its
#: name, labels, annotations, resourceVersion, managedFields; no spec, no status.
METADATA_ONLY = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"


def iter_all(
    group: str,
    version: str,
    plural: str,
    namespace: str | None,
    label_selector: str = "",
    *,
    metadata_only: bool = False,
    page_size: int = 500,
) -> Iterator[dict[str, Any]]:
    """Every object of a kind in a namespace (None: in every namespace), `page_size` per
    request; one page in memory at a time (the resync goes through every TrainJob).
    `metadata_only`: each object's metadata alone (a RayJob's is half its size, a TrainJob's
    two thirds)."""
    base = f"/api/{version}" if not group else f"/apis/{group}/{version}"
    path = f"{base}/{plural}" if namespace is None else _path(group, version, namespace, plural)
    accept = METADATA_ONLY if metadata_only else "application/json"
    token: str | None = None
    while True:
        query: dict[str, Any] = {"labelSelector": label_selector or None, "limit": page_size}
        query["continue"] = token
        get_page = functools.partial(request, "GET", path, query=query, accept=accept)
        page = call("list", plural, get_page) or {}
        for item in page.get("items") or []:
            yield dict(item)
        token = (page.get("metadata") or {}).get("continue")
        if not token:
            return


def list_all(
    group: str, version: str, plural: str, namespace: str | None, label_selector: str = ""
) -> list[dict[str, Any]]:
    """Every object of a kind in a namespace (None: in every namespace), as one list."""
    return list(iter_all(group, version, plural, namespace, label_selector))


def list_rayjob_names(namespace: str, label_selector: str) -> list[str]:
    return [str(item["metadata"]["name"]) for item in list_rayjobs(namespace, label_selector)]


# ------------------------------------------------------------------------------------ TrainJobs


def get_trainjob(namespace: str, name: str) -> dict[str, Any] | None:
    """The TrainJob as the API server has it now (not as a watch event delivered it)."""
    path = _path(GROUP, VERSION, namespace, PLURAL, name)
    result: dict[str, Any] | None = call("get", PLURAL, lambda: request("GET", path), ok=(404,))
    return result


def get_template(kind: str, namespace: str, name: str) -> dict[str, Any] | None:
    """A ClusterTrainJobTemplate, or a TrainJobTemplate of ``namespace``; None when there is
    none of that name (403 raises: the caller says what the operator may not read)."""
    if kind == CLUSTER_TEMPLATE_KIND:
        plural = CLUSTER_TEMPLATE_PLURAL
        path = f"/apis/{GROUP}/{VERSION}/{plural}/{quote(name)}"
    else:
        plural = TEMPLATE_PLURAL
        path = _path(GROUP, VERSION, namespace, plural, name)
    result: dict[str, Any] | None = call("get", plural, lambda: request("GET", path), ok=(404,))
    return result


def patch_trainjob(
    namespace: str, name: str, body: dict[str, Any], *, subresource: str | None = None
) -> dict[str, Any] | None:
    """Merge-patch a TrainJob (or its status): the TrainJob as the API server has it then;
    None when a precondition in the body (uid, resourceVersion) no longer holds (409) or the
    TrainJob is gone (404)."""
    path = _path(GROUP, VERSION, namespace, PLURAL, name)
    if subresource == "status":
        path += "/status"
    query = {"fieldManager": FIELD_MANAGER}
    result = call(
        "patch",
        PLURAL,
        lambda: request("PATCH", path, body, query=query, content_type=MERGE_PATCH),
        ok=(404, 409),
    )
    return dict(result) if result is not None else None


def remove_trainjob_finalizer(
    namespace: str, name: str, finalizers: list[str], finalizer: str
) -> bool:
    """Remove one finalizer from a TrainJob; False when the object changed or is gone.

    A JSON patch that first tests the entry: a merge patch would rewrite the whole list and
    could drop a finalizer another controller added meanwhile.
    """
    index = finalizers.index(finalizer)
    entry = f"/metadata/finalizers/{index}"
    ops = [{"op": "test", "path": entry, "value": finalizer}, {"op": "remove", "path": entry}]
    path = _path(GROUP, VERSION, namespace, PLURAL, name)
    query = {"fieldManager": FIELD_MANAGER}
    result = call(
        "patch",
        PLURAL,
        lambda: request("PATCH", path, ops, query=query, content_type=JSON_PATCH),
        ok=(404, 409, 422),
    )
    return result is not None


# ---------------------------------------------------------------------------------- Events


def post_event(
    involved: dict[str, Any], type_: str, reason: str, message: str, component: str, instance: str
) -> None:
    """A core/v1 Event on `involved` (an object reference), shaped as kopf posts its own: the
    same `reportingComponent`, name prefix and timestamps. A refused Event is logged, not
    raised: Events are auxiliary."""
    from datetime import datetime, timezone

    now = datetime.now(timezone.utc).isoformat()
    namespace = involved.get("namespace") or "default"
    if len(message) > 1024:
        message = message[:510] + " ... " + message[-509:]
    body = {
        "metadata": {"namespace": namespace, "generateName": "kopf-event-"},
        "action": "Action?",
        "type": type_,
        "reason": reason,
        "message": message,
        "reportingComponent": component,
        "reportingInstance": instance,
        "source": {"component": component},
        "involvedObject": involved,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "eventTime": now,
    }
    path = _path("", "v1", namespace, "events")
    try:
        call("create", "events", lambda: request("POST", path, body))
    except ApiException as exc:
        log.warning(f"Posting an Event failed ({exc}): {type_} {reason}: {message}")


# ------------------------------------------------------------------------------ preflight reads


def pvc_access_modes(namespace: str, name: str) -> list[str] | None:
    """Access modes a PersistentVolumeClaim asks for, or None when it does not exist."""
    path = _path("", "v1", namespace, "persistentvolumeclaims", name)
    pvc = call("get", "persistentvolumeclaims", lambda: request("GET", path), ok=(404,))
    if pvc is None:
        return None
    return [str(m) for m in (pvc.get("spec") or {}).get("accessModes") or []]


#: What `secret_keys` answers when the operator may not read the Secret (403): its account has
#: no `get secrets` there (chart value rbac.readSecrets, off by default).
UNREADABLE: frozenset[str] = frozenset({"\0unreadable"})


def secret_keys(namespace: str, name: str) -> frozenset[str] | None:
    """Names of a Secret's keys (never its values), None when it does not exist, or UNREADABLE
    when the operator may not read it. The values are dropped as soon as the answer is decoded;
    nothing logs the answer."""
    path = _path("", "v1", namespace, "secrets", name)
    try:
        secret = request("GET", path)
    except ApiException as exc:
        if exc.status == 404:
            return None
        if exc.status == 403:
            return UNREADABLE
        metrics.API_ERRORS.labels(verb="get", resource="secrets").inc()
        raise
    return frozenset(str(key) for key in (secret.get("data") or {}))


#: DRA objects a pod's resourceClaims entry names: its field -> (kind, plural of resource.k8s.io/v1)
DRA_REFERENCES = {
    "resourceClaimTemplateName": ("ResourceClaimTemplate", "resourceclaimtemplates"),
    "resourceClaimName": ("ResourceClaim", "resourceclaims"),
}


def dra_object_exists(namespace: str, plural: str, name: str) -> bool | None:
    """Whether a ResourceClaim or ResourceClaimTemplate exists; None when the operator may not
    read it (403: an install without the rule), so that the check is skipped, not failed."""
    path = _path("resource.k8s.io", "v1", namespace, plural, name)
    try:
        request("GET", path)
    except ApiException as exc:
        if exc.status == 404:
            return False
        if exc.status == 403:
            return None
        metrics.API_ERRORS.labels(verb="get", resource=plural).inc()
        raise
    return True


def namespace_labels(name: str) -> dict[str, str] | None:
    """A namespace's labels; None when it does not exist or the operator may not read it."""
    answer = call("get", "namespaces", lambda: request("GET", f"/api/v1/namespaces/{quote(name)}"),
                  ok=(403, 404))  # fmt: skip
    if answer is None:
        return None
    return {str(k): str(v) for k, v in ((answer.get("metadata") or {}).get("labels") or {}).items()}


def trainjob_names(namespace: str) -> list[str]:
    """The names of the TrainJobs of a namespace (their metadata only)."""
    listing = iter_all(GROUP, VERSION, PLURAL, namespace, metadata_only=True)
    return [str((obj.get("metadata") or {}).get("name")) for obj in listing]


def list_pods(namespace: str, label_selector: str) -> list[dict[str, Any]] | None:
    """Pods matching a selector; None when the operator may not list pods (403)."""
    path = _path("", "v1", namespace, "pods")
    query = {"labelSelector": label_selector}
    result = call("list", "pods", lambda: request("GET", path, query=query), ok=(403,))
    if result is None:
        return None
    return [dict(pod) for pod in result.get("items") or []]


def api_message(exc: ApiException) -> str:
    """The API server's own message from an error response (its Status body), else the reason."""
    try:
        body = json.loads(exc.body or "{}")
    except (TypeError, ValueError):
        body = {}
    message = body.get("message") if isinstance(body, dict) else None
    return str(message or exc.reason or f"HTTP {exc.status}")


def service_account_exists(namespace: str, name: str) -> bool:
    return get("ServiceAccount", namespace, name) is not None
