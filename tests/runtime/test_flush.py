"""A failing rank holds its exception until its reports were polled (trainer_runtime/flush.py),
tested without Ray: a fake queue state and clock."""

from __future__ import annotations

import logging
import os
from typing import Any

import pytest
from _clock import FakeClock

from trainer_runtime.flush import (
    COMMIT_ENV,
    FLUSH_CHECK_S,
    committed_report,
    flushed_before_raising,
    report_commit_callback,
    wait_until_polled,
)

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


def test_wait_returns_once_nothing_is_pending() -> None:
    state, clock = Pending(polls=3), FakeClock()
    assert wait_until_polled(state, timeout=10, clock=clock, sleep=clock.sleep)
    assert state.looks == 4
    assert clock.now == pytest.approx(3 * FLUSH_CHECK_S)


def test_wait_gives_up_at_the_timeout() -> None:
    state, clock = Pending(polls=10**9), FakeClock()
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


class FakeContext:
    """The parts of a worker's report state committed_report reads; ``report`` plays
    ``ray.train.report`` (put, or an asynchronous upload still on its way), ``pending`` the
    controller's poll, which takes the queued report at the ``poll_after_looks``-th look."""

    def __init__(self, poll_after_looks: int | None = None) -> None:
        self.queued = 0
        self.made = 0
        self.put = 0
        self.looks = 0
        self.poll_after_looks = poll_after_looks

    def report(self, put: bool = True) -> None:
        self.made += 1
        if put:
            self.put += 1
            self.queued += 1

    def not_put(self) -> bool:
        return self.made > self.put

    def pending(self) -> bool:
        self.looks += 1
        if self.poll_after_looks is not None and self.looks >= self.poll_after_looks:
            self.queued = 0
        return self.not_put() or self.queued > 0


def test_a_report_returns_only_once_polled() -> None:
    ctx = FakeContext(poll_after_looks=3)
    with committed_report(report_state=lambda: ctx, timeout=5):
        ctx.report()
    assert ctx.queued == 0 and ctx.looks == 3


def test_an_asynchronous_upload_is_not_waited_for() -> None:
    ctx = FakeContext(poll_after_looks=1)
    with committed_report(report_state=lambda: ctx, timeout=5):
        ctx.report(put=False)
    assert ctx.looks == 0


def test_a_report_that_raises_is_not_waited_for() -> None:
    ctx = FakeContext()
    with pytest.raises(ValueError), committed_report(report_state=lambda: ctx, timeout=5):
        raise ValueError("metrics hold a tensor")
    assert ctx.looks == 0


def test_the_wait_can_be_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(COMMIT_ENV, "0")
    ctx = FakeContext()
    with committed_report(report_state=lambda: ctx, timeout=5):
        ctx.report()
    assert ctx.looks == 0 and ctx.queued == 1


def test_a_report_never_polled_is_logged_and_training_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ctx = FakeContext()
    with (
        caplog.at_level(logging.WARNING, logger="trainer_runtime.flush"),
        committed_report(report_state=lambda: ctx, timeout=0.05),
    ):
        ctx.report()
    assert "not polled by Ray Train within 0.05 s; training goes on" in caplog.text


def test_the_callback_is_a_train_context_callback_ray_copies_to_workers() -> None:
    pytest.importorskip("ray")
    import pickle

    from ray import cloudpickle
    from ray.train.v2._internal.execution.callback import TrainContextCallback

    callback = report_commit_callback()
    assert isinstance(callback, TrainContextCallback)
    copy = pickle.loads(cloudpickle.dumps(callback))
    with copy.on_report():  # outside a worker: no report state, nothing to wait for
        pass


@pytest.mark.parametrize(
    ("workers", "seconds"),
    [(1, 0.1), (2, 0.1), (4, 0.1), (8, 0.2), (16, 0.4), (20, 0.5), (256, 0.5)],
)
def test_the_poll_is_short_for_a_small_group_and_grows_to_half_a_second(
    workers: int, seconds: float
) -> None:
    pytest.importorskip("ray")
    from trainer_runtime.trainer import poll_interval

    assert poll_interval(workers) == pytest.approx(seconds)


def test_the_pods_environment_sets_the_poll(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("ray")
    from trainer_runtime.trainer import set_poll_interval

    monkeypatch.delenv("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", raising=False)
    set_poll_interval(8)
    assert os.environ["RAY_TRAIN_HEALTH_CHECK_INTERVAL_S"] == "0.2"
    monkeypatch.setenv("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", "2")
    set_poll_interval(8)
    assert os.environ["RAY_TRAIN_HEALTH_CHECK_INTERVAL_S"] == "2"
