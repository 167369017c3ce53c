"""When training counts as hung, where each rank was, and which rank is a straggler: shared by
the runtime (the watch in Ray Train's controller, the driver's reporter) and the operator (the
Hung and Straggling conditions), so both sides decide on the same numbers. Pure, standard
library only.

A job makes progress while its reports come. The timeout is ``spec.failure.hangTimeoutSeconds``
when set (0 turns the watch off); unset, it is derived from the reports this attempt made:
``DEFAULT_INTERVAL_FACTOR`` times their median interval, never under ``DEFAULT_FLOOR_SECONDS``.
Until an attempt has made two reports it has no interval, and the start-up default
``DEFAULT_STARTUP_SECONDS`` applies (importing, loading data, compiling).

When the timeout passes, the runtime asks every training process for its stacks and says where
each rank's training thread is (`where`); ranks waiting on their peers (in a collective, or in
``ray.train.report``, which meets every rank) are told apart from those that are not: a rank
that is not waiting while the others wait for it is the likely cause (`suspects`).

A straggler is the rank the others wait for, report after report. Each rank measures its busy
time between two reports: the wall time less what it spent waiting on its peers (collectives,
``backward()``, ``ray.train.report``). The slowest rank's busy time less the median rank's,
as a share of the step's wall time, is the skew; a rank is named once it is the slowest in
each of the last ``STRAGGLER_REPORTS`` reports with a skew of at least ``STRAGGLER_SKEW`` in
every one.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: The derived timeout is this many median report intervals...
DEFAULT_INTERVAL_FACTOR = 10.0
#: ...and never less than this many seconds.
DEFAULT_FLOOR_SECONDS = 600.0
#: Before an attempt has two reports (so no interval), the derived timeout is this.
DEFAULT_STARTUP_SECONDS = 1800.0
#: How many of the latest report intervals the median is taken over.
INTERVALS_KEPT = 20
#: Past the timeout, the operator waits at most this long for the ranks' stacks before it acts
#: without them (the runtime's watch fires at the same timeout, a little earlier).
STACKS_WAIT_SECONDS = 60.0
#: A rank's stacks are given this long to come back; one that does not answer is named so.
STACKS_ANSWER_SECONDS = 30.0

#: What onHang may say (spec.failure.onHang): restart from the latest checkpoint (the default),
#: fail the job, or only report the condition.
ON_HANG_RESTART, ON_HANG_FAIL, ON_HANG_REPORT = "Restart", "Fail", "Report"
ON_HANG_VALUES = (ON_HANG_RESTART, ON_HANG_FAIL, ON_HANG_REPORT)

#: A straggler is named when its skew is at least this share of the step's wall time...
STRAGGLER_SKEW = 0.2
#: ...in each of this many consecutive reports, and it is the slowest rank in all of them.
STRAGGLER_REPORTS = 5


def median_interval(intervals: Sequence[float]) -> float | None:
    """The median of the latest report intervals, or None with none."""
    kept = [float(i) for i in intervals[-INTERVALS_KEPT:] if i >= 0]
    return statistics.median(kept) if kept else None


def timeout_seconds(configured: float | None, interval: float | None) -> float | None:
    """The hang timeout in force: ``configured`` when set (None when it is 0: off), else the
    derived default from the median report ``interval`` (None before two reports)."""
    if configured is not None:
        return float(configured) if configured > 0 else None
    if interval is None:
        return DEFAULT_STARTUP_SECONDS
    return max(DEFAULT_FLOOR_SECONDS, DEFAULT_INTERVAL_FACTOR * interval)


def describe_timeout(configured: float | None, interval: float | None) -> str:
    """Where the timeout in force comes from, in words."""
    value = timeout_seconds(configured, interval)
    if value is None:
        return "the hang watch is off (spec.failure.hangTimeoutSeconds 0)"
    if configured is not None:
        return f"spec.failure.hangTimeoutSeconds {configured:g}"
    if interval is None:
        return (
            f"the start-up default of {int(DEFAULT_STARTUP_SECONDS)} s (no report interval seen "
            "yet; set spec.failure.hangTimeoutSeconds to choose)"
        )
    return (
        f"the default of {DEFAULT_INTERVAL_FACTOR:g} times the median report interval "
        f"{interval:.3g} s, at least {int(DEFAULT_FLOOR_SECONDS)} s (set "
        "spec.failure.hangTimeoutSeconds to choose)"
    )


# -- where a rank is stuck --------------------------------------------------------------------

#: Path parts of the libraries whose calls wait on the other ranks, and how a place is named.
_COLLECTIVES = ("torch/distributed/",)
_REPORTS = ("ray/train/",)
_DATA = ("torch/utils/data/", "ray/data/")
_BACKWARD = ("torch/autograd/",)
#: Frames of the runtime's own wrappers and timers, and of the libraries' decorators around
#: their calls (torch.distributed logs each collective through one), never the place a rank is
#: stuck in.
_RUNTIME = ("trainer_runtime/", "torch/distributed/c10d_logger.py")
#: The runtime's wrappers around the loop (raytrain_contract.frames has them all).
_LOOP_WRAPPERS = ("trainer_runtime/entrypoint.py", "trainer_runtime/hangwatch.py")


def _path(frame: Mapping[str, Any]) -> str:
    return str(frame.get("file") or "").replace("\\", "/")


def _short(path: str) -> str:
    """A frame's file as people read it: from the package directory on, or its last two
    parts (``train.py`` of ``/app/examples/x/train.py`` reads ``x/train.py``)."""
    for marker in ("/site-packages/", "/dist-packages/"):
        if marker in path:
            return path.split(marker, 1)[1]
    parts = [p for p in path.split("/") if p]
    return "/".join(parts[-2:]) if parts else "?"


def _site(frame: Mapping[str, Any]) -> str:
    return f"{_short(_path(frame))}:{frame.get('line', '?')}"


def _in(frame: Mapping[str, Any], parts: Sequence[str]) -> bool:
    path = _path(frame)
    return any(part in path for part in parts)


@dataclass(frozen=True)
class Place:
    """Where a rank's training thread is: in words, and whether it waits on its peers there."""

    where: str
    waiting: bool


