"""The run log reader: where an attempt's stored log files are, and a pod that prints one.

The runtime keeps each attempt's driver log, metrics, worker errors and (when its reports
stopped for the hang timeout) every rank's stacks under
``<storage>/<run>/attempt-<N>/`` (trainer_runtime/runlog.py; the names below are a copy, the
operator may not import the runtime). The CLI has no S3 client, so it reads such a file through
a short-lived pod in the job's namespace: the job's own image, the storage wiring the
operator gives the head pod (raytrain_contract.pods: its S3 variables, credentials by reference
and the user's extra env, or the PVC mount, and the service account the user chose, for IRSA),
hardened like every pod of the job, placed like the head, running
``python -m trainer_runtime.runlog cat PATH``. The pod is owned by the TrainJob, so
it goes with the job even when the CLI that made it could not delete it.
"""

from __future__ import annotations

import copy
import posixpath
from typing import Any

from raytrain_contract.api.v1alpha1 import TrainJobSpec
from raytrain_contract.meta import LABEL_ROLE, Meta, base_labels, owner_reference
from raytrain_contract.pods import (
    chosen_service_account,
    container_security_context,
    pod_security_context,
    run_name,
    storage_env,
    storage_mounts,
    storage_path,
    storage_volumes,
    user_env,
)

ATTEMPT_DIR = "attempt-{attempt}"
DRIVER_LOG = "driver.log"
METRICS = "metrics.jsonl"
WORKER_ERROR = "worker-{rank}.error.txt"
STACKS = "stacks.txt"
#: Exit code of `runlog cat` when the file does not exist (trainer_runtime.runlog.EXIT_MISSING).
EXIT_MISSING = 3

READER_ROLE = "log-reader"
READER_CONTAINER = "runlog"
TERMINATION_MESSAGE = "/dev/termination-log"
#: A reader that cannot finish in this time (an unreachable endpoint) is stopped by the kubelet.
READER_DEADLINE_SECONDS = 600
READER_RESOURCES: dict[str, Any] = {
    "requests": {"cpu": "100m", "memory": "256Mi"},
    "limits": {"cpu": "1", "memory": "512Mi"},
}


def stored_file_name(
    *, worker: int | None = None, metrics: bool = False, stacks: bool = False
) -> str:
    if worker is not None:
        return WORKER_ERROR.format(rank=worker)
    if stacks:
        return STACKS
    return METRICS if metrics else DRIVER_LOG


def attempt_dir(spec: TrainJobSpec, meta: Meta, attempt: int) -> str:
    """``<storage>/<run>/attempt-<N>`` as the pods see it: an s3:// URI or a mounted path."""
    base = storage_path(spec).rstrip("/") or "/"
    return posixpath.join(base, run_name(meta.name, meta.uid), ATTEMPT_DIR.format(attempt=attempt))


def reader_name_prefix(name: str) -> str:
    """`generateName` of reader pods; the API server appends 5 characters."""
    return f"{name[:45]}-logs-"


def build_reader_pod(spec: TrainJobSpec, meta: Meta, attempt: int, path: str) -> dict[str, Any]:
    """A pod that prints the stored file ``path`` of ``attempt`` and exits.

    Exit 0: the file is the log. Exit 3: no such file; the termination message says what the
    directory holds. Anything else: the termination message says what failed.
    """
    head = spec.head
    ours = storage_env(spec)
    # The runtime's own variables stay out: the reader is not a Ray pod of the job.
    env = [e for e in ours + user_env(ours, head) if not str(e["name"]).startswith("RAYTRAIN_")]
    container: dict[str, Any] = {
        "name": READER_CONTAINER,
        "image": spec.image,
        "command": [
            "python",
            "-m",
            "trainer_runtime.runlog",
            "cat",
            path,
            "--message-file",
            TERMINATION_MESSAGE,
        ],
        "env": copy.deepcopy(env),
        "resources": {k: dict(v) for k, v in READER_RESOURCES.items()},
        "volumeMounts": storage_mounts(spec),
        "terminationMessagePath": TERMINATION_MESSAGE,
        "terminationMessagePolicy": "File",
        "securityContext": container_security_context(),
    }
    if head is not None and head.env_from:
        container["envFrom"] = copy.deepcopy(head.env_from)
    if spec.image_pull_policy:
        container["imagePullPolicy"] = spec.image_pull_policy
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        "activeDeadlineSeconds": READER_DEADLINE_SECONDS,
        # It reads storage only: no Kubernetes API token (IRSA's token is a projected volume).
        "automountServiceAccountToken": False,
        "securityContext": pod_security_context(),
        "terminationGracePeriodSeconds": 5,
        "containers": [container],
        "volumes": storage_volumes(spec),
    }
    # The head's account when it is one the user chose (IRSA, an override); not the per-job
    # account: it is there for the Kubernetes API only, and gone after ttlSecondsAfterFinished,
    # when a pod that names it would be refused.
    account = chosen_service_account(spec, head)
    if account is not None:
        pod["serviceAccountName"] = account
    if head is not None and head.node_selector:
        pod["nodeSelector"] = dict(head.node_selector)
    if head is not None and head.tolerations:
        pod["tolerations"] = copy.deepcopy(head.tolerations)
    if head is not None and head.priority_class_name:
        pod["priorityClassName"] = head.priority_class_name
    labels = base_labels(meta, attempt)
    labels[LABEL_ROLE] = READER_ROLE
    # Not a controller and not blocking deletion: creating it needs no right on the TrainJob.
    owner = dict(owner_reference(meta), controller=False, blockOwnerDeletion=False)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": reader_name_prefix(meta.name),
            "namespace": meta.namespace,
            "labels": labels,
            "ownerReferences": [owner],
        },
        "spec": pod,
    }
