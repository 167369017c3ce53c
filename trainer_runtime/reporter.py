"""Turn Ray Train reports into merge patches of the TrainJob's status (runtime-contract.md).

One ``Reporter`` lives in the driver process (the RayJob entrypoint on the head), fed with what
every ``ray.train.report`` produced. It writes only ``status.trainerStatus`` and
``status.checkpoint``, at most once per ``minIntervalSeconds`` with the latest report always
sent in the end (a trailing flush), and the terminal outcome last. Where the patches go is a
``Transport``: the Kubernetes API (``trainer_runtime.kube``), the console, or a test recorder.
A transport that fails is retried with backoff and then given up on: reporting never stops the
training, and a training failure is never hidden by a reporting failure.

Every report names the attempt it comes from. The pod's environment (``RAYTRAIN_ATTEMPT``, set
by the operator in each Ray container) wins over the contract's ``attempt``: the contract
ConfigMap is shared by the attempts of a job, a pod's environment is fixed for its life, and the
operator ignores a report from an attempt other than the current one.

The pure parts (``Throttle``, ``ProgressEstimator``, ``build_status_patch``) do no I/O.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from raytrain_contract import DEFAULT_REPORT_MIN_INTERVAL_SECONDS, hang
from raytrain_contract.timefmt import parse_rfc3339, rfc3339
from trainer_runtime import failure

log = logging.getLogger("trainer_runtime.reporter")

CHECKPOINT_REQUEST_ANNOTATION = "raytrain.dev/checkpoint-requested"
#: Set by the operator in every Ray container: the attempt (and RayJob, RayCluster) of the pod.
ATTEMPT_ENV = "RAYTRAIN_ATTEMPT"
RAYJOB_ENV = "RAYTRAIN_RAYJOB"
#: How many rejected checkpoints status.checkpoint.rejected keeps (the API allows 20).
REJECTED_KEPT = 20
RAYCLUSTER_ENV = "RAYTRAIN_RAYCLUSTER"
RUNNING, SUCCEEDED, FAILED = "Running", "Succeeded", "Failed"
_MESSAGE_LIMIT = failure.MESSAGE_LIMIT


class Transport(Protocol):
    """Where status patches go."""

    def patch_status(self, body: dict[str, Any]) -> None:
        """Merge-patch ``body`` (``{"status": {...}}``) into the TrainJob."""

    def read_trainjob(self) -> Mapping[str, Any] | None:
        """The TrainJob as the API server has it now, or None when there is no server."""


def attempt_from_env(environ: Mapping[str, str] | None = None) -> int | None:
    """The pod's attempt from ``RAYTRAIN_ATTEMPT``; None when unset or not a number."""
    value = (os.environ if environ is None else environ).get(ATTEMPT_ENV, "").strip()
    return int(value) if value.isdigit() else None


class Throttle:
    """At most one send per ``min_interval`` seconds."""

    def __init__(self, min_interval: float) -> None:
        self.min_interval = max(0.0, min_interval)
        self._last: float | None = None

    def ready(self, now: float) -> bool:
        return self._last is None or now - self._last >= self.min_interval

    def due_at(self) -> float:
        return 0.0 if self._last is None else self._last + self.min_interval

    def mark(self, now: float) -> None:
        self._last = now


def total_epochs(config: Mapping[str, Any]) -> int | None:
    """``epochs`` or ``num_epochs`` from the train loop config, when it is a positive integer."""
    for key in ("epochs", "num_epochs"):
        value = config.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def finished_epoch(metrics: Mapping[str, Any]) -> int | None:
    """The 0-based index of the last finished epoch, from a report's ``epoch``; None if unknown.

    Two conventions meet here. A loop of its own reports the index of the epoch it just finished
    as an integer (``for epoch in range(epochs): ... report({"epoch": epoch})``), and so does
    Ray's Lightning callback (``trainer.current_epoch``). Hugging Face's ``Trainer`` logs the
    number of epochs done as a float (``1.0`` after the first, ``1.5`` half-way through the
    second), and Ray's ``RayTrainReportCallback`` passes that on: a float counts epochs done, so
    its whole part less one is the last finished index (none before the first epoch ends).
    """
    epoch = metrics.get("epoch")
    if isinstance(epoch, bool):
        return None
    if isinstance(epoch, int):
        return epoch
    if isinstance(epoch, float) and math.isfinite(epoch) and epoch >= 1.0:
        # Fractions summed step by step can end an epoch a hair short: 2.9999999 is three done.
        return math.floor(epoch + 1e-6) - 1
    return None


