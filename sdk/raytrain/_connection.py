"""Reaching the cluster: a kubeconfig (file, context, its namespace) or the pod's own account.

Each TrainJobClient gets its own ApiClient, so two clients with different contexts in one
process do not share (or overwrite) the kubernetes package's global configuration.
"""

from __future__ import annotations

import json
import os
import pathlib
from dataclasses import dataclass
from typing import Any

import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from raytrain.errors import ConfigError

SERVICE_ACCOUNT_NAMESPACE = pathlib.Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
DEFAULT_KUBECONFIG = "~/.kube/config"


@dataclass(frozen=True)
class Connection:
    api_client: Any
    """kubernetes.client.ApiClient"""
    namespace: str
    """The namespace used when a call names none: the context's, the pod's, or `default`."""
    context: str | None
    """The kubeconfig context, or None in a pod."""
    kubeconfig: str | None
    """The kubeconfig path(s) used, or None in a pod."""

    @property
    def where(self) -> str:
        """`context kind-dev (https://127.0.0.1:6443)`: for messages about the cluster."""
        host = self.api_client.configuration.host
        return f"context {self.context} ({host})" if self.context else f"in-cluster ({host})"


def _kubeconfig_paths(kubeconfig: str | None) -> tuple[str, list[pathlib.Path]]:
    value = kubeconfig or os.environ.get("KUBECONFIG") or DEFAULT_KUBECONFIG
    paths = [pathlib.Path(p).expanduser() for p in value.split(os.pathsep) if p]
    return value, paths


def connect(kubeconfig: str | None = None, context: str | None = None) -> Connection:
    """Load a kubeconfig, or the in-cluster account when there is none and none was asked for."""
    value, paths = _kubeconfig_paths(kubeconfig)
    existing = [p for p in paths if p.is_file()]
    if not existing:
        if kubeconfig or context:
            raise ConfigError(
                f"kubeconfig {value} does not exist: pass an existing file "
                f"(kubeconfig=... / --kubeconfig) or set KUBECONFIG"
            )
        if os.environ.get("KUBERNETES_SERVICE_HOST"):
            return _in_cluster()
        raise ConfigError(
            f"no Kubernetes configuration: no kubeconfig at {value} and not running in a pod; "
            f"set KUBECONFIG or pass kubeconfig=... (--kubeconfig), or train without a cluster "
            f"with `raytrain run FILE --local`"
        )
    config_file = os.pathsep.join(str(p) for p in existing)
    contexts, current = _contexts(existing)
    names = [c.get("name") for c in contexts]
    active = next((c for c in contexts if current and c.get("name") == current), None)
    if context is not None:
        chosen = next((c for c in contexts if c.get("name") == context), None)
        if chosen is None:
            raise ConfigError(
                f"context {context!r} is not in kubeconfig {config_file}; its contexts are "
                f"{', '.join(map(str, names)) or 'none'} (`kubectl config get-contexts` lists them)"
            )
    else:
        chosen = active
        if not chosen:
            raise ConfigError(
                f"kubeconfig {config_file} has no current context: pass context=... "
                f"(--context) with one of {', '.join(map(str, names)) or 'none'}"
            )
    # The namespace comes from the context in use, not from the file's current context.
    namespace = (chosen.get("context") or {}).get("namespace") or "default"
    try:
        api_client = config.new_client_from_config(
            config_file=config_file, context=chosen.get("name")
        )
    except ConfigException as exc:
        raise ConfigError(
            f"context {chosen.get('name')!r} of kubeconfig {config_file} is not usable: {exc}"
        ) from exc
    return Connection(api_client, namespace, str(chosen.get("name")), config_file)


def _contexts(paths: list[pathlib.Path]) -> tuple[list[dict[str, Any]], str | None]:
    """Every context of the files and the current one, merged as kubectl does: the first
    file that names a context or sets current-context wins."""
    contexts: dict[str, dict[str, Any]] = {}
    current: str | None = None
    for path in paths:
        try:
            doc = yaml.safe_load(path.read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise ConfigError(f"kubeconfig {path} is not readable YAML: {exc}") from exc
        if not isinstance(doc, dict):
            raise ConfigError(f"kubeconfig {path} is not a kubeconfig (a mapping at the top)")
        for ctx in doc.get("contexts") or []:
            if isinstance(ctx, dict) and ctx.get("name"):
                contexts.setdefault(str(ctx["name"]), ctx)
        current = current or doc.get("current-context") or None
    return list(contexts.values()), current


def _in_cluster() -> Connection:
    configuration = client.Configuration()
    try:
        config.load_incluster_config(client_configuration=configuration)
    except ConfigException as exc:
        raise ConfigError(
            f"running in a pod, but its service account token is not usable: {exc}; "
            f"mount the token (automountServiceAccountToken) or pass a kubeconfig"
        ) from exc
    try:
        namespace = SERVICE_ACCOUNT_NAMESPACE.read_text().strip() or "default"
    except OSError:
        namespace = "default"
    return Connection(client.ApiClient(configuration), namespace, None, None)


def api_message(exc: ApiException) -> str:
    """The API server's own message (it names the field and the rule), else the HTTP reason."""
    try:
        body = json.loads(exc.body)
        return str(body.get("message") or exc.reason)
    except (TypeError, ValueError, AttributeError):
        return str(exc.reason)


def not_found_details(exc: ApiException) -> dict[str, Any]:
    """The `details` of a 404 Status: `{"name": ..., "kind": ...}` for a missing object."""
    try:
        body = json.loads(exc.body)
    except (TypeError, ValueError):
        return {}
    details = body.get("details") if isinstance(body, dict) else None
    return dict(details) if isinstance(details, dict) else {}
