"""Waiting on a condition with a deadline: the only polling the integration tests do."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

T = TypeVar("T")

# Event().wait() is an interruptible pause between polls (and not a sleep in a test body).
_PAUSE = threading.Event()


class WaitTimeout(AssertionError):
    """The condition did not hold before the deadline."""


#: Checks every wait runs between its polls, at most once per GUARD_INTERVAL seconds. A fixture
#: installs one (``guarded``) that raises when something every wait depends on is broken (the
#: chart's operator pod crash-looping), so each wait fails at once and names the cause instead
#: of running to its own deadline.
_GUARDS: list[Callable[[], None]] = []
GUARD_INTERVAL = 10.0


@contextmanager
def guarded(check: Callable[[], None]) -> Iterator[None]:
    """Run ``check`` from every ``wait_for`` inside the block; it raises to end the wait."""
    _GUARDS.append(check)
    try:
        yield
    finally:
        _GUARDS.remove(check)


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
    guarded_at = time.monotonic()
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
        if _GUARDS and time.monotonic() - guarded_at >= GUARD_INTERVAL:
            guarded_at = time.monotonic()
            for check in list(_GUARDS):
                check()
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise WaitTimeout(
                f"timed out after {timeout:g}s waiting for {what}; last seen: {last!r}"
            )
        _PAUSE.wait(min(interval, remaining))
