"""Waiting on a condition with a deadline: the only polling the integration tests do."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

# Event().wait() is an interruptible pause between polls (and not a sleep in a test body).
_PAUSE = threading.Event()


class WaitTimeout(AssertionError):
    """The condition did not hold before the deadline."""


def wait_for(
    predicate: Callable[[], T | None],
    timeout: float,
    what: str,
    *,
    interval: float = 0.25,
    ignore: tuple[type[BaseException], ...] = (),
) -> T:
    """Poll ``predicate`` until it returns a truthy value, and return that value.

    Fails with ``WaitTimeout`` naming ``what`` (and the last value seen, or the last ignored
    exception) once ``timeout`` seconds have passed. Exceptions listed in ``ignore`` count as
    "not yet"; any other exception propagates at once.
    """
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        try:
            value = predicate()
        except ignore as exc:
            last = exc
        else:
            if value:
                return value
            last = value
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise WaitTimeout(
                f"timed out after {timeout:g}s waiting for {what}; last seen: {last!r}"
            )
        _PAUSE.wait(min(interval, remaining))
