"""What the CLI prints, computed from TrainJob objects without a cluster."""

from __future__ import annotations

import datetime as dt

import pytest

from raytrain_operator.cli import build_parser, render

NOW = dt.datetime(2026, 11, 22, 8, 0, 0, tzinfo=dt.timezone.utc)


def _job(**status: object) -> dict[str, object]:
    return {
        "metadata": {
            "name": "digits",
            "namespace": "team-a",
            "generation": 2,
            "creationTimestamp": "2026-11-22T07:58:45Z",
        },
        "spec": {
            "image": "img",
            "entrypoint": "m:f",
            "scaling": {"numWorkers": 2},
            "storage": {"s3": {"uri": "s3://b/p"}},
        },
        "status": status,
    }


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0s"),
        (59, "59s"),
        (75, "1m15s"),
        (600, "10m"),
        (3660, "1h1m"),
        (90000, "1d1h"),
        (None, "-"),
        (-1, "-"),
    ],
)
def test_human_duration(seconds: float | None, text: str) -> None:
    assert render.human_duration(seconds) == text


def test_list_row_of_a_running_job() -> None:
    job = _job(
        phase="Running",
        workers={"desired": 2, "ready": 1},
        trainerStatus={"progressPercentage": 40, "epoch": 3, "estimatedRemainingSeconds": 75},
    )
    assert render.list_row(job, NOW) == (
        "team-a",
        "digits",
        "Running",
        "40%",
        "3",
        "1/2",
        "1m15s",
        "1m15s",
    )


def test_list_row_of_a_new_job() -> None:
    assert render.list_row(_job(), NOW) == (
        "team-a",
        "digits",
        "Pending",
        "-",
        "-",
        "-",
        "-",
        "1m15s",
    )


def test_detail_shows_metrics_checkpoint_and_conditions() -> None:
    job = _job(
        phase="Succeeded",
        trainerStatus={
            "progressPercentage": 100,
            "epoch": 7,
            "metrics": [{"name": "accuracy", "value": "0.95"}],
        },
        checkpoint={
            "latestURI": "s3://b/p/run/checkpoint_7",
            "bestURI": "s3://b/p/run/c5",
            "bestMetric": "0.96",
        },
        conditions=[
            {
                "type": "Succeeded",
                "status": "True",
                "reason": "TrainingSucceeded",
                "message": "done",
            }
        ],
    )
    text = "\n".join(render.detail_lines(job, NOW))
    assert "accuracy=0.95" in text
    assert "latest s3://b/p/run/checkpoint_7" in text
    assert "best s3://b/p/run/c5 (0.96)" in text
    assert "TrainingSucceeded" in text
    assert "Storage:     s3://b/p" in text


def test_wait_is_met_by_a_fresh_true_condition() -> None:
    job = _job(
        conditions=[
            {
                "type": "Succeeded",
                "status": "True",
                "observedGeneration": 2,
                "reason": "TrainingSucceeded",
                "message": "ok",
            }
        ]
    )
    assert render.wait_outcome(job, "Succeeded") == (True, "ok")


def test_wait_ignores_a_stale_condition() -> None:
    job = _job(
        conditions=[
            {
                "type": "Running",
                "status": "True",
                "observedGeneration": 1,
                "reason": "R",
                "message": "",
            }
        ]
    )
    assert render.wait_outcome(job, "Running") is None


def test_wait_for_success_ends_when_the_job_fails() -> None:
    job = _job(
        conditions=[
            {
                "type": "Failed",
                "status": "True",
                "observedGeneration": 2,
                "reason": "BackoffLimitExceeded",
                "message": "3 attempts failed",
            }
        ]
    )
    assert render.wait_outcome(job, "Succeeded") == (
        False,
        "BackoffLimitExceeded: 3 attempts failed",
    )
    assert render.wait_outcome(job, "Failed") == (True, "3 attempts failed")


def test_wait_keeps_waiting_while_running() -> None:
    job = _job(conditions=[{"type": "Running", "status": "True", "reason": "R", "message": ""}])
    assert render.wait_outcome(job, "Succeeded") is None


@pytest.mark.parametrize("command", ["run", "submit", "get", "list", "wait", "logs"])
def test_every_command_has_help(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args([command, "--help"])
    assert exit_info.value.code == 0
    assert "usage: raytrain " + command in capsys.readouterr().out


def test_run_requires_local() -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "examples/digits.yaml"])
