"""One pass's accumulator (`_Builder`), what it works on (`_Pass`) and the ways a pass ends: a
finished job, a failure, a success, or the move to a next attempt."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from functools import cached_property
from typing import Any

from raytrain_contract.api.v1alpha1 import TrainJob
from raytrain_contract.timefmt import parse_rfc3339, rfc3339
from raytrain_operator.builders.names import rayjob_name
from raytrain_operator.status import conditions as c
from raytrain_operator.status import goodput, triage
from raytrain_operator.status.conditions import Desired, Transition
from raytrain_operator.status.machine.observed import _cluster_start, _report, _seen, _trainer_phase
from raytrain_operator.status.machine.plan_types import (
    ANNOTATION_CLEANED_UP,
    FAILED,
    SPEC_CHANGE_PENDING,
    SUCCEEDED,
    SUSPENDED,
    Action,
    Annotate,
    DeleteChildren,
    Observation,
    Plan,
)


class _Builder:
    """Accumulates the desired conditions and status of one pass."""

    def __init__(self, obs: Observation) -> None:
        self.obs = obs
        self.conds: dict[str, Desired] = {}
        self.status: dict[str, Any] = {}
        self.actions: list[Action] = []
        self.recheck: float | None = None
        #: A spec change the running attempt does not carry (the message), or None.
        self.pending: str | None = None
        self.failure: triage.Triage | None = None
        #: The attempt this pass found (before any advance), once the RayJob is known to be
        #: this job's: its cluster's time goes into status.goodput.
        self.accounted_attempt: int | None = None
        #: Event messages of the checkpoints a resume passed over, new since the last pass.
        self.rejections: list[str] = []
        #: The last progress of an attempt this pass ended as hung (status.goodput counts its
        #: time from then on as lost to the hang), else None.
        self.hung_since: datetime | None = None

    def set(self, type_: str, status: bool, reason: str, message: str = "") -> None:
        self.conds[type_] = Desired(status, reason, message)

    def due_in(self, seconds: float) -> None:
        seconds = max(seconds, 1.0)
        self.recheck = seconds if self.recheck is None else min(self.recheck, seconds)

    def finish(self, phase: str) -> Plan:
        obs = self.obs
        now = rfc3339(obs.now)
        generation = obs.meta.generation
        observed = generation
        if self.pending is not None:
            # The spec of this generation is not what runs: the generation is not observed.
            held = obs.status.get("observedGeneration")
            observed = held if isinstance(held, int) and held < generation else generation - 1
            other = self.conds.get(c.RECONCILING)
            message = self.pending
            if other is not None and other.status and other.message:
                message += f". Meanwhile: {other.message}"
            self.set(c.RECONCILING, True, SPEC_CHANGE_PENDING, message)
        merged, transitions = c.merge(obs.status.get("conditions"), self.conds, observed, now)
        if self.pending is not None:
            before = c.find(obs.status.get("conditions"), c.RECONCILING) or {}
            for cond in merged:
                if cond["type"] == c.RECONCILING:
                    # This one is about the current generation: it says what waits.
                    cond["observedGeneration"] = generation
            announced = any(t.type == c.RECONCILING for t in transitions)
            if not announced and before.get("observedGeneration") != generation:
                # A further edit while one is pending: say again what waits now.
                transitions.append(
                    Transition(c.RECONCILING, "True", SPEC_CHANGE_PENDING, self.pending)
                )
        self.status["conditions"] = merged
        self.status["phase"] = phase
        if self.accounted_attempt is not None:
            self._account(phase)
        if observed >= 1:
            self.status["observedGeneration"] = observed
        return Plan(
            self.status, self.actions, transitions, self.recheck, self.failure, self.rejections
        )

    def _account(self, phase: str) -> None:
        obs = self.obs
        seen = _seen(obs, self.accounted_attempt or 0)
        outcome: str | None = None
        if phase == SUCCEEDED:
            outcome = goodput.SUCCEEDED
        elif phase == FAILED:
            outcome = goodput.FAILED
        elif self.failure is not None:
            outcome = goodput.RETRIED
        elif phase == SUSPENDED or (seen is not None and not seen.up and seen.suspended):
            outcome = goodput.SUSPENDED
        elif self.status.get("attempt") != self.accounted_attempt:
            outcome = goodput.SUSPENDED  # a spec change while suspended moved to a new attempt
        active = phase not in (SUCCEEDED, FAILED)
        accounted = goodput.account(
            obs.status, seen, outcome, obs.now, active, hung_since=self.hung_since
        )
        if accounted or obs.status.get("goodput"):
            self.status["goodput"] = accounted or None


def _advance(b: _Builder, attempt: int, restarts: int) -> None:
    """Move to the next attempt in the status only; the next passes remove the old RayJob and,
    once it is gone, create the new one. Nothing is deleted before the new attempt number is
    on the API server, so a lost status patch is decided again, never half-done."""
    nxt = attempt + 1
    b.status.update(
        {"attempt": nxt, "restarts": restarts, "rayJobName": rayjob_name(b.obs.meta.name, nxt)}
    )
    for key in ("rayClusterName", "dashboardURL", "workers"):
        b.status[key] = None


def _cluster_state(b: _Builder, name: str, deployment: str, verb: str) -> str:
    """'RayJob NAME is|was DEPLOYMENT; workers ready R/D' from this pass's status.workers."""
    workers = b.status.get("workers") or {}
    return (
        f"RayJob {name} {verb} {deployment or 'New'}; workers ready "
        f"{workers.get('ready', 0)}/{workers.get('desired', '?')}"
    )


