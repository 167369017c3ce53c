"""The HTTP client of raytrain_operator.k8s: credentials, connections, requests and watches.

The requests go over the standard library's HTTP client, one kept-alive connection per thread,
with the credentials kopf uses (the pod's service account, else the kubeconfig's current
context). The operator process never imports the `kubernetes` package: its ~800 generated
model classes would cost more memory than everything else the operator holds (see
benchmarks/RESULTS.md, "Operator at scale"). At DEBUG each request is logged by method, path and
status; no body is ever logged. All calls go through `call`, which counts failures by verb and
resource for the metrics.
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

from raytrain_operator import metrics

T = TypeVar("T")
log = logging.getLogger("raytrain_operator.k8s")
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
    accept: str = "application/json",
) -> Any:
    """One API request; the decoded JSON answer, or ApiException for an error status."""
    options = _options
    if method != "GET" and options.may_write is not None and not options.may_write():
        raise WritesPaused(f"{method} {path}: this instance does not write now")
    ep = endpoint()
    params = {k: v for k, v in (query or {}).items() if v is not None}
    target = path + (f"?{urlencode(params)}" if params else "")
    headers = {"Accept": accept, "User-Agent": options.user_agent}
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
