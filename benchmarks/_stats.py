"""What every benchmark prints next to its figures: the machine's load and the spread of runs.

The load average and CPU count are read from the OS when the script runs (``os.getloadavg``,
``os.cpu_count`` and the CPUs this process may use), so a pasted result carries the conditions
it was measured under.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Sequence


def load_avg() -> str:
    """The 1, 5 and 15 minute load averages, as the OS reports them."""
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"


def machine() -> str:
    """CPU count (and the CPUs this process may run on) plus the load average, one line."""
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    cpus = f"{os.cpu_count()} CPUs" + (f" ({usable} usable)" if usable is not None else "")
    return f"{cpus}, load average (1/5/15 min) {load_avg()}"


def stamp() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())


def quartiles(values: Sequence[float]) -> tuple[float, float]:
    """The first and third quartiles (inclusive method); both equal the value when n == 1."""
    if len(values) < 2:
        return values[0], values[0]
    q = statistics.quantiles(values, n=4, method="inclusive")
    return q[0], q[2]


def summary(values: Sequence[float], fmt: str = "{:.3f}") -> str:
    """``median M (min A, IQR Q1-Q3, max B; n=N)`` for a list of per-run figures."""
    if not values:
        return "no runs"
    q1, q3 = quartiles(values)
    f = fmt.format
    return (
        f"median {f(statistics.median(values))} (min {f(min(values))}, "
        f"IQR {f(q1)}-{f(q3)}, max {f(max(values))}; n={len(values)})"
    )