def _observe_rayjob(
    b: _Builder, rj_status: Mapping[str, Any], rj_suspended: bool, st: Mapping[str, Any]
) -> None:
    """Copy names, workers and the first start from the RayJob's status."""
    if rj_status.get("rayClusterName"):
        b.status["rayClusterName"] = rj_status["rayClusterName"]
    if rj_status.get("dashboardURL"):
        b.status["dashboardURL"] = rj_status["dashboardURL"]
    cluster = rj_status.get("rayClusterStatus") or {}
    if cluster:
        b.status["workers"] = {
            "desired": int(cluster.get("desiredWorkerReplicas") or 0),
            "ready": int(cluster.get("readyWorkerReplicas") or 0),
        }
    deployment = rj_status.get("jobDeploymentStatus")
    if not st.get("startTime") and not rj_suspended and deployment in ("Initializing", "Running"):
        started = parse_rfc3339(rj_status.get("startTime")) or b.obs.now
        b.status["startTime"] = rfc3339(started)


def how_to_continue(name: str, status: Mapping[str, Any]) -> str:
    """How a new TrainJob continues the run of a failed one (spec.resumeFrom); no period."""
    latest = (status.get("checkpoint") or {}).get("latestURI")
    if latest:
        return (
            "To continue from its latest checkpoint, create a TrainJob with "
            f"spec.resumeFrom.trainJob: {name} (while this one exists) or "
            f"spec.resumeFrom.checkpoint: {latest}"
        )
    started = status.get("resumedFrom")
    if started:
        return (
            "Its run saved no checkpoint of its own: a TrainJob with "
            f"spec.resumeFrom.checkpoint: {started} starts where this one did"
        )
    return "Its run saved no checkpoint: a new TrainJob starts from the beginning"


def _fail(b: _Builder, reason: str, message: str) -> Plan:
    if "spec.resumeFrom" not in message and (b.obs.status.get("checkpoint") or {}).get("latestURI"):
        message = f"{message.rstrip('.')}. {how_to_continue(b.obs.meta.name, b.obs.status)}"
    b.set(c.FAILED, True, reason, message)
    b.set(c.SUCCEEDED, False, reason, "")
    b.set(c.RUNNING, False, reason, "")
    return _finished(b, FAILED)


