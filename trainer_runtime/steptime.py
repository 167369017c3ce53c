"""Each rank's step time: how long it works between two reports, not counting its waits on the
other ranks. The rank the others wait for is the straggler (raytrain_contract.hang).

In every training process the runtime times the calls that wait on the other ranks when they
are made from the training thread: the collectives of ``torch.distributed`` (``all_reduce``,
``barrier``, ``broadcast``...; an asynchronous one's ``wait()`` is not seen), ``backward()``
(DistributedDataParallel waits there for the other ranks' gradients) and ``ray.train.report``
itself (Ray Train meets every rank in each report). A rank's busy time in a round is the wall
time from the end of its previous report to the start of this one, less those waits. A rank
slowed before a collective (its data, its forward pass, a throttled CPU) then shows the extra
time as busy, while its peers show it as a wait; its slowness inside backward() itself is not
told apart from the others' wait there.

The samples go to the driver through the report queue, a few at a time (at most one message
per ``SEND_EVERY_S`` per rank), where the reporter pairs the ranks' samples of each round.
``RAYTRAIN_STEP_TIMES=0`` in the pods' environment turns it off.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from raytrain_contract import hang

log = logging.getLogger("trainer_runtime.steptime")

ENABLE_ENV = "RAYTRAIN_STEP_TIMES"
#: A rank sends its samples at most this often (and with its first report).
SEND_EVERY_S = 2.0
#: After this many failed sends in a row (the driver's queue gone), a rank stops sending.
GIVE_UP_AFTER = 3
#: The ``torch.distributed`` calls that wait on the other ranks.
COLLECTIVES = (
    "all_reduce",
    "all_gather",
    "all_gather_into_tensor",
    "all_gather_object",
    "all_to_all",
    "all_to_all_single",
    "barrier",
    "broadcast",
    "broadcast_object_list",
    "gather",
    "gather_object",
    "monitored_barrier",
    "reduce",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "scatter",
    "scatter_object_list",
)


class WaitClock:
    """Seconds the training thread spent in waiting calls since the last ``take``."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._waited = 0.0
        self._depth = 0
        #: The thread whose waits count (the training thread), once known.
        self.thread: int | None = None

    @contextlib.contextmanager
    def waiting(self) -> Iterator[None]:
        """Around a waiting call; nested calls (a collective inside backward) count once."""
        if self.thread is not None and threading.get_ident() != self.thread:
            yield
            return
        self._depth += 1
        start = self._clock() if self._depth == 1 else 0.0
        try:
            yield
        finally:
            self._depth -= 1
            if self._depth == 0:
                with self._lock:
                    self._waited += self._clock() - start

    def take(self) -> float:
        with self._lock:
            waited, self._waited = self._waited, 0.0
        return waited


CLOCK = WaitClock()
_INSTALLED: set[str] = set()


def take_waits() -> float:
    """The training thread's waits since the last call, from this process's clock. The
    callback below calls this, never CLOCK itself: Ray pickles the callback by value with
    copies of the globals it names, and only the module's functions reach the module's clock
    in the worker process."""
    return CLOCK.take()