class ProgressEstimator:
    """Progress and ETA from the reported ``epoch``.

    ``epoch`` is the 0-based index of the epoch that just finished (``for epoch in
    range(epochs): ... report({"epoch": epoch})``), so ``epoch + 1`` epochs are done. The rate is
    measured over the epochs seen by this process, so a resumed run does not count the epochs it
    skipped as fast ones.
    """

    def __init__(self, epochs: int | None, start: float) -> None:
        self.epochs = epochs
        self._start = start
        self._first: tuple[float, int] | None = None

    def observe(self, epoch: int | None, now: float) -> tuple[int | None, int | None]:
        """Return (progressPercentage, estimatedRemainingSeconds); None when unknown."""
        if self.epochs is None or epoch is None:
            return None, None
        done = min(max(epoch + 1, 0), self.epochs)
        # 100 is kept for the Succeeded report: a run that is still reporting is not done.
        percent = min(99, math.floor(100 * done / self.epochs))
        if self._first is None:
            self._first = (now, done)
            seconds_per_epoch = now - self._start
        else:
            t0, d0 = self._first
            seconds_per_epoch = (now - t0) / (done - d0) if done > d0 else now - self._start
        remaining = self.epochs - done
        return percent, max(0, round(seconds_per_epoch * remaining))


#: The words of the runtime-status policy's refusal of a report from an attempt the job has left
#: (charts/raytrain-operator/templates/runtime-status-policy.yaml).
SUPERSEDED = "only the current attempt may report"


