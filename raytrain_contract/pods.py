"""What every pod of a job shares with the pods that read its storage from outside.

The operator's builders (raytrain_operator/builders/pods.py) give the Ray head, the workers and
KubeRay's submitter this wiring; the SDK's log reader pod (raytrain/reader.py) gives a pod the
same storage access to read what the runtime stored. One definition keeps the two from drifting:
the S3 variables (credentials only by `secretKeyRef`), the PVC volume and its mount, the service
account the user chose (an override, or IRSA's), and the hardening of the runtime image's
non-root user (the `restricted` Pod Security Standard, docs/operator.md "Pod hardening").
"""

from __future__ import annotations

import posixpath
from typing import Any

from raytrain_contract.api.v1alpha1 import RESERVED_ENV_NAMES, PodOverrides, TrainJobSpec

STORAGE_VOLUME = "raytrain-storage"

#: The runtime image's user and group (Dockerfile, target trainer-runtime). A numeric uid lets
#: the kubelet check `runAsNonRoot`; fsGroup makes an RWX claim's mount writable by it.
RUNTIME_UID = 1000
RUNTIME_GID = 1000

#: KubeRay's name for the submitter container; it fills in the `ray job submit` command of a
#: container of that name when the command is empty (rayjob_controller.go, K8sJobMode).
SUBMITTER_CONTAINER = "ray-job-submitter"
RUN_NAME_UID_HEX = 12


def storage_env(spec: TrainJobSpec) -> list[dict[str, Any]]:
    """AWS variables for S3 storage: credentials by reference, endpoint and region by value."""
    s3 = spec.storage.s3
    if s3 is None:
        return []
    env: list[dict[str, Any]] = []
    secret = s3.credentials_secret
    if secret is not None:
        keys = [
            ("AWS_ACCESS_KEY_ID", secret.access_key_id_key),
            ("AWS_SECRET_ACCESS_KEY", secret.secret_access_key_key),
        ]
        if secret.session_token_key:
            keys.append(("AWS_SESSION_TOKEN", secret.session_token_key))
        env += [
            {"name": var, "valueFrom": {"secretKeyRef": {"name": secret.name, "key": key}}}
            for var, key in keys
        ]
    if s3.endpoint:
        env.append({"name": "AWS_ENDPOINT_URL", "value": s3.endpoint})
    if s3.region:
        env.append({"name": "AWS_REGION", "value": s3.region})
        env.append({"name": "AWS_DEFAULT_REGION", "value": s3.region})
    return env


def run_name(name: str, uid: str) -> str:
    """Ray Train run name: stable across attempts, new for a re-created TrainJob of this name."""
    hex_digits = uid.replace("-", "").lower()[:RUN_NAME_UID_HEX]
    return f"{name}-{hex_digits}"


def storage_path(spec: TrainJobSpec) -> str:
    """Where the job stores checkpoints and logs, as its pods see it: the claim's mount (plus
    subPath) or the S3 URI."""
    pvc, s3 = spec.storage.pvc, spec.storage.s3
    if pvc is not None:
        path = pvc.mount_path.rstrip("/") or "/"
        if pvc.sub_path:
            path = posixpath.join(path, pvc.sub_path.strip("/"))
        return path
    if s3 is not None:
        return s3.uri
    raise ValueError("spec.storage: set exactly one of storage.pvc or storage.s3")


def storage_volumes(spec: TrainJobSpec) -> list[dict[str, Any]]:
    """The claim of PVC storage as a pod volume (none for S3)."""
    if spec.storage.pvc is None:
        return []
    return [
        {
            "name": STORAGE_VOLUME,
            "persistentVolumeClaim": {"claimName": spec.storage.pvc.claim_name},
        }
    ]


def storage_mounts(spec: TrainJobSpec) -> list[dict[str, Any]]:
    """The claim mounted at spec.storage.pvc.mountPath, the same path in every pod."""
    if spec.storage.pvc is None:
        return []
    return [{"name": STORAGE_VOLUME, "mountPath": spec.storage.pvc.mount_path}]


def user_env(ours: list[dict[str, Any]], overrides: PodOverrides | None) -> list[dict[str, Any]]:
    """The user's extra variables of a pod (spec.head.env, spec.workerTemplate.env) that go after
    ours, minus any that would shadow one of ours or one the operator adds for the runtime
    (RESERVED_ENV_NAMES: the CRD refuses them; one stored before that is dropped here)."""
    names = {e["name"] for e in ours} | set(RESERVED_ENV_NAMES)
    return [e for e in (overrides.env if overrides else None) or [] if e.get("name") not in names]


def chosen_service_account(spec: TrainJobSpec, overrides: PodOverrides | None) -> str | None:
    """The service account the user chose for a pod: the override's, else the one S3 storage
    names for IRSA. None: the pods run as the job's own account (the operator makes it)."""
    if overrides is not None and overrides.service_account_name:
        return overrides.service_account_name
    if spec.storage.s3 is not None and spec.storage.s3.service_account_name:
        return spec.storage.s3.service_account_name
    return None


def pod_security_context() -> dict[str, Any]:
    return {
        "runAsNonRoot": True,
        "runAsUser": RUNTIME_UID,
        "runAsGroup": RUNTIME_GID,
        "fsGroup": RUNTIME_GID,
        # Without it the kubelet chowns every file of the claim at each pod start: minutes for a
        # storage volume that holds many checkpoints.
        "fsGroupChangePolicy": "OnRootMismatch",
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def container_security_context() -> dict[str, Any]:
    """What the pod-level context cannot say. KubeRay copies it onto the `wait-gcs-ready` init
    container it adds to worker pods."""
    return {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
