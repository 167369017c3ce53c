"""Thin helpers over the Kubernetes API: create, server-side apply, get-or-none, delete-if-present.

Every write names our field manager (`raytrain-operator`), so an object's managedFields show
what the operator owns. All calls go through `call`, which counts failures by verb and resource
for the metrics; 404 on read/delete and 409 on create are answers, not errors. Secret values
are never logged: the only thing read from a Secret is the list of its keys.

The requests go over the standard library's HTTP client, one kept-alive connection per thread,
with the credentials kopf uses (the pod's service account, else the kubeconfig's current
context). The operator process never imports the `kubernetes` package: its ~800 generated
model classes would cost more memory than everything else the operator holds (see
benchmarks/RESULTS.md, "Operator at scale"). At DEBUG each request is logged by method, path and
status; no body is ever logged.
"""

from __future__ import annotations

import base64
import functools
import http.client
import json
import logging
import os
import ssl
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import quote, urlencode, urlsplit

import kopf

from raytrain_contract.api.v1alpha1 import (
    CLUSTER_TEMPLATE_KIND,
    CLUSTER_TEMPLATE_PLURAL,
    GROUP,
    PLURAL,
    TEMPLATE_PLURAL,
    VERSION,
)
from raytrain_operator import metrics

T = TypeVar("T")
log = logging.getLogger("raytrain_operator.k8s")
RAY_GROUP, RAY_VERSION, RAYJOBS = "ray.io", "v1", "rayjobs"
RAYCLUSTERS = "rayclusters"
#: Our name in every object's managedFields: server-side apply tracks what we own under it.
FIELD_MANAGER = "raytrain-operator"
APPLY_PATCH = "application/apply-patch+yaml"
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
TIMEOUT_SECONDS = 30.0
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
#: How long a token read from the service account's file is used before it is read again:
#: the kubelet rotates projected tokens in that file.
TOKEN_REREAD_SECONDS = 60.0


class ApiException(Exception):
    """An error status from the API server: `status` (HTTP code), `reason`, `body` (its Status
    object as text; never a Secret's content, which no error carries)."""

    def __init__(self, status: int, reason: str = "", body: str = "") -> None:
        super().__init__(f"({status}) {reason}")
        self.status, self.reason, self.body = status, reason, body


@dataclass
class Endpoint:
    """Where the API server is and how to authenticate to it."""

    server: str
    context: ssl.SSLContext | None = None
    token: str | None = None
    token_file: str | None = None
    basic: str | None = None
    _read_at: float = field(default=0.0, repr=False)

    def authorization(self) -> str | None:
        if self.token_file is not None and time.monotonic() - self._read_at > TOKEN_REREAD_SECONDS:
            with open(self.token_file, encoding="utf-8") as f:
                self.token = f.read().strip()
            self._read_at = time.monotonic()
        if self.token:
            return f"Bearer {self.token}"
        return self.basic


def _data_file(data: str | bytes, suffix: str) -> str:
    """A base64 value of a kubeconfig (`*-data`) as a private temporary file (ssl loads files)."""
    raw = base64.b64decode(data)
    fd, path = tempfile.mkstemp(prefix="raytrain-", suffix=suffix)
    with os.fdopen(fd, "wb") as f:
        f.write(raw)
    return path


def endpoint_from(info: Any, token_file: str | None = None) -> Endpoint:
    """An Endpoint from a kopf ConnectionInfo (kopf.login_with_kubeconfig and friends)."""
    context: ssl.SSLContext | None = None
    if urlsplit(info.server).scheme == "https":
        context = ssl.create_default_context()
        if info.insecure:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        elif info.ca_data:
            context.load_verify_locations(cadata=base64.b64decode(info.ca_data).decode())
        elif info.ca_path:
            context.load_verify_locations(cafile=os.fsdecode(info.ca_path))
        cert = info.certificate_path or (
            _data_file(info.certificate_data, ".crt") if info.certificate_data else None
        )
        key = info.private_key_path or (
            _data_file(info.private_key_data, ".key") if info.private_key_data else None
        )
        if cert:
            context.load_cert_chain(os.fsdecode(cert), os.fsdecode(key) if key else None)
    basic = None
    if info.username and info.password:
        pair = f"{info.username}:{info.password}".encode()
        basic = "Basic " + base64.b64encode(pair).decode()
    return Endpoint(
        server=info.server.rstrip("/"),
        context=context,
        token=info.token,
        token_file=token_file,
        basic=basic,
    )


