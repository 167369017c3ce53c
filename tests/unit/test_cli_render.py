"""What the CLI prints, computed from TrainJob objects without a cluster."""

from __future__ import annotations

import argparse
import datetime as dt
import io
import sys
from types import SimpleNamespace

import pytest
from rich.console import Console

from raytrain.cli import build_parser, cluster, kubectl_main, render
from raytrain.models import Checkpoints, Event, TrainJob

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
    assert render.list_row(TrainJob.from_object(job), NOW) == (
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
    assert render.list_row(TrainJob.from_object(_job()), NOW) == (
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
    text = "\n".join(render.detail_lines(TrainJob.from_object(job), NOW))
    assert "accuracy=0.95" in text
    assert "latest s3://b/p/run/checkpoint_7" in text
    assert "best s3://b/p/run/c5 (0.96)" in text
    assert "TrainingSucceeded" in text
    assert "Storage:     s3://b/p" in text


COMMANDS = [
    "run", "submit", "get", "list", "wait", "logs", "delete", "suspend", "resume", "events",
    "checkpoints", "session",
]  # fmt: skip


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args([command, "--help"])
    assert exit_info.value.code == 0
    assert "usage: raytrain " + command in capsys.readouterr().out


def test_run_requires_local() -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "examples/digits.yaml"])


def test_kubectl_plugin_names_itself_kubectl_raytrain(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser("kubectl raytrain").parse_args(["list", "--help"])
    assert "usage: kubectl raytrain list" in capsys.readouterr().out


def test_wait_accepts_complete_and_new_commands_parse() -> None:
    parser = build_parser()
    assert parser.parse_args(["wait", "d", "--for", "Complete"]).condition == "Complete"
    assert parser.parse_args(["delete", "a", "b", "-n", "x"]).names == ["a", "b"]
    args = parser.parse_args(["session", "d", "--port", "0", "--context", "kind"])
    assert (args.port, args.address, args.context) == (0, "127.0.0.1", "kind")
    assert parser.parse_args(["checkpoints", "d", "-o", "uri"]).output == "uri"


LONG_URI = "s3://raytrain-checkpoints/team-a/digits-0123456789ab/" + "checkpoint_000007/" * 4


def _printed(monkeypatch: pytest.MonkeyPatch, lines: list[str]) -> str:
    """What cluster._say prints for these lines on a 40-column terminal."""
    out = io.StringIO()
    monkeypatch.setattr(cluster, "console", Console(file=out, width=40, force_terminal=False))
    for line in lines:
        cluster._say(line)
    return out.getvalue()


def test_printed_uris_are_never_broken_or_read_as_markup(monkeypatch: pytest.MonkeyPatch) -> None:
    job = _job(
        phase="Running",
        checkpoint={"latestURI": LONG_URI, "bestURI": LONG_URI + "[best]"},
        conditions=[{"type": "Failed", "status": "False", "reason": "R", "message": "[red]x"}],
    )
    text = _printed(monkeypatch, render.detail_lines(TrainJob.from_object(job), NOW))
    assert f"latest {LONG_URI}\n" in text
    assert f"best {LONG_URI}[best]" in text  # not taken for rich markup
    assert "[red]x" in text
    ckpt = Checkpoints(LONG_URI, None, None, 7, "s3://raytrain-checkpoints/team-a")
    text = _printed(monkeypatch, cluster.checkpoint_lines("digits", ckpt))
    assert f"Latest:   {LONG_URI}\n" in text and "Count:    7 reported" in text


def test_event_lines_keep_the_message_whole_and_last() -> None:
    events = [
        Event("Normal", "Created", "RayJob digits-0 created", "TrainJob", "digits", 1, None,
              NOW - dt.timedelta(seconds=75)),
        Event("Warning", "BackOff", f"pull {LONG_URI}", "Pod", "digits-0-abcde-head-x1y2z", 4,
              None, NOW - dt.timedelta(seconds=5)),
    ]  # fmt: skip
    lines = cluster.event_lines(events, NOW)
    assert lines[0].split() == ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
    assert lines[1].split()[:4] == ["1m15s", "Normal", "Created", "trainjob/digits"]
    assert lines[2].endswith(f"pull {LONG_URI} (x4)")
    assert lines[1].index("RayJob") == lines[2].index("pull")  # the columns line up


def test_list_on_a_narrow_terminal_never_cuts_a_cell(monkeypatch: pytest.MonkeyPatch) -> None:
    long_name = "a-rather-long-trainjob-name-of-forty-ch"
    job = _job(phase="Running", trainerStatus={"progressPercentage": 40, "epoch": 3})
    job["metadata"]["name"] = long_name  # type: ignore[index]
    sdk = SimpleNamespace(
        namespace="team-a", list_jobs=lambda all_namespaces: [TrainJob.from_object(job)]
    )
    monkeypatch.setattr(cluster, "_client", lambda args: sdk)
    out = io.StringIO()
    monkeypatch.setattr(cluster, "console", Console(file=out, width=40, force_terminal=False))
    assert cluster.list_jobs(argparse.Namespace(all_namespaces=True, output="text")) == 0
    header, row = out.getvalue().splitlines()
    assert header.split() == [
        "NAMESPACE",
        "NAME",
        "STATUS",
        "PROGRESS",
        "EPOCH",
        "WORKERS",
        "ETA",
        "AGE",
    ]
    assert row.split()[:5] == ["team-a", long_name, "Running", "40%", "3"]
    assert row.index(long_name) == header.index(" NAME ") + 1  # aligned


def test_the_kubectl_script_names_itself_as_kubectl_shows_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "argv", ["kubectl-raytrain", "wait", "--help"])
    with pytest.raises(SystemExit):
        kubectl_main()
    assert capsys.readouterr().out.startswith("usage: kubectl raytrain wait")


def test_get_shows_what_a_template_backed_job_runs_with(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`raytrain get` of a job that leaves image, entrypoint, scaling and storage to its template
    prints the template's values (status.template keeps the copy the job runs with), not `-`."""
    job = {
        "metadata": {"name": "digits", "namespace": "team-a", "generation": 1},
        "spec": {"template": {"name": "gpu-base"}, "config": {"epochs": 3}},
        "status": {
            "phase": "Running",
            "template": {
                "kind": "ClusterTrainJobTemplate",
                "name": "gpu-base",
                "spec": {
                    "image": "registry.example/trainer:1.2",
                    "entrypoint": "examples.digits.train:train_loop_per_worker",
                    "scaling": {"minWorkers": 2, "maxWorkers": 4, "useGpu": True},
                    "storage": {"pvc": {"claimName": "checkpoints"}},
                },
            },
        },
    }
    sdk = SimpleNamespace(get_job=lambda name: TrainJob.from_object(job))
    monkeypatch.setattr(cluster, "_client", lambda args: sdk)
    out = io.StringIO()
    monkeypatch.setattr(cluster, "console", Console(file=out, width=200, force_terminal=False))
    assert cluster.get(argparse.Namespace(name="digits", output="text")) == 0
    text = out.getvalue()
    assert "Image:       registry.example/trainer:1.2\n" in text
    assert "Entrypoint:  examples.digits.train:train_loop_per_worker\n" in text
    assert "Workers:     2-4 (gpu: True)\n" in text
    assert "Storage:     pvc/checkpoints\n" in text