def _timed(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def timed(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("async_op"):
            return fn(*args, **kwargs)  # returns at once; its wait() is not seen
        with CLOCK.waiting():
            return fn(*args, **kwargs)

    timed.__raytrain_timed__ = True  # type: ignore[attr-defined]
    return timed


def install(thread: int | None = None) -> None:
    """Time the waiting calls of this process (once), counting those of ``thread``."""
    if os.environ.get(ENABLE_ENV, "1") == "0":
        return
    if thread is not None:
        CLOCK.thread = thread
    try:
        import torch
        import torch.autograd
        import torch.distributed as dist
    except ImportError:
        return
    for name in COLLECTIVES:
        fn = getattr(dist, name, None)
        if fn is not None and not getattr(fn, "__raytrain_timed__", False):
            setattr(dist, name, _timed(fn))
            _INSTALLED.add(f"torch.distributed.{name}")
    backward = torch.autograd.backward
    if not getattr(backward, "__raytrain_timed__", False):
        # Tensor.backward() calls torch.autograd.backward by its module attribute.
        torch.autograd.backward = _timed(backward)
        _INSTALLED.add("torch.autograd.backward")


def identity() -> tuple[str | None, str | None]:
    """This process's pod and node, from the environment the operator gives the Ray pods."""
    import socket

    return os.environ.get("RAYTRAIN_POD_NAME") or socket.gethostname(), os.environ.get(
        "RAYTRAIN_NODE_NAME"
    )


class RankSteps:
    """One rank's samples: (report index, busy seconds, wall seconds) per report."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._left: float | None = None  # when the previous report returned
        self._entered: float | None = None  # when the previous report was called
        self.index = 0
        self.pending: list[tuple[int, float, float]] = []
        self._sent: float | None = None

    def enter(self, waited: float) -> None:
        """A report is called; ``waited``: the waits since the previous one returned."""
        now = self._clock()
        self.index += 1
        if self._left is not None and self._entered is not None:
            busy = max(0.0, now - self._left - waited)
            self.pending.append((self.index, round(busy, 4), round(now - self._entered, 4)))
        self._entered = now

    def leave(self) -> None:
        self._left = self._clock()

    def due(self) -> bool:
        if not self.pending:
            return False
        return self._sent is None or self._clock() - self._sent >= SEND_EVERY_S

    def take(self) -> list[tuple[int, float, float]]:
        self._sent = self._clock()
        taken, self.pending = self.pending, []
        return taken


def step_time_callback(queue: Any) -> Any | None:
    """A Ray Train context callback (copied to every worker) that times each rank's steps and
    sends them to the driver through ``queue``; None where this Ray has no such callback."""
    if os.environ.get(ENABLE_ENV, "1") == "0":
        return None
    try:
        from ray.train.v2._internal.execution.callback import TrainContextCallback
    except ImportError:
        return None

    class StepTimes(TrainContextCallback):  # type: ignore[misc]
        def __init__(self) -> None:
            self._steps: RankSteps | None = None
            self._failures = 0

        @contextlib.contextmanager
        def on_report(self) -> Iterator[None]:
            steps = self._steps
            if steps is None:
                steps = self._steps = RankSteps()
                take_waits()
            try:
                steps.enter(take_waits())
            except Exception:  # timing must never break training
                log.exception("could not time a step")
            yield
            try:
                take_waits()  # what the report itself waited is not the next step's
                steps.leave()
                if steps.due() and self._failures < GIVE_UP_AFTER:
                    self._send(steps)
                    self._failures = 0
            except Exception:
                self._failures += 1
                steps.take()  # what could not be sent is dropped, not sent twice
                if self._failures == GIVE_UP_AFTER:
                    log.exception(
                        "could not send the step times %d times; this rank stops sending them",
                        GIVE_UP_AFTER,
                    )

        def _send(self, steps: RankSteps) -> None:
            import ray.train

            context = ray.train.get_context()
            pod, node = identity()
            payload = {
                "rank": context.get_world_rank(),
                "workers": context.get_world_size(),
                "pod": pod,
                "node": node,
                "samples": steps.take(),
            }
            queue.put_nowait(("steps", payload, None))

    return StepTimes()


# -- on the driver --------------------------------------------------------------------------------


class StepRounds:
    """The ranks' samples paired by report round, and the skew of the latest rounds.

    A round is complete once every rank of the group sent its sample of it; older rounds still
    incomplete then never will be (a rank left the group) and are dropped. A rank whose report
    index goes back started again (Ray Train restarted the worker group): the table starts
    anew.
    """

    #: Incomplete rounds kept at most (a rank that stopped sending).
    PENDING_KEPT = 200

    def __init__(self) -> None:
        self.workers: int | None = None
        self._samples: dict[int, dict[int, tuple[float, float]]] = {}
        self._last: dict[int, int] = {}
        self._who: dict[int, tuple[str | None, str | None]] = {}
        self.rounds: list[hang.RoundSkew] = []

    def reset(self) -> None:
        self._samples, self._last, self._who, self.rounds = {}, {}, {}, []

    def add(self, payload: Mapping[str, Any]) -> list[tuple[int, dict[int, tuple[float, float]]]]:
        """One rank's message; the rounds it completed, oldest first (index, rank -> (busy,
        wall))."""
        rank, workers = payload.get("rank"), payload.get("workers")
        if not isinstance(rank, int) or not isinstance(workers, int) or workers < 1:
            return []
        samples = [s for s in payload.get("samples") or [] if len(s) == 3]
        if workers != self.workers or (
            samples and rank in self._last and int(samples[0][0]) <= self._last[rank]
        ):
            self.reset()
            self.workers = workers
        self._who[rank] = (payload.get("pod"), payload.get("node"))
        for index, busy, wall in samples:
            self._samples.setdefault(int(index), {})[rank] = (float(busy), float(wall))
            self._last[rank] = max(self._last.get(rank, 0), int(index))
        done = []
        for index in sorted(self._samples):
            row = self._samples[index]
            if len(row) < workers:
                continue
            for older in [i for i in self._samples if i <= index]:
                row_i = self._samples.pop(older)
                if older == index:
                    done.append((index, row_i))
            skew = hang.round_skew(row)
            if skew is not None:
                self.rounds.append(skew)
                del self.rounds[: -hang.STRAGGLER_REPORTS]
        for index in sorted(self._samples)[: -self.PENDING_KEPT]:
            del self._samples[index]
        return done

    def status(self) -> dict[str, Any] | None:
        """status.trainerStatus.stepTime from the latest rounds, or None before one."""
        if not self.rounds:
            return None
        latest = self.rounds[-1]
        pod, node = self._who.get(latest.rank, (None, None))
        slowest: dict[str, Any] = {"rank": latest.rank, "busySeconds": round(latest.busy, 3)}
        if pod:
            slowest["pod"] = pod
        if node:
            slowest["node"] = node
        return {
            "reports": len(self.rounds),
            "wallSeconds": round(latest.wall, 3),
            "medianBusySeconds": round(latest.median_busy, 3),
            "slowest": slowest,
            "skewPercent": round(100 * latest.skew, 1),
            "straggler": hang.straggler(self.rounds) is not None,
        }