def format_value(value: Any) -> str | None:
    """A metric value as the status stores it (a string), or None when it is not a scalar."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return format(value, ".6g")
    if isinstance(value, str):
        return value[:256]
    return None


def format_metrics(metrics: Mapping[str, Any]) -> list[dict[str, str]]:
    out = []
    for name in sorted(metrics):
        text = format_value(metrics[name])
        if text is not None and not name.startswith("_"):
            out.append({"name": name, "value": text})
    return out


@dataclass
class ReportState:
    """Everything the status shows, as last observed."""

    attempt: int
    epoch: int | None = None
    step: int = 0
    metrics: dict[str, Any] = field(default_factory=dict)
    progress: int | None = None
    eta: int | None = None
    phase: str = RUNNING
    message: str = ""
    checkpointing: bool | None = None
    latest_uri: str | None = None
    best_uri: str | None = None
    best_metric: float | None = None
    checkpoint_count: int = 0
    #: When the latest checkpoint was reported (epoch seconds on this pod's clock), if known.
    checkpoint_time: float | None = None
    #: The same time as an earlier attempt wrote it, until this run reports a checkpoint.
    checkpoint_time_text: str | None = None
    #: The checkpoint this attempt resumed from, once checked (trainer_runtime/manifests.py).
    resumed_from: str | None = None
    #: Checkpoints passed over (status.checkpoint.rejected, whole), the earlier attempts' first.
    rejected: list[dict[str, Any]] = field(default_factory=list)
    #: Send resumedFrom and rejected with the next patch (they are sent once, not every time).
    resume_pending: bool = False
    #: Send bestURI/bestMetric even when None: the best checkpoint was rejected.
    best_cleared: bool = False
    #: When the latest report of this attempt came (or its training started), epoch seconds.
    progress_time: float | None = None
    #: Reports this attempt made (`step` counts the run's, earlier attempts' included).
    attempt_reports: int = 0
    #: Seconds between this attempt's latest reports (at most hang.INTERVALS_KEPT).
    intervals: list[float] = field(default_factory=list)
    #: status.trainerStatus.hang: where the ranks were at the current stall, or None.
    hang: dict[str, Any] | None = None
    #: status.trainerStatus.stepTime, or None.
    step_time: dict[str, Any] | None = None
    #: trainerStatus keys the next patch sends as null (an earlier attempt's, or a hang over).
    cleared: set[str] = field(default_factory=lambda: {"reportIntervalSeconds", "hang", "stepTime"})


def build_status_patch(state: ReportState, now: float) -> dict[str, Any]:
    """The merge-patch body for ``state``: only the runtime's own two status fields."""
    trainer: dict[str, Any] = {
        "step": state.step,
        "metrics": format_metrics(state.metrics),
        "lastUpdatedTime": rfc3339(now),
        "phase": state.phase,
        "message": state.message[:_MESSAGE_LIMIT],
        "attempt": state.attempt,
    }
    if state.epoch is not None:
        trainer["epoch"] = state.epoch
    if state.progress is not None:
        trainer["progressPercentage"] = state.progress
    if state.eta is not None:
        trainer["estimatedRemainingSeconds"] = state.eta
    if state.checkpointing is not None:
        trainer["checkpointing"] = state.checkpointing
    if state.progress_time is not None:
        trainer["lastProgressTime"] = rfc3339(state.progress_time)
        trainer["attemptReports"] = state.attempt_reports
    interval = hang.median_interval(state.intervals)
    for key, value in (
        ("reportIntervalSeconds", round(interval, 3) if interval is not None else None),
        ("hang", state.hang),
        ("stepTime", state.step_time),
    ):
        if value is not None or key in state.cleared:
            trainer[key] = value
    status: dict[str, Any] = {"trainerStatus": trainer}
    if state.checkpoint_count or state.latest_uri:
        checkpoint: dict[str, Any] = {"count": state.checkpoint_count}
        if state.latest_uri is not None:
            checkpoint["latestURI"] = state.latest_uri
        if state.best_uri is not None:
            checkpoint["bestURI"] = state.best_uri
        if state.best_metric is not None:
            # The score to beat after a retry is read back from here: the shortest text that
            # reads back as the same float (repr), not the 6 digits the other metrics show.
            checkpoint["bestMetric"] = repr(state.best_metric)
        if state.checkpoint_time is not None:
            checkpoint["lastTime"] = rfc3339(state.checkpoint_time)
        elif state.checkpoint_time_text is not None:
            checkpoint["lastTime"] = state.checkpoint_time_text
        status["checkpoint"] = checkpoint
    if state.best_cleared and state.best_uri is None:
        status.setdefault("checkpoint", {}).update({"bestURI": None, "bestMetric": None})
    if state.resume_pending:
        checkpoint = status.setdefault("checkpoint", {})
        checkpoint["resumedFrom"] = state.resumed_from
        checkpoint["resumedAttempt"] = state.attempt
        if state.rejected:
            checkpoint["rejected"] = state.rejected[-REJECTED_KEPT:]
    return {"status": status}


