"""A builder that breaks is the operator's fault, not the user's: the condition says so.

A builder raises `SpecError` on purpose for a spec it cannot use (the message names the field);
the TrainJob then stalls with `InvalidSpec`. Any other exception (KeyError, TypeError...) is a
bug in the operator: the TrainJob stalls with `OperatorError`, the message says whose fault it
is and asks for a bug report with the operator's log, the traceback is logged once, and the
next pass builds again.
"""

from __future__ import annotations

import logging
from typing import Any

import kopf
import pytest
from _factories import manifest, meta, trainjob

from raytrain_operator import k8s
from raytrain_operator.builders import children
from raytrain_operator.builders.errors import SpecError
from raytrain_operator.handlers import apply, reconcile
from raytrain_operator.handlers.state import PassState
from raytrain_operator.status import machine as m
from raytrain_operator.status.conditions import find

LOG = logging.getLogger("raytrain_operator.test")


def stalled(result: reconcile.PassResult) -> dict[str, Any]:
    found = find(result.plan.status["conditions"], "Stalled")
    assert found is not None, result.plan.status["conditions"]
    return dict(found)


def raising(exc: BaseException, calls: list[int] | None = None) -> Any:
    def broken(*args: Any, **kwargs: Any) -> Any:
        if calls is not None:
            calls.append(1)
        raise exc

    return broken


def tracebacks(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.exc_info is not None]


# ------------------------------------------------------------------ the spec check of a pass


@pytest.mark.parametrize(
    "exc",
    [KeyError("workers"), TypeError("unhashable type: 'dict'"), ValueError("bad int")],
)
def test_a_builder_bug_is_an_operator_error(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, exc: Exception
) -> None:
    monkeypatch.setattr(reconcile, "build_rayjob", raising(exc))
    caplog.set_level(logging.ERROR)
    result = reconcile.reconcile(PassState(), "test", manifest(), LOG)
    cond = stalled(result)
    assert cond["reason"] == "OperatorError"
    message = cond["message"]
    assert type(exc).__name__ in message and str(exc) in message
    assert "bug in the operator" in message and "operator's log" in message
    assert result.plan.phase == m.STALLED  # not Failed: nothing of the job is lost
    assert result.due_in is not None  # the engine queues it again
    logged = tracebacks(caplog)
    assert len(logged) == 1 and "team-a/digits" in logged[0].getMessage()


def test_a_builder_bug_is_retried_and_its_traceback_logged_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    calls: list[int] = []
    monkeypatch.setattr(reconcile, "build_rayjob", raising(KeyError("workers"), calls))
    caplog.set_level(logging.ERROR)
    state = PassState()
    for _ in range(3):
        result = reconcile.reconcile(state, "test", manifest(), LOG)
        assert stalled(result)["reason"] == "OperatorError"
    assert len(calls) == 3  # every pass builds again: a bug is not kept as the spec's verdict
    assert len(tracebacks(caplog)) == 1


def test_a_deliberate_spec_error_stays_invalid_spec(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(reconcile, "build_rayjob", raising(SpecError("spec.x: not usable")))
    caplog.set_level(logging.ERROR)
    result = reconcile.reconcile(PassState(), "test", manifest(), LOG)
    cond = stalled(result)
    assert cond["reason"] == "InvalidSpec"
    assert cond["message"] == "spec.x: not usable; fix this field of the TrainJob"
    assert tracebacks(caplog) == []


def test_a_bad_quantity_is_still_the_users_spec_error() -> None:
    scaling = {"numWorkers": 2, "resourcesPerWorker": {"cpu": "1", "memory": "lots"}}
    tj, problem = reconcile.parse(manifest(scaling=scaling))
    assert tj is not None and problem is not None and "memory" in problem


# ------------------------------------------------------------------ the children of an attempt


def ensure(state: PassState | None = None) -> Any:
    return apply.run(
        state or PassState(),
        [m.EnsureChildren(0, False)],
        trainjob(),
        meta(),
        kopf.Patch(),
        None,
        LOG,
    )


@pytest.mark.usefixtures("no_fence")
def test_a_builder_bug_at_create_time_is_an_operator_error(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(children, "build_contract_configmap", raising(KeyError("resume")))
    caplog.set_level(logging.ERROR)
    with pytest.raises(apply.Rejected) as caught:
        ensure()
    assert caught.value.reason == "OperatorError"
    assert "KeyError" in caught.value.message and "bug in the operator" in caught.value.message
    logged = tracebacks(caplog)
    assert len(logged) == 1 and "team-a/digits" in logged[0].getMessage()
    p = m.plan(
        m.Observation(
            meta=meta(),
            trainjob=trainjob(),
            status={"attempt": 0},
            now=m.now_utc(),
            rejected=(caught.value.reason, caught.value.message),
        )
    )
    assert p.phase == m.STALLED and p.recheck_after is not None


@pytest.mark.usefixtures("no_fence")
def test_a_spec_error_at_create_time_stays_invalid_spec(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(children, "build_contract_configmap", raising(SpecError("spec.y: no")))
    with pytest.raises(apply.Rejected) as caught:
        ensure()
    assert caught.value.reason == "InvalidSpec"
    assert caught.value.message == "spec.y: no; fix this field of the TrainJob"


@pytest.mark.usefixtures("no_fence")
def test_an_api_server_gone_is_not_a_spec_problem(monkeypatch: pytest.MonkeyPatch) -> None:
    """A connection cut while the children are written is for reconcile's retry, not a
    condition about the spec or the operator's code."""
    monkeypatch.setattr(k8s, "create", raising(ConnectionResetError("reset by peer")))
    with pytest.raises(ConnectionResetError):
        ensure()