def place(frames: Sequence[Mapping[str, Any]]) -> Place:
    """Where a training thread is stuck, from its frames (outermost first, as a traceback has
    them), each ``{"file", "line", "function", "source", "library"}`` (``library``: the frame
    is in an installed package or the standard library, not the job's own code).

    A call into a library that waits on the other ranks names that call (the outermost frame of
    the library: the function the loop called) and the loop's line that called it; otherwise
    the innermost frame of the job's own code, with its source line.
    """
    # The loop's own frames begin with its first frame outside the libraries (or, for a loop
    # installed as a package, after the runtime's wrappers): what comes before is Ray's thread
    # that runs the loop, never the place it is stuck in.
    start = next((i for i, f in enumerate(frames) if not f.get("library")), None)
    if start is None:
        wrappers = [i for i, f in enumerate(frames) if _in(f, _LOOP_WRAPPERS)]
        start = wrappers[-1] + 1 if wrappers else 0
    kept = [f for f in frames[start:] if not _in(f, _RUNTIME)]
    if not kept:
        return Place("at an unknown place (no frames)", False)
    for parts, words, waiting in (
        (_COLLECTIVES, "in torch.distributed {name}", True),
        (_REPORTS, "in ray.train {name}, which waits for every rank's report", True),
        (_DATA, "in the data loader ({module} {name})", False),
        (_BACKWARD, "in backward() ({module} {name})", False),
    ):
        for i, frame in enumerate(kept):
            if not _in(frame, parts):
                continue
            name = str(frame.get("function") or "?")
            module = _short(_path(frame)).rsplit("/", 1)[0].replace("/", ".")
            text = words.format(name=name, module=module)
            caller = next((f for f in reversed(kept[:i]) if not f.get("library")), None)
            if caller is not None:
                text += f", called at {_site(caller)} in {caller.get('function') or '?'}"
            return Place(text, waiting)
    own = [f for f in kept if not f.get("library")]
    frame = own[-1] if own else kept[-1]
    text = f"at {_site(frame)} in {frame.get('function') or '?'}"
    source = str(frame.get("source") or "").strip()
    if source:
        text += f" ({source[:120]})"
    return Place(text, False)