def _succeed(b: _Builder, message: str) -> Plan:
    b.set(c.SUCCEEDED, True, "TrainingSucceeded", message)
    b.set(c.FAILED, False, "TrainingSucceeded", "")
    b.set(c.RUNNING, False, "TrainingSucceeded", "")
    return _finished(b, SUCCEEDED)


def _finished(b: _Builder, phase: str) -> Plan:
    b.status["completionTime"] = rfc3339(b.obs.now)
    b.set(c.SUSPENDED, False, "Finished", "")
    tj = b.obs.trainjob
    if tj is not None and tj.spec.ttl_seconds_after_finished is not None:
        b.due_in(float(tj.spec.ttl_seconds_after_finished))
    return b.finish(phase)


def _terminal(b: _Builder, attempt: int) -> Plan:
    """A finished job is never re-run: only the TTL clean-up remains."""
    obs = b.obs
    st = obs.status
    phase = SUCCEEDED if c.is_true(st.get("conditions"), c.SUCCEEDED) else FAILED
    tj = obs.trainjob
    ttl = tj.spec.ttl_seconds_after_finished if tj is not None else None
    finished = parse_rfc3339(st.get("completionTime"))
    if (
        ttl is not None
        and finished is not None
        and ANNOTATION_CLEANED_UP not in obs.meta.annotations
    ):
        left = (finished + timedelta(seconds=ttl) - obs.now).total_seconds()
        if left <= 0:
            b.actions.append(DeleteChildren())
            b.actions.append(Annotate(ANNOTATION_CLEANED_UP, rfc3339(obs.now)))
        else:
            b.due_in(left)
    return b.finish(phase)


class _Pass:
    """What a pass works on: the attempt, and the TrainJob and RayJob as the stages read them.

    `tj` is there once `_invalid_spec` has handed the pass on, `rj` and what is read from it
    once `_create_rayjob` has; each is read only when a stage first asks for it.
    """

    def __init__(self, obs: Observation, attempt: int, restarts: int) -> None:
        self.obs = obs
        self.attempt = attempt
        self.restarts = restarts
        #: The RayJob of the current attempt, `<name>-<attempt>`.
        self.name = rayjob_name(obs.meta.name, attempt)

    @property
    def tj(self) -> TrainJob:
        tj = self.obs.trainjob
        assert tj is not None, "_invalid_spec decides every pass without a TrainJob"
        return tj

    @property
    def rj(self) -> Mapping[str, Any]:
        rj = self.obs.rayjob
        assert rj is not None, "_create_rayjob decides every pass without a RayJob"
        return rj

    @cached_property
    def rj_spec(self) -> Mapping[str, Any]:
        return self.rj.get("spec") or {}

    @cached_property
    def rj_meta(self) -> Mapping[str, Any]:
        return self.rj.get("metadata") or {}

    @cached_property
    def rj_annotations(self) -> Mapping[str, Any]:
        return self.rj_meta.get("annotations") or {}

    @cached_property
    def rj_status(self) -> Mapping[str, Any]:
        return self.rj.get("status") or {}

    @cached_property
    def deployment(self) -> str:
        """The RayJob's jobDeploymentStatus ("" before KubeRay set it)."""
        return str(self.rj_status.get("jobDeploymentStatus") or "")

    @cached_property
    def job_status(self) -> str:
        """The RayJob's jobStatus ("" before KubeRay set it)."""
        return str(self.rj_status.get("jobStatus") or "")

    @cached_property
    def rj_suspended(self) -> bool:
        return bool(self.rj_spec.get("suspend"))

    @cached_property
    def report(self) -> Mapping[str, Any]:
        """The runtime's report from this attempt's current cluster, or {}."""
        return _report(self.obs.status, self.attempt, _cluster_start(self.rj_status))

    @cached_property
    def trainer(self) -> tuple[str | None, str]:
        """The runtime's phase and message from `report`."""
        return _trainer_phase(self.report)
