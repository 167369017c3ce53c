"""Where `raytrain logs` finds the training driver's output, decided from plain objects.

In KubeRay's K8sJobMode the driver (the RayJob's entrypoint, `python -m trainer_runtime`) runs
on the Ray head under Ray's job manager; the head container's own log is only `ray start`'s.
KubeRay submits the driver from a Kubernetes Job named like the RayJob (rayjob_controller.go,
createNewK8sJob) whose pod runs `ray job submit --no-wait` and then `ray job logs --follow`:
that pod's log is the driver's output, and it stays after the Ray cluster is deleted. The Job
controller labels its pods `batch.kubernetes.io/job-name` and makes the Job their controlling
owner; a Job that retried (KubeRay's submitter backoffLimit is 2) has several, the newest last.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
#: Phases after which nothing new will appear: waiting for a submitter pod is then pointless.
FINAL_PHASES = frozenset({"Succeeded", "Failed"})
#: Ray's own copy of the driver's output on the head, for when the submitter pod is gone.
DRIVER_LOG = "/tmp/ray/session_latest/logs/job-driver-{job_id}.log"

Obj = Mapping[str, Any]


def submitter_selector(rayjob: str) -> str:
    return f"{JOB_NAME_LABEL}={rayjob}"


def _owned_by_job(pod: Obj, job: str) -> bool:
    return any(
        ref.get("kind") == "Job" and ref.get("name") == job and ref.get("controller")
        for ref in pod.get("metadata", {}).get("ownerReferences") or []
    )


def pick_submitter_pod(pods: Sequence[Obj], rayjob: str) -> Obj | None:
    """The newest pod the submitter Job `rayjob` controls, or None.

    The label alone is not proof: anyone can label a pod, so ownership decides.
    """
    owned = [p for p in pods if _owned_by_job(p, rayjob)]
    if not owned:
        return None
    return max(
        owned,
        key=lambda p: (
            str(p["metadata"].get("creationTimestamp") or ""),
            str(p["metadata"].get("name") or ""),
        ),
    )


@dataclass(frozen=True)
class ContainerState:
    started: bool
    """The container ran or runs: it has a log to read."""
    reason: str
    """Why it has not started (`ContainerCreating`, `ImagePullBackOff`, `Unschedulable`)."""


def container_state(pod: Obj, container: str) -> ContainerState:
    status = pod.get("status") or {}
    for cs in status.get("containerStatuses") or []:
        if cs.get("name") != container:
            continue
        state = cs.get("state") or {}
        if "running" in state or "terminated" in state:
            return ContainerState(True, "")
        if (cs.get("lastState") or {}).get("terminated"):
            return ContainerState(True, "")
        waiting = state.get("waiting") or {}
        return ContainerState(False, str(waiting.get("reason") or "Waiting"))
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return ContainerState(False, str(cond.get("reason") or "Unschedulable"))
    return ContainerState(False, str(status.get("phase") or "Pending"))


def missing_message(
    trainjob: str,
    phase: str,
    rayjob: str,
    *,
    job_exists: bool,
    head_pod: str | None,
    job_id: str | None,
) -> str:
    """What to tell the user when there is no submitter pod to read, and what to do."""
    where = f"the submitter pod of RayJob {rayjob} (Kubernetes Job {rayjob}, created by KubeRay)"
    if job_exists:
        why = "exists but has no pod: it was deleted, or the Job controller has not created it yet"
    elif phase in FINAL_PHASES:
        why = f"is gone: the TrainJob is {phase} and its RayJob was cleaned up"
    else:
        why = (
            f"does not exist yet: KubeRay creates it once the Ray cluster is ready "
            f"(TrainJob phase: {phase}); `raytrain logs {trainjob} -f` waits for it"
        )
    message = f"no driver log for TrainJob {trainjob}: {where} {why}"
    if head_pod and job_id:
        message += (
            f". Ray's copy is on the head while it runs: kubectl exec {head_pod} -- "
            f"cat {DRIVER_LOG.format(job_id=job_id)}"
        )
    return message


def not_started_message(pod: str, state: ContainerState, trainjob: str) -> str:
    return (
        f"the submitter pod {pod} has not started yet ({state.reason}); "
        f"`raytrain logs {trainjob} -f` waits for it, `kubectl describe pod {pod}` says why"
    )


# -- stored logs (trainer_runtime/runlog.py writes them; raytrain/reader.py reads them) ----------

#: What a CLI user needs in the job's namespace to read stored logs through a reader pod.
READER_RBAC = "pods: create, get, watch, delete; pods/log: get"


def attempt_not_started(trainjob: str, attempt: int, current: int, phase: str) -> str:
    return (
        f"no stored logs for attempt {attempt} of TrainJob {trainjob}: that attempt never "
        f"started (attempts run from 0; the current one is {current}, phase {phase}); "
        f"choose --attempt between 0 and {current}"
    )


def no_storage_message(trainjob: str, attempt: int, problem: str) -> str:
    return (
        f"no stored logs for attempt {attempt} of TrainJob {trainjob}: its storage is not "
        f"usable ({problem}); the run log lives in spec.storage beside the checkpoints"
    )


def reader_forbidden_message(trainjob: str, namespace: str, detail: str) -> str:
    return (
        f"reading the stored logs of TrainJob {trainjob} needs a short-lived reader pod in "
        f"namespace {namespace!r}, and your account may not create one ({detail}); ask for "
        f"RBAC there on {READER_RBAC}"
    )


def reader_outcome(pod: Obj) -> tuple[int | None, str]:
    """The reader container's exit code and termination message; None while it runs."""
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        done = (cs.get("state") or {}).get("terminated")
        if done:
            return int(done.get("exitCode") or 0), str(done.get("message") or "").strip()
    phase = (pod.get("status") or {}).get("phase")
    if phase == "Failed":  # stopped before the container ran: its deadline, an eviction
        reason = (pod.get("status") or {}).get("reason") or "Failed"
        return 1, f"the pod failed ({reason}) before its container ran"
    return None, ""


def not_stored_message(trainjob: str, attempt: int, path: str, detail: str) -> str:
    return (
        f"no stored log for attempt {attempt} of TrainJob {trainjob} at {path}: "
        f"{detail or 'no such file'}. A worker's error file exists only for a worker that "
        f"failed, the stacks only for an attempt whose reports stopped for the hang timeout "
        f"(spec.failure.hangTimeoutSeconds); an attempt whose runtime predates stored logs has "
        f"none"
    )


def reader_failed_message(
    trainjob: str, attempt: int, path: str, pod: str, code: int, detail: str
) -> str:
    return (
        f"reading {path} (attempt {attempt} of TrainJob {trainjob}) failed in pod {pod} "
        f"(exit code {code}): {detail or 'no message'}; the reader uses the job's image and "
        f"storage settings (spec.image, spec.storage, spec.head.env)"
    )


def reader_stuck_message(pod: str, reason: str, timeout: float) -> str:
    return (
        f"the log reader pod {pod} did not finish in {timeout:g} s ({reason}); it has been "
        f"deleted. `raytrain events` or the namespace's Events say why (image pull, quota)"
    )
