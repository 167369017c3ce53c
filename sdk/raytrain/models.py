"""What the SDK returns: frozen dataclasses read from TrainJob objects and core/v1 Events.

They are parsed from plain dicts, leniently: a field an older operator does not write is None,
and one a newer operator adds is ignored (it stays readable in ``TrainJob.manifest``), so the
SDK keeps working across operator versions.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from raytrain_contract.api import templates
from raytrain_contract.timefmt import parse_rfc3339

Obj = Mapping[str, Any]

#: Statuses a caller can wait for; ``Complete`` (Kubeflow's word) means ``Succeeded``.
WAITABLE = ("Created", "Running", "Suspended", "Succeeded", "Failed")
ALIASES = {"Complete": "Succeeded"}
#: Phases after which the job does not change any more.
FINISHED = frozenset({"Succeeded", "Failed"})


def _int(value: Any) -> int | None:
    try:
        return None if value is None else int(value)
    except (TypeError, ValueError):
        return None


def _str(value: Any) -> str | None:
    return None if value is None else str(value)


@dataclass(frozen=True)
class Condition:
    """One metav1.Condition of the TrainJob's status."""

    type: str
    status: str
    reason: str = ""
    message: str = ""
    last_transition_time: dt.datetime | None = None
    observed_generation: int | None = None

    @property
    def is_true(self) -> bool:
        return self.status == "True"

    @classmethod
    def from_dict(cls, cond: Obj) -> Condition:
        return cls(
            type=str(cond.get("type", "")),
            status=str(cond.get("status", "Unknown")),
            reason=str(cond.get("reason") or ""),
            message=str(cond.get("message") or ""),
            last_transition_time=parse_rfc3339(cond.get("lastTransitionTime")),
            observed_generation=_int(cond.get("observedGeneration")),
        )


@dataclass(frozen=True)
class Checkpoints:
    """Where the job's checkpoints are: the latest and the best the runtime reported."""

    latest_uri: str | None = None
    best_uri: str | None = None
    best_metric: str | None = None
    """Score of the best checkpoint (spec.checkpoint.scoreAttribute), as reported."""
    count: int | None = None
    """Checkpoints reported in this run."""
    storage: str | None = None
    """Where the run stores them: spec.storage.s3.uri, or `pvc/<claim>`."""
    resumed_from: str | None = None
    """The checkpoint the current attempt resumed from, once verified against its manifest."""
    rejected: tuple[Mapping[str, Any], ...] = ()
    """Checkpoints a resume passed over (uri, problem, reason, attempt, time), newest last."""

    @property
    def uris(self) -> list[str]:
        """The distinct checkpoint URIs, latest first."""
        return [
            u
            for i, u in enumerate((self.latest_uri, self.best_uri))
            if u and (i == 0 or u != self.latest_uri)
        ]

    @classmethod
    def from_object(cls, obj: Obj) -> Checkpoints:
        ckpt = (obj.get("status") or {}).get("checkpoint") or {}
        # From the template's copy in status when the job leaves storage to its template.
        storage = (
            templates.effective_value(obj.get("spec") or {}, obj.get("status") or {}, "storage")
            or {}
        )
        if "s3" in storage:
            where = _str((storage.get("s3") or {}).get("uri"))
        elif "pvc" in storage:
            where = f"pvc/{(storage.get('pvc') or {}).get('claimName')}"
        else:
            where = None
        return cls(
            latest_uri=_str(ckpt.get("latestURI")),
            best_uri=_str(ckpt.get("bestURI")),
            best_metric=_str(ckpt.get("bestMetric")),
            count=_int(ckpt.get("count")),
            storage=where,
            resumed_from=_str(ckpt.get("resumedFrom")),
            rejected=tuple(dict(r) for r in ckpt.get("rejected") or [] if isinstance(r, Mapping)),
        )


