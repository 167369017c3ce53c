"""What a pod's CreateContainerConfigError says: a Secret or ConfigMap its environment or
volumes name that is missing, or that lacks the key named (`config_problem`), and the messages
for the job's own credentials Secret that preflight shares (`credentials_not_found`,
`credentials_incomplete`).

The operator reads no Secret unless its account may (chart value rbac.readSecrets, off by
default), so for it the kubelet is the one that finds a credentials Secret missing: it leaves
the container waiting with its own words (pkg/kubelet/kubelet_pods.go), retries, and starts it
once the Secret is right. Nothing is deleted meanwhile.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from raytrain_operator.status.triage.pods import _name, _statuses

#: The kubelet's waiting reason when a container's environment or volumes cannot be made.
CONFIG_ERROR = "CreateContainerConfigError"
#: The kubelet's words: the secret or configmap manager's NotFound, and a key missing.
_NOT_FOUND = re.compile(r'\b(secret|configmap)s? "([^"]+)" not found', re.IGNORECASE)
_NO_KEY = re.compile(r"couldn't find key (\S+) in (Secret|ConfigMap) ([^/\s]+)/(\S+)")
#: Reasons that mean the job's pods cannot start until the user fixes a reference.
REASONS = ("CredentialsNotFound", "CredentialsIncomplete", "ConfigNotFound")


class CredentialsRef(Protocol):
    """spec.storage.s3.credentialsSecret, as the model gives it."""

    @property
    def name(self) -> str: ...
    @property
    def access_key_id_key(self) -> str: ...
    @property
    def secret_access_key_key(self) -> str: ...
    @property
    def session_token_key(self) -> str | None: ...


def credentials_not_found(ref: CredentialsRef, namespace: str) -> str:
    return (
        f"spec.storage.s3.credentialsSecret.name: Secret {ref.name!r} does not exist in "
        f"namespace {namespace!r}; create it with the keys {ref.access_key_id_key} and "
        f"{ref.secret_access_key_key}"
    )


def credentials_incomplete(ref: CredentialsRef, field: str, key: str) -> str:
    return (
        f"spec.storage.s3.credentialsSecret.{field}: Secret {ref.name!r} has no key {key!r}; "
        f"add the key to the Secret or set credentialsSecret.{field} to the key that holds it"
    )


def credential_keys(ref: CredentialsRef) -> list[tuple[str, str]]:
    """(field, key) of every key the pods read from the credentials Secret."""
    wanted = [
        ("accessKeyIdKey", ref.access_key_id_key),
        ("secretAccessKeyKey", ref.secret_access_key_key),
    ]
    if ref.session_token_key:
        wanted.append(("sessionTokenKey", ref.session_token_key))
    return wanted


def _waiting(pods: Sequence[Mapping[str, Any]]) -> tuple[str, str, str] | None:
    """(pod, container, the kubelet's message) of the first container waiting so."""
    for pod in pods:
        for cs in _statuses(pod):
            waiting = (cs.get("state") or {}).get("waiting") or {}
            if waiting.get("reason") == CONFIG_ERROR:
                return _name(pod), str(cs.get("name") or "?"), str(waiting.get("message") or "")
    return None


def config_problem(
    pods: Sequence[Mapping[str, Any]], namespace: str, credentials: CredentialsRef | None
) -> tuple[str, str] | None:
    """(reason, message) for a pod whose container cannot start for a missing Secret,
    ConfigMap or key, else None. The job's credentials Secret is named by its field, as
    preflight would; any other reference with the kubelet's words."""
    found = _waiting(pods)
    if found is None:
        return None
    pod, container, words = found
    where = f" (container {container} of pod {pod} waits: {CONFIG_ERROR}: {words})"
    missing, no_key = _NOT_FOUND.search(words), _NO_KEY.search(words)
    if credentials is not None:
        secret = credentials.name
        if missing and missing.group(1).lower() == "secret" and missing.group(2) == secret:
            return "CredentialsNotFound", credentials_not_found(credentials, namespace) + where
        if no_key and no_key.group(2) == "Secret" and no_key.group(4) == secret:
            for field, key in credential_keys(credentials):
                if key == no_key.group(1):
                    message = credentials_incomplete(credentials, field, key)
                    return "CredentialsIncomplete", message + where
    if not (missing or no_key):
        return None
    return (
        "ConfigNotFound",
        f"container {container} of pod {pod} cannot start: {words} ({CONFIG_ERROR}); create it "
        f"in namespace {namespace!r}, or fix the reference (env valueFrom, envFrom or volumes of "
        "spec.head or spec.workerTemplate) that names it. The kubelet starts the container "
        "once it exists",
    )
