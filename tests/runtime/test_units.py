"""Pure parts of the runtime: entrypoint import, throttle, progress, status patches, Tune spaces."""

from __future__ import annotations

from typing import Any

import pytest
from _clock import FakeClock

from raytrain_contract import ContractError
from trainer_runtime.entrypoint import EntrypointError, load_entrypoint
from trainer_runtime.reporter import (
    ProgressEstimator,
    RecordingTransport,
    Reporter,
    ReportState,
    Throttle,
    build_status_patch,
    finished_epoch,
    total_epochs,
)

pytestmark = pytest.mark.runtime


# -- entrypoint ------------------------------------------------------------------------------------


def test_entrypoint_imports_a_module_function() -> None:
    fn = load_entrypoint("examples.digits.train:train_loop_per_worker")
    assert fn.__name__ == "train_loop_per_worker"


def test_entrypoint_imports_a_script_path() -> None:
    fn = load_entrypoint("tests/runtime/loops.py:raising_loop")
    assert fn.__name__ == "raising_loop"


@pytest.mark.parametrize(
    ("entrypoint", "reason"),
    [
        ("examples.nope.train:main", r"module 'examples.nope.train' not found"),
        ("examples.digits.train:missing_fn", r"has no attribute 'missing_fn'"),
        ("tests/runtime/loops.py:NOT_CALLABLE", r"'NOT_CALLABLE' is a int, not a callable"),
        ("tests/runtime/nope.py:f", r"does not exist"),
    ],
)
def test_entrypoint_errors_name_the_entrypoint(entrypoint: str, reason: str) -> None:
    with pytest.raises(EntrypointError) as info:
        load_entrypoint(entrypoint)
    assert repr(entrypoint) in str(info.value)
    assert info.match(reason)


# -- throttle, progress, patches -------------------------------------------------------------------


def test_throttle_allows_one_send_per_interval() -> None:
    t = Throttle(5.0)
    assert t.ready(100.0)
    t.mark(100.0)
    assert not t.ready(104.9)
    assert t.ready(105.0)


def test_total_epochs_reads_epochs_or_num_epochs() -> None:
    assert total_epochs({"epochs": 5}) == 5
    assert total_epochs({"num_epochs": 3}) == 3
    assert total_epochs({"epochs": "5"}) is None
    assert total_epochs({}) is None


def test_progress_and_eta_from_zero_based_epochs() -> None:
    p = ProgressEstimator(5, start=0.0)
    assert p.observe(0, now=10.0) == (20, 40)  # 1 of 5 done in 10 s
    assert p.observe(1, now=16.0) == (40, 18)  # 6 s/epoch since the first report
    assert p.observe(4, now=34.0)[0] == 99  # 100 only once Succeeded
    assert ProgressEstimator(None, 0.0).observe(3, 1.0) == (None, None)


@pytest.mark.parametrize(
    ("epoch", "index"),
    [
        (0, 0),  # a loop's own report: the index of the epoch just finished
        (3, 3),
        (1.0, 0),  # Hugging Face's Trainer: epochs done, as a float
        (2.0, 1),
        (2.9999999, 2),  # three done, less a rounding error
        (1.5, 0),  # half-way through the second: the first is the last finished
        (0.5, None),  # none finished yet
        (float("nan"), None),
        (True, None),
        ("2", None),
        (None, None),
    ],
)
def test_finished_epoch_reads_integer_indexes_and_float_epochs_done(
    epoch: object, index: int | None
) -> None:
    assert finished_epoch({"epoch": epoch}) == index


def test_a_float_epoch_moves_progress() -> None:
    sink = RecordingTransport()
    reporter = Reporter(sink, epochs=2, min_interval=0, clock=lambda: 10.0)
    reporter.on_report({"epoch": 1.0, "loss": 0.5})
    status = sink.patches[-1]["status"]["trainerStatus"]
    assert (status["epoch"], status["progressPercentage"]) == (0, 50)