def _ranks_text(ranks: Sequence[int]) -> str:
    ordered = sorted(ranks)
    if len(ordered) == 1:
        return f"rank {ordered[0]}"
    return "ranks " + ", ".join(str(r) for r in ordered[:-1]) + f" and {ordered[-1]}"


def group_ranks(ranks: Iterable[Mapping[str, Any]]) -> list[tuple[str, list[int]]]:
    """The ranks grouped by where each one is stuck (their ``where``), the smallest group first
    (the odd one out is usually the cause), and of groups as large, those not waiting on their
    peers first. Each entry is (where, ranks)."""
    groups: dict[str, list[int]] = {}
    waiting: dict[str, bool] = {}
    for entry in ranks:
        rank = entry.get("rank")
        if not isinstance(rank, int) or isinstance(rank, bool):
            continue
        where = str(entry.get("where") or "at an unknown place")
        groups.setdefault(where, []).append(rank)
        waiting[where] = waiting.get(where, False) or bool(entry.get("waiting"))
    return sorted(
        ((where, sorted(found)) for where, found in groups.items()),
        key=lambda g: (len(g[1]), waiting[g[0]], g[1]),
    )


def describe_ranks(ranks: Iterable[Mapping[str, Any]], workers: int | None = None) -> str:
    """What every rank was doing, grouped: "rank 1 at train.py:31 in loop (time.sleep(60));
    ranks 0 and 2 in torch.distributed all_reduce, called at ...". With ``workers``, the ranks
    that sent no stacks are named too."""
    listed = list(ranks)
    parts = [f"{_ranks_text(found)} {where}" for where, found in group_ranks(listed)]
    if workers is not None:
        seen = {e.get("rank") for e in listed}
        missing = [r for r in range(workers) if r not in seen]
        if missing:
            parts.append(f"{_ranks_text(missing)} sent no stacks")
    return "; ".join(parts)


def suspects(ranks: Iterable[Mapping[str, Any]]) -> list[int]:
    """The ranks that are likely the cause: those not waiting on their peers while others
    wait (a rank stuck in its own code, or in its data loader, holds up every rank in a
    collective). Empty when that does not single any out (all wait, or none does)."""
    listed = [
        e for e in ranks if isinstance(e.get("rank"), int) and not isinstance(e.get("rank"), bool)
    ]
    waiting = [e for e in listed if e.get("waiting")]
    others = sorted(int(e["rank"]) for e in listed if not e.get("waiting"))
    if waiting and others:
        return others
    return []


# -- stragglers ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class RoundSkew:
    """One report round: the slowest rank, its busy seconds, the median rank's, the step's
    wall seconds (the median over ranks) and the skew."""

    rank: int
    busy: float
    median_busy: float
    wall: float

    @property
    def skew(self) -> float:
        """The slowest rank's busy time over the median's, as a share of the step's wall time."""
        if self.wall <= 0:
            return 0.0
        return max(0.0, self.busy - self.median_busy) / self.wall


def round_skew(steps: Mapping[int, tuple[float, float]]) -> RoundSkew | None:
    """The skew of one round from each rank's (busy, wall) seconds; None below two ranks."""
    if len(steps) < 2:
        return None
    slowest = max(sorted(steps), key=lambda r: steps[r][0])
    busy = [b for b, _ in steps.values()]
    wall = statistics.median(w for _, w in steps.values())
    return RoundSkew(slowest, steps[slowest][0], statistics.median(busy), wall)


def straggler(
    rounds: Sequence[RoundSkew],
    threshold: float = STRAGGLER_SKEW,
    reports: int = STRAGGLER_REPORTS,
) -> RoundSkew | None:
    """The straggler of the latest rounds, oldest first: the round that names it (its latest),
    when one rank was the slowest in each of the last ``reports`` rounds with a skew of at
    least ``threshold``; else None."""
    last = list(rounds[-reports:])
    if len(last) < reports:
        return None
    if len({r.rank for r in last}) != 1 or any(r.skew < threshold for r in last):
        return None
    return last[-1]