def in_cluster_info() -> kopf.ConnectionInfo | None:
    """The pod's service account, with the API server's address from the environment the kubelet
    sets (as the client libraries do; the DNS name kopf's own helper uses needs cluster DNS)."""
    host, port = (
        os.environ.get("KUBERNETES_SERVICE_HOST"),
        os.environ.get("KUBERNETES_SERVICE_PORT"),
    )
    token_path = os.path.join(SERVICE_ACCOUNT_DIR, "token")
    if not host or not port or not os.path.exists(token_path):
        return None
    if ":" in host:  # an IPv6 address
        host = f"[{host}]"
    with open(token_path, encoding="utf-8") as f:
        token = f.read().strip()
    ns_path = os.path.join(SERVICE_ACCOUNT_DIR, "namespace")
    namespace = None
    if os.path.exists(ns_path):
        with open(ns_path, encoding="utf-8") as f:
            namespace = f.read().strip() or None
    ca_path = os.path.join(SERVICE_ACCOUNT_DIR, "ca.crt")
    return kopf.ConnectionInfo(
        server=f"https://{host}:{port}",
        ca_path=ca_path if os.path.exists(ca_path) else None,
        token=token,
        default_namespace=namespace,
    )


@functools.lru_cache(maxsize=1)
def endpoint() -> Endpoint:
    """The in-cluster service account, else the kubeconfig ($KUBECONFIG or ~/.kube/config)."""
    info = in_cluster_info()
    if info is not None:
        return endpoint_from(info, token_file=os.path.join(SERVICE_ACCOUNT_DIR, "token"))
    info = kopf.login_with_kubeconfig(settings=kopf.OperatorSettings())
    if info is None:
        raise RuntimeError(
            "no Kubernetes credentials: not in a pod with a service account, and neither "
            "$KUBECONFIG nor ~/.kube/config names a kubeconfig"
        )
    return endpoint_from(info)


_local = threading.local()


class WritesPaused(Exception):
    """A write refused in this process: another instance holds the peering, or the operator is
    stopping (see `configure`)."""


@dataclass
class ClientOptions:
    """Process-wide settings of this client, set once at start-up by the engine."""

    #: Names this process in the API server's audit log (the engine adds its peering identity).
    user_agent: str = "raytrain-operator"
    #: Asked before every request that is not a read; False refuses it (WritesPaused).
    may_write: Callable[[], bool] | None = None


_options = ClientOptions()


def configure(
    user_agent: str | None = None, may_write: Callable[[], bool] | None = None
) -> ClientOptions:
    """Set the user agent and the write gate of this process's requests; the previous options."""
    global _options
    before = _options
    _options = ClientOptions(user_agent or before.user_agent, may_write)
    return before


def _connection(ep: Endpoint) -> http.client.HTTPConnection:
    conn: http.client.HTTPConnection | None = getattr(_local, "conn", None)
    if conn is not None and getattr(_local, "server", None) == ep.server:
        return conn
    url = urlsplit(ep.server)
    if url.scheme == "https":
        conn = http.client.HTTPSConnection(
            url.hostname or "", url.port or 443, timeout=TIMEOUT_SECONDS, context=ep.context
        )
    else:
        conn = http.client.HTTPConnection(
            url.hostname or "", url.port or 80, timeout=TIMEOUT_SECONDS
        )
    _local.conn, _local.server = conn, ep.server
    return conn


def request(
    method: str,
    path: str,
    body: Any = None,
    *,
    query: dict[str, Any] | None = None,
    content_type: str = "application/json",
) -> Any:
    """One API request; the decoded JSON answer, or ApiException for an error status."""
    options = _options
    if method != "GET" and options.may_write is not None and not options.may_write():
        raise WritesPaused(f"{method} {path}: this instance does not write now")
    ep = endpoint()
    params = {k: v for k, v in (query or {}).items() if v is not None}
    target = path + (f"?{urlencode(params)}" if params else "")
    headers = {"Accept": "application/json", "User-Agent": options.user_agent}
    auth = ep.authorization()
    if auth:
        headers["Authorization"] = auth
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = content_type
    for retry in (False, True):
        conn = _connection(ep)
        try:
            conn.request(method, target, body=data, headers=headers)
            response = conn.getresponse()
            raw = response.read()
            break
        except (http.client.HTTPException, ConnectionError, OSError):
            # A kept-alive connection the server closed: one new connection, then give up.
            conn.close()
            _local.conn = None
            if retry:
                raise
    # The method, the path and the status only: never a body (a Secret's values are in one).
    log.debug("%s %s -> %d", method, target, response.status)
    if response.status >= 400:
        raise ApiException(response.status, response.reason, raw.decode(errors="replace"))
    return json.loads(raw) if raw else {}