@dataclass(frozen=True)
class TrainJob:
    """A TrainJob as the API server returned it, with the fields users read."""

    name: str
    namespace: str
    phase: str
    """Pending, Running, Suspended, Succeeded, Failed or Stalled."""
    conditions: tuple[Condition, ...] = ()
    suspended: bool = False
    """spec.suspend: what was asked, not yet what happened (see the Suspended condition)."""
    progress: int | None = None
    """Training progress in percent (trainerStatus.progressPercentage)."""
    epoch: int | None = None
    step: int | None = None
    estimated_remaining_seconds: int | None = None
    metrics: Mapping[str, str] = field(default_factory=dict)
    """Latest reported metrics, by name (values as the runtime wrote them)."""
    message: str | None = None
    """The runtime's message: the error of a failed run, the result of a finished one."""
    checkpoints: Checkpoints = field(default_factory=Checkpoints)
    attempt: int = 0
    """Current attempt: each is one RayJob `<name>-<attempt>` and a new Ray cluster."""
    restarts: int = 0
    """Cluster-level retries so far."""
    ray_job_name: str | None = None
    ray_cluster_name: str | None = None
    dashboard_url: str | None = None
    run_name: str | None = None
    workers_desired: int | None = None
    workers_ready: int | None = None
    creation_timestamp: dt.datetime | None = None
    start_time: dt.datetime | None = None
    completion_time: dt.datetime | None = None
    uid: str | None = None
    generation: int | None = None
    image: str | None = None
    """spec.image the job runs: its own, else its template's (as for the fields below)."""
    entrypoint: str | None = None
    num_workers: int | None = None
    """spec.scaling.numWorkers; an elastic job has min_workers and max_workers instead."""
    min_workers: int | None = None
    max_workers: int | None = None
    use_gpu: bool = False
    code_uri: str | None = None
    """spec.code.uri: the code snapshot the job runs (None: the image's code)."""
    code_sha256: str | None = None
    manifest: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The whole object, for fields this class does not name."""

    @property
    def finished(self) -> bool:
        return self.phase in FINISHED

    def condition(self, ctype: str) -> Condition | None:
        """The condition of that type (`Complete` is read as `Succeeded`), or None."""
        ctype = ALIASES.get(ctype, ctype)
        return next((c for c in self.conditions if c.type == ctype), None)

    def has_condition(self, ctype: str) -> bool:
        """The condition is True and was computed from the current spec (not a stale one)."""
        cond = self.condition(ctype)
        return bool(cond and cond.is_true and cond.observed_generation in (None, self.generation))

    def describe_conditions(self) -> str:
        """`Created=True (RayJobCreated), Running=False (Pending)`: for error messages."""
        if not self.conditions:
            return "no conditions yet (is the operator running?)"
        return ", ".join(
            f"{c.type}={c.status}" + (f" ({c.reason})" if c.reason else "") for c in self.conditions
        )

    @classmethod
    def from_object(cls, obj: Obj) -> TrainJob:
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        status = obj.get("status") or {}
        trainer = status.get("trainerStatus") or {}
        workers = status.get("workers") or {}
        # What the job runs with: a field it leaves to its template comes from the template's
        # copy in status.template.
        effective = templates.effective_spec(spec, status)
        scaling = effective.get("scaling") or {}
        return cls(
            name=str(meta.get("name", "")),
            namespace=str(meta.get("namespace", "")),
            phase=str(status.get("phase") or "Pending"),
            conditions=tuple(Condition.from_dict(c) for c in status.get("conditions") or []),
            suspended=bool(spec.get("suspend")),
            progress=_int(trainer.get("progressPercentage")),
            epoch=_int(trainer.get("epoch")),
            step=_int(trainer.get("step")),
            estimated_remaining_seconds=_int(trainer.get("estimatedRemainingSeconds")),
            metrics={
                str(m.get("name")): str(m.get("value"))
                for m in trainer.get("metrics") or []
                if m.get("name") is not None
            },
            message=_str(trainer.get("message")),
            checkpoints=Checkpoints.from_object(obj),
            attempt=_int(status.get("attempt")) or 0,
            restarts=_int(status.get("restarts")) or 0,
            ray_job_name=_str(status.get("rayJobName")),
            ray_cluster_name=_str(status.get("rayClusterName")),
            dashboard_url=_str(status.get("dashboardURL")),
            run_name=_str(status.get("runName")),
            workers_desired=_int(workers.get("desired")),
            workers_ready=_int(workers.get("ready")),
            creation_timestamp=parse_rfc3339(meta.get("creationTimestamp")),
            start_time=parse_rfc3339(status.get("startTime")),
            completion_time=parse_rfc3339(status.get("completionTime")),
            uid=_str(meta.get("uid")),
            generation=_int(meta.get("generation")),
            image=_str(effective.get("image")),
            entrypoint=_str(effective.get("entrypoint")),
            code_uri=_str((effective.get("code") or {}).get("uri")),
            code_sha256=_str((effective.get("code") or {}).get("sha256")),
            num_workers=_int(scaling.get("numWorkers")),
            min_workers=_int(scaling.get("minWorkers")),
            max_workers=_int(scaling.get("maxWorkers")),
            use_gpu=bool(scaling.get("useGpu")),
            manifest=dict(obj),
        )


@dataclass(frozen=True)
class Event:
    """A Kubernetes Event about the TrainJob or one of its children (RayJob, RayCluster, pods)."""

    type: str
    """Normal or Warning."""
    reason: str
    message: str
    involved_object_kind: str
    involved_object_name: str
    count: int = 1
    first_time: dt.datetime | None = None
    last_time: dt.datetime | None = None
    source: str = ""
    """Who posted it (the operator, KubeRay, the scheduler, the kubelet)."""

    @property
    def event_time(self) -> dt.datetime | None:
        """When it last happened (Kubeflow's name for it)."""
        return self.last_time or self.first_time

    @classmethod
    def from_dict(cls, ev: Obj) -> Event:
        involved = ev.get("involvedObject") or ev.get("involved_object") or {}
        meta = ev.get("metadata") or {}
        source = ev.get("source") or {}
        first = parse_rfc3339(ev.get("firstTimestamp") or ev.get("eventTime"))
        last = parse_rfc3339(ev.get("lastTimestamp") or ev.get("eventTime"))
        created = parse_rfc3339(meta.get("creationTimestamp"))
        return cls(
            type=str(ev.get("type") or "Normal"),
            reason=str(ev.get("reason") or ""),
            message=str(ev.get("message") or ""),
            involved_object_kind=str(involved.get("kind") or ""),
            involved_object_name=str(involved.get("name") or ""),
            count=_int(ev.get("count")) or 1,
            first_time=first or created,
            last_time=last or first or created,
            source=str(source.get("component") or ev.get("reportingComponent") or ""),
        )


def wanted_statuses(status: str | Iterable[str]) -> frozenset[str]:
    """The conditions a wait ends on, with `Complete` read as `Succeeded`; refuses others."""
    names = {status} if isinstance(status, str) else set(status)
    if not names:
        raise ValueError(f"status: give at least one of {', '.join(WAITABLE)} (or Complete)")
    unknown = sorted(n for n in names if ALIASES.get(n, n) not in WAITABLE)
    if unknown:
        raise ValueError(
            f"status: {', '.join(map(repr, unknown))} is not a TrainJob status; use "
            f"{', '.join(WAITABLE)} (Complete is accepted for Succeeded)"
        )
    return frozenset(ALIASES.get(n, n) for n in names)


def wait_outcome(job: TrainJob, wanted: frozenset[str]) -> tuple[bool, str] | None:
    """Decide a wait: (met, message) once decided, None while still waiting.

    A wanted condition counts once it is True for the current generation. Waiting for anything
    but Failed ends unmet as soon as the job Failed, so callers never hang on a job that can no
    longer get there.
    """
    for ctype in sorted(wanted):
        if job.has_condition(ctype):
            cond = job.condition(ctype)
            return True, (cond.message if cond and cond.message else ctype)
    if "Failed" not in wanted:
        failed = job.condition("Failed")
        if failed and failed.is_true:
            return False, f"{failed.reason}: {failed.message}"
    return None
