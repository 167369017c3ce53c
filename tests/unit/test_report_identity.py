"""The runtime's reports name the attempt of the pod that made them (its environment)."""

from __future__ import annotations

import pytest

from trainer_runtime.reporter import RecordingTransport, Reporter, attempt_from_env


def test_the_pods_attempt_wins_over_the_shared_contracts(monkeypatch: pytest.MonkeyPatch) -> None:
    # The contract ConfigMap already says attempt 2; this pod was made for attempt 1.
    monkeypatch.setenv("RAYTRAIN_ATTEMPT", "1")
    transport = RecordingTransport()
    reporter = Reporter(transport, attempt=2, min_interval=0, clock=lambda: 100.0)
    reporter.on_report({"epoch": 0})
    assert transport.patches[-1]["status"]["trainerStatus"]["attempt"] == 1


def test_without_the_environment_the_contracts_attempt_is_used(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("RAYTRAIN_ATTEMPT", raising=False)
    transport = RecordingTransport()
    Reporter(transport, attempt=2, min_interval=0, clock=lambda: 100.0).on_report({})
    assert transport.patches[-1]["status"]["trainerStatus"]["attempt"] == 2


@pytest.mark.parametrize(("value", "expected"), [("3", 3), ("", None), ("x", None), (" 4 ", 4)])
def test_attempt_from_env(value: str, expected: int | None) -> None:
    assert attempt_from_env({"RAYTRAIN_ATTEMPT": value}) == expected