def test_patch_body_has_only_the_runtime_fields() -> None:
    metrics = {"loss": 0.3125, "accuracy": 0.91, "tag": [1]}
    state = ReportState(attempt=1, epoch=2, step=3, metrics=metrics, progress=60, eta=62,
                        latest_uri="s3://b/p/ckpt_2", best_uri="s3://b/p/ckpt_1",
                        best_metric=0.93, checkpoint_count=3)  # fmt: skip
    body = build_status_patch(state, now=0.0)
    assert set(body) == {"status"} and set(body["status"]) == {"trainerStatus", "checkpoint"}
    ts = body["status"]["trainerStatus"]
    assert ts["metrics"] == [{"name": "accuracy", "value": "0.91"},
                             {"name": "loss", "value": "0.3125"}]  # fmt: skip
    assert ts["lastUpdatedTime"] == "1970-01-01T00:00:00Z"
    assert (ts["progressPercentage"], ts["estimatedRemainingSeconds"], ts["epoch"]) == (60, 62, 2)
    assert (ts["phase"], ts["attempt"], ts["step"]) == ("Running", 1, 3)
    assert body["status"]["checkpoint"] == {
        "count": 3,
        "latestURI": "s3://b/p/ckpt_2",
        "bestURI": "s3://b/p/ckpt_1",
        "bestMetric": "0.93",
    }


def test_reporter_throttles_and_always_sends_the_last_report() -> None:
    clock = FakeClock(1_000_000.0)
    sink = RecordingTransport()
    r = Reporter(sink, epochs=10, min_interval=5.0, clock=clock, sleep=lambda _: None,
                 score_attribute="accuracy", score_order="max")  # fmt: skip
    r.start()
    for epoch in range(10):
        clock.now += 1.0
        uri = f"s3://b/run/checkpoint_{epoch}"
        r.on_report({"epoch": epoch, "accuracy": [0.5, 0.9, 0.7][epoch % 3]}, uri)
    assert r.reports == 10
    assert len(sink.patches) == 3  # start, +5 s, +10 s
    r.finish("Succeeded", "finished")
    last = sink.patches[-1]["status"]
    assert last["trainerStatus"]["epoch"] == 9 and last["trainerStatus"]["phase"] == "Succeeded"
    assert last["trainerStatus"]["progressPercentage"] == 100
    assert last["checkpoint"]["count"] == 10
    assert last["checkpoint"]["latestURI"] == "s3://b/run/checkpoint_9"
    assert last["checkpoint"]["bestURI"] == "s3://b/run/checkpoint_1"


def test_a_pending_report_goes_out_on_tick_once_due() -> None:
    clock = FakeClock(1_000_000.0)
    sink = RecordingTransport()
    r = Reporter(sink, min_interval=5.0, clock=clock)
    r.start()
    clock.now += 1
    r.on_report({"epoch": 0, "loss": 1.0})
    assert len(sink.patches) == 1
    assert r.seconds_until_due() == pytest.approx(4.0)
    clock.now += 4
    r.tick()
    assert len(sink.patches) == 2 and sink.patches[1]["status"]["trainerStatus"]["step"] == 1


class FlakyTransport(RecordingTransport):
    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures

    def patch_status(self, body: dict[str, Any]) -> None:
        if self.failures > 0:
            self.failures -= 1
            raise ConnectionError("API server unreachable")
        super().patch_status(body)


def test_api_errors_are_retried_and_never_raise() -> None:
    waits: list[float] = []
    sink = FlakyTransport(failures=2)
    r = Reporter(sink, min_interval=0, sleep=waits.append, retries=3, backoff=0.5)
    r.start()
    assert len(sink.patches) == 1 and waits == [0.5, 1.0]
    dead = FlakyTransport(failures=10_000)
    r2 = Reporter(dead, min_interval=0, sleep=lambda _: None, retries=2)
    r2.start()
    r2.on_report({"epoch": 0})
    r2.finish("Failed", "boom")  # no exception escapes
    assert r2.patches_failed == 3 and dead.patches == []