def watch(path: str, query: dict[str, Any], timeout: float) -> Any:
    """A watch request (`?watch=1`): yields each event (`type`, `object`) as it arrives, until
    the server ends the stream (`timeoutSeconds` in `query`) or `timeout` seconds of silence.
    Its own connection: a watch holds it for as long as it runs."""
    ep = endpoint()
    url = urlsplit(ep.server)
    conn: http.client.HTTPConnection
    if url.scheme == "https":
        conn = http.client.HTTPSConnection(
            url.hostname or "", url.port or 443, timeout=timeout, context=ep.context
        )
    else:
        conn = http.client.HTTPConnection(url.hostname or "", url.port or 80, timeout=timeout)
    headers = {"Accept": "application/json", "User-Agent": _options.user_agent}
    auth = ep.authorization()
    if auth:
        headers["Authorization"] = auth
    params = {**{k: v for k, v in query.items() if v is not None}, "watch": "1"}
    try:
        conn.request("GET", f"{path}?{urlencode(params)}", headers=headers)
        response = conn.getresponse()
        if response.status >= 400:
            raise ApiException(response.status, response.reason, response.read().decode())
        while True:
            line = response.readline()
            if not line:
                return
            if line.strip():
                yield json.loads(line)
    finally:
        conn.close()


def call(verb: str, resource: str, fn: Callable[[], T], *, ok: tuple[int, ...] = ()) -> T | None:
    """Run one API call; None for an expected status in `ok` (404, 409), else raise."""
    try:
        return fn()
    except ApiException as exc:
        if exc.status in ok:
            return None
        metrics.API_ERRORS.labels(verb=verb, resource=resource).inc()
        raise


def _path(group: str, version: str, namespace: str, plural: str, name: str = "") -> str:
    base = f"/api/{version}" if not group else f"/apis/{group}/{version}"
    out = f"{base}/namespaces/{quote(namespace)}/{plural}"
    return f"{out}/{quote(name)}" if name else out


# ------------------------------------------------------------------------------ typed objects

#: kind -> (API group, version, plural)
_KINDS = {
    "ConfigMap": ("", "v1", "configmaps"),
    "ServiceAccount": ("", "v1", "serviceaccounts"),
    "Role": ("rbac.authorization.k8s.io", "v1", "roles"),
    "RoleBinding": ("rbac.authorization.k8s.io", "v1", "rolebindings"),
    "PodDisruptionBudget": ("policy", "v1", "poddisruptionbudgets"),
    "NetworkPolicy": ("networking.k8s.io", "v1", "networkpolicies"),
    "RayJob": (RAY_GROUP, RAY_VERSION, RAYJOBS),
}


def _kind_path(kind: str, namespace: str, name: str = "") -> tuple[str, str]:
    group, version, plural = _KINDS[kind]
    return plural, _path(group, version, namespace, plural, name)


def get(kind: str, namespace: str, name: str) -> dict[str, Any] | None:
    """A child of a TrainJob (a kind of `_KINDS`), or None."""
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


def delete(kind: str, namespace: str, name: str) -> None:
    if kind == "RayJob":
        delete_rayjob(namespace, name)
        return
    resource, path = _kind_path(kind, namespace, name)
    call("delete", resource, lambda: request("DELETE", path), ok=(404,))


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
    path = _path(RAY_GROUP, RAY_VERSION, namespace, RAYJOBS, name)
    body = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Foreground"}
    call("delete", RAYJOBS, lambda: request("DELETE", path, body), ok=(404,))


def list_rayjobs(namespace: str, label_selector: str) -> list[dict[str, Any]]:
    path = _path(RAY_GROUP, RAY_VERSION, namespace, RAYJOBS)
    query = {"labelSelector": label_selector}
    result = call("list", RAYJOBS, lambda: request("GET", path, query=query))
    return [dict(item) for item in (result or {}).get("items") or []]


def list_all(
    group: str, version: str, plural: str, namespace: str | None, label_selector: str = ""
) -> list[dict[str, Any]]:
    """Every object of a kind in a namespace (None: in every namespace), 500 per request."""
    base = f"/api/{version}" if not group else f"/apis/{group}/{version}"
    path = f"{base}/{plural}" if namespace is None else _path(group, version, namespace, plural)
    items: list[dict[str, Any]] = []
    token: str | None = None
    while True:
        query: dict[str, Any] = {"labelSelector": label_selector or None, "limit": 500}
        query["continue"] = token
        page = call("list", plural, functools.partial(request, "GET", path, query=query)) or {}
        items.extend(dict(item) for item in page.get("items") or [])
        token = (page.get("metadata") or {}).get("continue")
        if not token:
            return items


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
) -> bool:
    """Merge-patch a TrainJob (or its status); False when a precondition in the body (uid,
    resourceVersion) no longer holds (409) or the TrainJob is gone (404)."""
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
    return result is not None


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


def secret_keys(namespace: str, name: str) -> set[str] | None:
    """Names of a Secret's keys (never its values), or None when it does not exist. The values
    are dropped as soon as the answer is decoded; nothing logs the answer."""
    path = _path("", "v1", namespace, "secrets", name)
    secret = call("get", "secrets", lambda: request("GET", path), ok=(404,))
    if secret is None:
        return None
    return {str(key) for key in (secret.get("data") or {})}


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