class Reporter:
    """Feeds reports through the throttle to a transport; see the module docstring."""

    def __init__(
        self,
        transport: Transport,
        *,
        attempt: int = 0,
        epochs: int | None = None,
        min_interval: float = DEFAULT_REPORT_MIN_INTERVAL_SECONDS,
        score_attribute: str | None = None,
        score_order: str | None = None,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
        retries: int = 4,
        backoff: float = 0.5,
    ) -> None:
        self.transport = transport
        pod_attempt = attempt_from_env()
        if pod_attempt is not None and pod_attempt != attempt:
            log.warning(
                "the contract says attempt %d, this pod belongs to attempt %d (%s=%s, %s=%s); "
                "reporting as attempt %d",
                attempt,
                pod_attempt,
                RAYJOB_ENV,
                os.environ.get(RAYJOB_ENV, "?"),
                RAYCLUSTER_ENV,
                os.environ.get(RAYCLUSTER_ENV, "?"),
                pod_attempt,
            )
            attempt = pod_attempt
        self.state = ReportState(attempt=attempt)
        self._clock = clock
        self._sleep = sleep
        self._retries = retries
        self._backoff = backoff
        self._throttle = Throttle(min_interval)
        self._progress = ProgressEstimator(epochs, clock())
        self._score_attribute = score_attribute
        self._score_max = (score_order or "max") == "max"
        self._pending = False
        self._last_checkpoint_time: float | None = None
        self._request_seen: str | None = None
        self._request_done: str | None = None
        self._finished = False
        self._last_report: float | None = None
        self.reports = 0
        self.patches_sent = 0
        self.patches_failed = 0
        #: True once the API server refused a report because the job is at another attempt.
        self.superseded = False
        #: The status to continue from when the transport has no TrainJob to read (a local run
        #: continuing its stored last attempt: ``runlog.last_attempt``).
        self.previous: Mapping[str, Any] | None = None

    # -- inputs ----------------------------------------------------------------------------------

    def start(self) -> None:
        """Announce the run, continuing the step and checkpoint counts of an earlier attempt."""
        job = self._read()
        if not job and self.previous:
            job = {"status": self.previous}
        if job:
            status = job.get("status") or {}
            trainer = status.get("trainerStatus") or {}
            ckpt = status.get("checkpoint") or {}
            if isinstance(trainer.get("step"), int):
                self.state.step = trainer["step"]
            if isinstance(ckpt.get("count"), int):
                self.state.checkpoint_count = ckpt["count"]
            for key, attr in (
                ("latestURI", "latest_uri"),
                ("bestURI", "best_uri"),
                ("lastTime", "checkpoint_time_text"),
            ):
                if isinstance(ckpt.get(key), str):
                    setattr(self.state, attr, ckpt[key])
            with contextlib.suppress(KeyError, TypeError, ValueError):
                self.state.best_metric = float(ckpt["bestMetric"])
            if isinstance(ckpt.get("rejected"), list):
                self.state.rejected = [r for r in ckpt["rejected"] if isinstance(r, dict)]
        self.state.progress_time = self._clock()
        self._pending = True
        self.tick()

    def on_report(self, metrics: Mapping[str, Any], checkpoint_uri: str | None = None) -> None:
        """One ``ray.train.report`` (rank 0's metrics; the checkpoint if one was persisted)."""
        now = self._clock()
        self.reports += 1
        s = self.state
        if self._last_report is not None:
            s.intervals.append(max(0.0, now - self._last_report))
            del s.intervals[: -hang.INTERVALS_KEPT]
        self._last_report = now
        self._progress_at(now)
        s.attempt_reports += 1
        s.step += 1
        s.metrics = dict(metrics)
        epoch = finished_epoch(metrics)
        if epoch is not None:
            s.epoch = epoch
            s.progress, s.eta = self._progress.observe(epoch, now)
        if checkpoint_uri is not None:
            s.checkpoint_count += 1
            s.latest_uri = checkpoint_uri
            s.checkpoint_time = now
            self._last_checkpoint_time = now
            if s.checkpointing:
                s.checkpointing = False
                # This request is answered, whatever the two clocks say about its time.
                self._request_done = self._request_seen
            self._track_best(metrics, checkpoint_uri)
        self._pending = True
        self.tick()

    def on_resume(
        self, resumed_from: str | None, rejected: list[dict[str, Any]] | None = None
    ) -> None:
        """The checkpoint this attempt resumes from, and those its check passed over.

        A rejected checkpoint is never the job's latest or best: the latest becomes the one
        resumed from, and a rejected best is cleared until a report beats it again.
        """
        s = self.state
        s.resumed_from = resumed_from
        known = {(r.get("uri"), r.get("attempt")) for r in s.rejected}
        for entry in rejected or []:
            if (entry.get("uri"), entry.get("attempt")) not in known:
                s.rejected.append(dict(entry))
        s.rejected = s.rejected[-REJECTED_KEPT:]
        bad = {r.get("uri") for r in rejected or []}
        if s.latest_uri in bad:
            s.latest_uri = resumed_from
        if s.best_uri in bad:
            s.best_uri, s.best_metric, s.best_cleared = None, None, True
        s.resume_pending = True
        self._pending = True
        self.tick()

    def on_started(self) -> None:
        """Ray Train started a worker group (the first, or a restart after a worker failed):
        the hang watch counts from here, as the controller's does."""
        self._last_report = None
        self.state.intervals = []
        self._progress_at(self._clock())
        self._pending = True
        self.tick()

    def on_hang(self, payload: Mapping[str, Any], stacks_uri: str | None) -> None:
        """The controller's hang watch took every rank's stacks (trainer_runtime/hangwatch.py).

        Kept only when no report came since the stall it was taken for: the controller's time
        of its last progress is on the driver's node clock, a little before the driver's own.
        """
        s = self.state
        last = payload.get("lastProgress")
        timeout = float(payload.get("timeoutSeconds") or 0.0)
        if (
            s.progress_time is not None
            and isinstance(last, int | float)
            and s.progress_time - last > max(1.0, timeout / 2)
        ):
            log.info("stacks of an earlier stall arrived after a report; not reported")
            return
        ranks = [r for r in payload.get("ranks") or [] if isinstance(r, Mapping)]
        groups = [
            {
                "where": where[:1024],
                "waiting": any(bool(r.get("waiting")) for r in ranks if r.get("where") == where),
                "ranks": found,
            }
            for where, found in hang.group_ranks(ranks)
        ][:64]
        suspects = set(hang.suspects(ranks))
        report: dict[str, Any] = {
            "since": rfc3339(s.progress_time if s.progress_time is not None else self._clock()),
            "time": rfc3339(float(payload.get("time") or self._clock())),
            "timeoutSeconds": timeout,
            "workers": payload.get("workers"),
            "groups": groups,
            "suspects": [
                {k: r.get(k) for k in ("rank", "pod", "node") if r.get(k) is not None}
                for r in ranks
                if r.get("rank") in suspects
            ][:64],
        }
        unanswered = [r for r in payload.get("unanswered") or [] if isinstance(r, int)]
        if unanswered:
            report["unanswered"] = unanswered
        if stacks_uri:
            report["stacks"] = stacks_uri
        s.hang = report
        s.cleared.discard("hang")
        self._pending = True
        self.tick()

    def on_steps(self, step_time: Mapping[str, Any] | None) -> None:
        """The ranks' step times of the latest rounds (trainer_runtime/steptime.py); sent with
        the next report."""
        self.state.step_time = dict(step_time) if step_time is not None else None
        if step_time is None:
            self.state.cleared.add("stepTime")

    def _progress_at(self, now: float) -> None:
        s = self.state
        s.progress_time = now
        if s.hang is not None:
            s.hang = None
            s.cleared.add("hang")

    def on_worker_error(self, message: str) -> None:
        """A worker failed; Ray Train may restart the group (FailureConfig), so still Running.

        `message` comes through the report queue as text (`failure.format_worker_errors` makes
        it from the worker exceptions); one over the limit keeps its first line and its end.
        """
        if len(message) > _MESSAGE_LIMIT:
            head, _, rest = message.partition("\n")
            message = failure.fit(head, rest.splitlines(), _MESSAGE_LIMIT)
        self.state.message = message
        self._pending = True
        self.tick()

    def tick(self) -> None:
        """Send the pending report when the throttle allows; call it now and then."""
        if not self._pending or self._finished:
            return
        now = self._clock()
        if not self._throttle.ready(now):
            return
        job = self._read()
        self._check_attempt(job)
        self._check_suspend_request(job)
        self._send(build_status_patch(self.state, now), now)

    def seconds_until_due(self) -> float | None:
        """How long until a pending report may be sent; None when nothing is pending."""
        if not self._pending:
            return None
        return max(0.0, self._throttle.due_at() - self._clock())

    def finish(self, phase: str, message: str, exc: BaseException | None = None) -> None:
        """The terminal outcome: always sent, bypassing the throttle, after any pending report.

        A failure's message is `failure.format_failure` of `exc`, or of the exception being
        handled when this is called from an ``except`` block: the failed workers, the
        exception's type and the last lines of its traceback, within the status' limit (the
        operator classifies the failure from it). Without an exception, `message` as given.
        """
        if self._finished:
            return
        if phase == FAILED:
            exc = exc if exc is not None else sys.exc_info()[1]
            if exc is not None:
                message = failure.format_failure(exc)
        s = self.state
        s.phase = phase
        s.message = message
        if phase == SUCCEEDED:
            if s.progress is not None or self._progress.epochs is not None:
                s.progress = 100
            s.eta = 0
        if s.checkpointing:
            s.checkpointing = False
        now = self._clock()
        self._send(build_status_patch(s, now), now, retries=self._retries * 2)
        self._finished = True

    # -- internals -------------------------------------------------------------------------------

    def _track_best(self, metrics: Mapping[str, Any], uri: str) -> None:
        attr = self._score_attribute
        if attr is None:
            return
        value = metrics.get(attr)
        if isinstance(value, bool) or not isinstance(value, int | float):
            return
        best = self.state.best_metric
        better = best is None or (value > best if self._score_max else value < best)
        if better:
            self.state.best_metric = float(value)
            self.state.best_uri = uri

    def _check_attempt(self, job: Mapping[str, Any] | None) -> None:
        """Stop reporting once the TrainJob is at a later attempt than this one: the operator
        moved on (the attempt failed, or was replaced), and a late report of this attempt must
        not become the job's. The chart's runtime-status policy refuses such a report too; this
        holds where the policy is off."""
        current = ((job or {}).get("status") or {}).get("attempt")
        if self.superseded or isinstance(current, bool) or not isinstance(current, int):
            return
        if current > self.state.attempt:
            self.superseded = True
            log.error(
                "the TrainJob is at attempt %d, so the reports of this attempt (%d) stop and "
                "none of its checkpoints can become the job's",
                current,
                self.state.attempt,
            )

    def _check_suspend_request(self, job: Mapping[str, Any] | None) -> None:
        if not job:
            return
        annotations = (job.get("metadata") or {}).get("annotations") or {}
        requested = annotations.get(CHECKPOINT_REQUEST_ANNOTATION)
        if not requested or requested == self._request_done:
            return
        requested_at = parse_rfc3339(requested)
        when = requested_at.timestamp() if requested_at else None
        if when is None:
            log.warning(
                "ignoring %s=%r: not an RFC 3339 time", CHECKPOINT_REQUEST_ANNOTATION, requested
            )
            return
        last = self._last_checkpoint_time
        # RFC 3339 in the annotation has whole seconds: compare at that resolution.
        if self.state.checkpointing:
            return
        if last is None or when > math.floor(last):
            self.state.checkpointing = True
            self._request_seen = requested
        else:
            # A checkpoint of the request's second or later already answers it: say so, or
            # the operator waits out its whole grace period for an answer that never comes.
            self.state.checkpointing = False
            self._request_done = requested

    def _read(self) -> Mapping[str, Any] | None:
        try:
            return self.transport.read_trainjob()
        except Exception as exc:
            log.warning("reading the TrainJob failed (%s); carrying on", exc)
            return None

    def _send(self, body: dict[str, Any], now: float, retries: int | None = None) -> None:
        self._throttle.mark(now)
        self._pending = False
        if self.superseded:
            return
        attempts = (self._retries if retries is None else retries) + 1
        delay = self._backoff
        for attempt in range(attempts):
            try:
                self.transport.patch_status(body)
                self.patches_sent += 1
                self.state.resume_pending = False
                self.state.best_cleared = False
                trainer = body["status"].get("trainerStatus") or {}
                self.state.cleared -= {k for k in self.state.cleared if k in trainer}
                return
            except Exception as exc:
                if SUPERSEDED in str(getattr(exc, "body", None) or exc):
                    # Final: the job is at a later attempt, which alone may report now.
                    self.superseded = True
                    self.patches_failed += 1
                    log.error(
                        "the TrainJob has moved on from this attempt (%d), so its reports stop "
                        "and none of its checkpoints can become the job's: %s",
                        self.state.attempt,
                        exc,
                    )
                    return
                if attempt == attempts - 1:
                    self.patches_failed += 1
                    log.warning("status patch failed %d times, dropped: %s", attempts, exc)
                    return
                log.info("status patch failed (%s); retrying in %.1f s", exc, delay)
                self._sleep(delay)
                delay = min(delay * 2, 10.0)


class RecordingTransport:
    """Keeps every patch in memory: for tests and for dry runs."""

    def __init__(self, trainjob: Mapping[str, Any] | None = None) -> None:
        self.patches: list[dict[str, Any]] = []
        self.trainjob = trainjob

    def patch_status(self, body: dict[str, Any]) -> None:
        self.patches.append(body)

    def read_trainjob(self) -> Mapping[str, Any] | None:
        return self.trainjob