def test_checkpoint_request_sets_and_clears_checkpointing() -> None:
    clock = FakeClock(2_000_000_000.0)
    job: dict[str, Any] = {"metadata": {"annotations": {}}}
    sink = RecordingTransport(trainjob=job)
    r = Reporter(sink, min_interval=0, clock=clock)
    r.start()
    assert "checkpointing" not in sink.patches[-1]["status"]["trainerStatus"]
    clock.now += 10
    job["metadata"]["annotations"]["raytrain.dev/checkpoint-requested"] = "2033-05-18T03:33:25Z"
    r.on_report({"epoch": 0})
    assert sink.patches[-1]["status"]["trainerStatus"]["checkpointing"] is True
    clock.now += 10
    r.on_report({"epoch": 1}, "s3://b/run/checkpoint_1")
    status = sink.patches[-1]["status"]
    assert status["trainerStatus"]["checkpointing"] is False
    assert status["checkpoint"]["latestURI"] == "s3://b/run/checkpoint_1"
    clock.now += 10
    r.on_report({"epoch": 2})  # the request is older than the last checkpoint: no new request
    assert sink.patches[-1]["status"]["trainerStatus"]["checkpointing"] is False


def test_a_resumed_attempt_continues_the_counts() -> None:
    checkpoint = {"count": 4, "latestURI": "s3://b/r/c4", "bestMetric": "0.9"}
    job = {"status": {"trainerStatus": {"step": 7}, "checkpoint": checkpoint}}
    sink = RecordingTransport(trainjob=job)
    r = Reporter(sink, min_interval=0, score_attribute="accuracy")
    r.start()
    r.on_report({"epoch": 4, "accuracy": 0.8}, "s3://b/r/c5")
    status = sink.patches[-1]["status"]
    assert status["trainerStatus"]["step"] == 8 and status["checkpoint"]["count"] == 5
    assert status["checkpoint"]["bestMetric"] == "0.9"  # 0.8 is not better


def test_the_best_metric_survives_a_resume_at_full_precision() -> None:
    # The score to beat is read back from the status after a retry: rounded there, a worse
    # checkpoint (0.12345681 > 0.123456789 when lower is better) would look better than
    # "0.123457" and take bestURI from the true best.
    first = RecordingTransport(trainjob={"status": {}})
    r = Reporter(first, min_interval=0, score_attribute="loss", score_order="min")
    r.start()
    r.on_report({"epoch": 0, "loss": 0.123456789}, "s3://b/r/c1")
    written = first.patches[-1]["status"]["checkpoint"]
    assert float(written["bestMetric"]) == 0.123456789
    resumed = RecordingTransport(trainjob={"status": {"checkpoint": written}})
    again = Reporter(resumed, min_interval=0, score_attribute="loss", score_order="min")
    again.start()
    again.on_report({"epoch": 1, "loss": 0.12345681}, "s3://b/r/c2")
    status = resumed.patches[-1]["status"]["checkpoint"]
    assert status["bestURI"] == "s3://b/r/c1" and status["latestURI"] == "s3://b/r/c2"
    assert float(status["bestMetric"]) == 0.123456789


class _Refused(Exception):
    """What the Kubernetes client raises when admission refuses a patch."""

    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"({status}) {body}")
        self.status, self.body = status, body


class _FencedTransport(RecordingTransport):
    """The API server after the operator moved the job on to attempt 1, which the runtime's
    read (just before) did not see yet."""

    def __init__(self) -> None:
        super().__init__(trainjob={"status": {"attempt": 0}})
        self.tries = 0

    def patch_status(self, body: dict[str, Any]) -> None:
        self.tries += 1
        raise _Refused(
            403,
            "ValidatingAdmissionPolicy 'raytrain-runtime-status' denied request: ServiceAccount "
            "j-runtime sent a report of attempt 0 to TrainJob j, which is at attempt 1: only "
            "the current attempt may report (status.trainerStatus.attempt)",
        )


