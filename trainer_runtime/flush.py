"""A rank's last report reaches Ray Train's controller before its error does.

Ray Train 2.60 keeps each worker's unpolled report in a one-slot queue and counts a report
(its metrics, its checkpoint) only once every rank's report of that round has been polled. The
controller polls every worker at once and acts on the first error it sees. So a rank that
reports and then raises before the next poll can race its peers: when the poll finds the
error and the report of the failing rank but not yet the report of a peer that was a few
milliseconds slower out of the same ``ray.train.report`` call, the round is never complete, the
controller tears the group down, and the report is gone from the status and the run log (and
its checkpoint is never registered: the next attempt resumes from the one before).

``flushed_before_raising`` wraps the training function: when it raises, the rank first waits
until the controller has polled every report it made (its queue empty, no upload of an
asynchronous checkpoint still on the way), at most ``FLUSH_TIMEOUT_S``, and then raises the
same exception. A peer that is still in the same report call gets a full poll interval to
catch up. The wrapper changes nothing on the path without an error.

``report_commit_callback`` does the same after every report: a rank goes on training only once
the controller has taken its report. A checkpoint counts once every rank's report of its round
is taken, and every rank waits for that, so a worker killed later (a pod deleted, an
out-of-memory kill) can no longer take an unpolled checkpoint with it: the work lost is at most
one checkpoint interval, where it was up to one poll more. Every rank waits, not only those
that pass a checkpoint: in the usual loop rank 0 alone passes one, and the round needs the
reports of the others too. The cost is the wait for the next poll after each report: nothing
when reports come faster than the poll (Ray's one-slot queue already holds the next report
until the last is taken), otherwise up to one poll per report (the runtime polls every 0.1 s
for up to 4 workers, at most every 0.5 s: trainer.poll_interval); benchmarks/recovery.py and
benchmarks/runtime_vs_torchrun.py measure it. Asynchronous
uploads (``checkpoint_upload_mode=ASYNC``) are not waited for. ``RAYTRAIN_REPORT_COMMIT=0`` in
the pods' environment turns the wait off.

The queue and the report counters are Ray Train's internal API: where they are not there,
neither the wrapper nor the callback waits (tests/unit/test_dependency_floors.py checks them).
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from trainer_runtime.entrypoint import wrap_loop

log = logging.getLogger("trainer_runtime.flush")

#: The longest a failing rank waits for its reports to be polled (several polls even at Ray's
#: default 2 s interval); past it the error is raised as it is.
FLUSH_TIMEOUT_S = 30.0
#: How often the waiting rank looks at its queue.
FLUSH_CHECK_S = 0.02


class ReportState(Protocol):
    """What a rank's flush looks at: its reports made, put and still unpolled."""

    def pending(self) -> bool: ...


class CommitState(ReportState, Protocol):
    """And whether a report is made but not yet put on the queue (an asynchronous upload)."""

    def not_put(self) -> bool: ...


class _RayReportState:
    def __init__(self, context: Any) -> None:
        self._context = context

    def not_put(self) -> bool:
        """A report made whose (asynchronous) upload has not put it on the queue yet."""
        ctx = self._context
        return int(getattr(ctx, "report_call_index", 0)) > int(
            getattr(ctx, "current_report_index", 0)
        )

    def pending(self) -> bool:
        # Or one put and not yet taken by the controller's poll (poll_status calls task_done).
        return self.not_put() or int(self._context.get_result_queue().unfinished_tasks) > 0


def _ray_report_state() -> _RayReportState | None:
    try:
        from ray.train.v2._internal.execution.context import get_train_context

        context: Any = get_train_context()
        context.get_result_queue()
    except Exception:
        return None
    return _RayReportState(context)


def wait_until_polled(
    state: ReportState | None,
    timeout: float = FLUSH_TIMEOUT_S,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> bool:
    """Wait until ``state`` has nothing pending; False when ``timeout`` passed first."""
    if state is None:
        return True
    deadline = clock() + timeout
    while state.pending():
        if clock() >= deadline:
            return False
        sleep(FLUSH_CHECK_S)
    return True


def flushed_before_raising(
    train_fn: Callable[..., Any],
    report_state: Callable[[], ReportState | None] = _ray_report_state,
    timeout: float = FLUSH_TIMEOUT_S,
) -> Callable[..., Any]:
    """``train_fn`` (same arity and name) whose exceptions wait for its reports to be polled."""

    def guarded(run: Callable[[], Any]) -> Any:
        try:
            return run()
        except Exception:
            if not wait_until_polled(report_state(), timeout):
                log.warning(
                    "the training function raised; its last report was not polled by Ray "
                    "Train within %g s and may be lost",
                    timeout,
                )
            raise

    return wrap_loop(train_fn, guarded)


#: ``RAYTRAIN_REPORT_COMMIT=0`` turns the wait after each report off.
COMMIT_ENV = "RAYTRAIN_REPORT_COMMIT"


@contextlib.contextmanager
def committed_report(
    report_state: Callable[[], CommitState | None] = _ray_report_state,
    timeout: float = FLUSH_TIMEOUT_S,
) -> Iterator[None]:
    """Around one ``ray.train.report``: afterwards, once it is on the queue (not an
    asynchronous upload still on its way), wait until the controller has taken it."""
    state = report_state()
    yield
    if state is None or os.environ.get(COMMIT_ENV, "1") == "0" or state.not_put():
        return
    if not wait_until_polled(state, timeout):
        log.warning(
            "a report was not polled by Ray Train within %g s; training goes on and the "
            "report (and its checkpoint) counts once it is polled",
            timeout,
        )


def report_commit_callback() -> Any | None:
    """A Ray Train context callback (copied to every worker) that runs each report inside
    ``committed_report``; None where this Ray has no such callback."""
    try:
        from ray.train.v2._internal.execution.callback import TrainContextCallback
    except ImportError:
        return None

    class ReportCommit(TrainContextCallback):  # type: ignore[misc]
        @contextlib.contextmanager
        def on_report(self) -> Iterator[None]:
            with committed_report():
                yield

    return ReportCommit()
