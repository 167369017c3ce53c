"""A failing rank holds its exception until its reports were polled (trainer_runtime/flush.py),
tested without Ray: a fake queue state and clock."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from trainer_runtime.flush import FLUSH_CHECK_S, flushed_before_raising, wait_until_polled

pytestmark = pytest.mark.runtime


class Pending:
    """Pending for ``polls`` looks, then empty; counts the looks."""

    def __init__(self, polls: int) -> None:
        self.left = polls
        self.looks = 0

    def pending(self) -> bool:
        self.looks += 1
        if self.left:
            self.left -= 1
            return True
        return False


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_wait_returns_once_nothing_is_pending() -> None:
    state, clock = Pending(polls=3), Clock()
    assert wait_until_polled(state, timeout=10, clock=clock, sleep=clock.sleep)
    assert state.looks == 4
    assert clock.now == pytest.approx(3 * FLUSH_CHECK_S)


def test_wait_gives_up_at_the_timeout() -> None:
    state, clock = Pending(polls=10**9), Clock()
    assert not wait_until_polled(state, timeout=1.0, clock=clock, sleep=clock.sleep)
    assert 1.0 <= clock.now < 1.0 + 2 * FLUSH_CHECK_S


def test_no_state_means_no_wait() -> None:
    assert wait_until_polled(None, timeout=0)


def test_the_same_exception_is_raised_after_the_reports_were_polled() -> None:
    state = Pending(polls=2)
    seen: list[int] = []

    def loop(config: dict[str, Any]) -> None:
        raise ValueError(f"bad batch {config['n']}")

    wrapped = flushed_before_raising(loop, report_state=lambda: state)
    assert wrapped.__name__ == "loop"
    with pytest.raises(ValueError, match="bad batch 3") as raised:
        seen.append(state.looks)
        wrapped({"n": 3})
    assert seen == [0] and state.looks == 3 and state.left == 0
    # The traceback still ends at the loop's own raise.
    assert raised.traceback[-1].name == "loop"


def test_a_loop_that_returns_is_not_held_and_keeps_its_value_and_arity() -> None:
    state = Pending(polls=10**9)

    def loop() -> str:
        return "done"

    wrapped = flushed_before_raising(loop, report_state=lambda: state)
    assert wrapped() == "done"
    assert state.looks == 0
    with pytest.raises(TypeError):
        wrapped({"extra": 1})


def test_a_report_never_polled_is_logged_and_the_error_still_raised(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def loop() -> None:
        raise RuntimeError("boom")

    wrapped = flushed_before_raising(loop, report_state=lambda: Pending(10**9), timeout=0.05)
    with (
        caplog.at_level(logging.WARNING, logger="trainer_runtime.flush"),
        pytest.raises(RuntimeError, match="boom"),
    ):
        wrapped()
    assert "was not polled by Ray Train within 0.05 s and may be lost" in caplog.text