def test_a_report_refused_as_another_attempts_stops_the_reports(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Not retried, and nothing more sent: the attempt's reports can never be taken again.
    sink = _FencedTransport()
    slept: list[float] = []
    r = Reporter(sink, min_interval=0, sleep=slept.append)
    r.start()
    r.on_report({"epoch": 0}, "s3://b/r/c1")
    r.on_report({"epoch": 1}, "s3://b/r/c2")
    r.finish("Succeeded", "done")
    assert sink.tries == 1 and slept == []
    assert r.superseded
    assert "only the current attempt may report" in caplog.text


def test_a_job_at_a_later_attempt_gets_no_more_reports_of_this_one(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Where the status policy is off, the runtime's own read of the job is the fence.
    job: dict[str, Any] = {"status": {"attempt": 0}}
    sink = RecordingTransport(trainjob=job)
    r = Reporter(sink, min_interval=0)
    r.start()
    r.on_report({"epoch": 0}, "s3://b/r/c1")
    sent = len(sink.patches)
    job["status"]["attempt"] = 1  # the operator moved on
    r.on_report({"epoch": 1}, "s3://b/r/c2")
    r.finish("Succeeded", "done")
    assert len(sink.patches) == sent and r.superseded
    assert sink.patches[-1]["status"]["checkpoint"]["latestURI"] == "s3://b/r/c1"
    assert "the TrainJob is at attempt 1" in caplog.text


# -- tune param space ------------------------------------------------------------------------------


def test_param_space_translation() -> None:
    from ray.tune.search.sample import Categorical, Float, Integer

    from trainer_runtime.tune import translate_param_space

    space = translate_param_space({
        "lr": {"loguniform": [1e-4, 1e-1]},
        "dropout": {"uniform": [0.0, 0.5]},
        "hidden": {"randint": [32, 256]},
        "opt": {"choice": ["sgd", "adam"]},
        "batch": {"grid": [32, 64]},
        "epochs": 5,
    })  # fmt: skip
    assert isinstance(space["lr"], Float) and space["lr"].lower == 1e-4
    assert isinstance(space["dropout"], Float) and space["dropout"].upper == 0.5
    assert isinstance(space["hidden"], Integer) and space["hidden"].lower == 32
    assert isinstance(space["opt"], Categorical) and space["opt"].categories == ["sgd", "adam"]
    assert space["batch"] == {"grid_search": [32, 64]}
    assert space["epochs"] == 5


@pytest.mark.parametrize(
    ("space", "match"),
    [
        ({"lr": {"uniform": [1.0, 0.1]}}, r"tune.paramSpace.lr.uniform.*lo < hi"),
        ({"lr": {"loguniform": [0, 1]}}, r"tune.paramSpace.lr.loguniform.*> 0"),
        ({"h": {"randint": [1.5, 3]}}, r"tune.paramSpace.h.randint.*integers"),
        ({"o": {"choice": []}}, r"tune.paramSpace.o.choice.*non-empty"),
    ],
)
def test_bad_param_space_names_the_key(space: dict[str, Any], match: str) -> None:
    from trainer_runtime.tune import translate_param_space

    with pytest.raises(ContractError, match=match):
        translate_param_space(space)


def test_an_answered_request_is_not_raised_again_even_if_its_clock_runs_ahead() -> None:
    clock = FakeClock(2_000_000_000.0)  # 2033-05-18T03:33:20Z
    job: dict[str, Any] = {"metadata": {"annotations": {}}}
    sink = RecordingTransport(trainjob=job)
    r = Reporter(sink, min_interval=0, clock=clock)
    r.start()
    job["metadata"]["annotations"]["raytrain.dev/checkpoint-requested"] = "2033-05-18T04:00:00Z"
    clock.now += 1
    r.on_report({"epoch": 0})
    assert sink.patches[-1]["status"]["trainerStatus"]["checkpointing"] is True
    clock.now += 1
    r.on_report({"epoch": 1}, "s3://b/run/checkpoint_1")
    assert sink.patches[-1]["status"]["trainerStatus"]["checkpointing"] is False
    clock.now += 1
    r.on_report({"epoch": 2})
    assert sink.patches[-1]["status"]["trainerStatus"]["checkpointing"] is False
