"""The dependency floors in pyproject.toml hold: the installed versions are at or above them, and
the Ray APIs trainer_runtime calls exist in the installed Ray.

A floor below what the code needs installs fine and fails at the first TrainJob, inside a pod.
Run against the floor itself (pip install 'ray[train,tune,data]==<floor>') these tests show the
floor is enough; against anything older, the version test names the floor and what needs it.
"""

from __future__ import annotations

import inspect
import sys
from importlib.metadata import version
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

if sys.version_info >= (3, 11):
    import tomllib
else:  # pytest itself depends on tomli before 3.11
    import tomli as tomllib

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"

#: Why each floor is where it is (pyproject.toml says the same next to the requirement).
WHY = {
    "kopf": "settings.watching.inactivity_timeout first exists in kopf 1.44",
    "ray": (
        "trainer_runtime uses Ray Train V2: elastic ScalingConfig(num_workers=(min, max)) is new "
        "in Ray 2.55, and V2 is on by default only since 2.51"
    ),
    "torch": "2.4 is the first torch with NumPy 2 support, and NumPy is not capped",
}


def _floor(name: str) -> Version:
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    requirements = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        requirements.extend(extra)
    floors = [
        Version(spec.version)
        for req in map(Requirement, requirements)
        if req.name == name
        for spec in req.specifier
        if spec.operator == ">="
    ]
    assert len(floors) == 1, f"pyproject.toml: expected one {name}>=X requirement, got {floors}"
    return floors[0]


@pytest.mark.parametrize(
    "name",
    [n if n == "kopf" else pytest.param(n, marks=pytest.mark.runtime) for n in sorted(WHY)],
)
def test_installed_version_is_at_least_the_floor(name: str) -> None:
    if name != "kopf":
        pytest.importorskip(name, reason=f"{name} comes with the runtime extra: make install")
    floor, installed = _floor(name), Version(version(name))
    assert installed >= floor, (
        f"{name} {installed} is installed, but pyproject.toml requires {name}>={floor}: "
        f"{WHY[name]}. Upgrade it: pip install -e '.[dev,runtime]'"
    )


def test_kopf_has_the_watch_setting_the_floor_is_for() -> None:
    import kopf

    assert "inactivity_timeout" in vars(kopf.OperatorSettings().watching)


@pytest.mark.runtime
def test_ray_has_every_train_v2_api_trainer_runtime_calls(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pytest.importorskip("ray", reason="Ray comes with the runtime extra: make install")
    from ray import tune
    from ray.train import RunConfig, ScalingConfig, UserCallback
    from ray.train.torch import TorchConfig
    from ray.train.v2._internal import constants
    from ray.tune.integration.ray_train import TuneReportCallback

    # V2 must be what an unconfigured pod gets: the runtime refuses V1.
    monkeypatch.delenv(constants.V2_ENABLED_ENV_VAR, raising=False)
    assert constants.is_v2_enabled()
    assert constants.HEALTH_CHECK_INTERVAL_S_ENV_VAR
    # Elastic scaling: (min, max) workers. Older Rays store the tuple without a word and fail
    # later, so ask the config what it understood.
    elastic = ScalingConfig(num_workers=(1, 2))
    assert (elastic.min_workers, elastic.max_workers) == (1, 2)
    run_config = set(inspect.signature(RunConfig).parameters)
    assert {"name", "storage_path", "storage_filesystem", "callbacks"} <= run_config
    after_report = inspect.signature(UserCallback.after_report).parameters
    assert list(after_report)[1:] == ["run_context", "metrics", "checkpoint"]
    after_exception = inspect.signature(UserCallback.after_exception).parameters
    assert list(after_exception)[1:] == ["run_context", "worker_exceptions"]
    assert "timeout_s" in inspect.signature(TorchConfig).parameters
    assert "storage_filesystem" in inspect.signature(tune.Tuner.can_restore).parameters
    assert callable(TuneReportCallback) and callable(tune.RunConfig)


@pytest.mark.runtime
def test_ray_has_the_report_queue_a_failing_rank_waits_on() -> None:
    """trainer_runtime/flush.py reads the worker's report queue and counters (Ray internals);
    where they are gone the wrapper quietly does nothing, so a Ray upgrade must be seen here."""
    pytest.importorskip("ray", reason="Ray comes with the runtime extra: make install")
    import queue as queue_module

    from ray.train.v2._internal.execution import context as ctx_module
    from ray.train.v2._internal.execution.worker_group import worker as worker_module

    assert callable(ctx_module.get_train_context)
    assert callable(ctx_module.TrainContext.get_result_queue)
    report_source = inspect.getsource(ctx_module.TrainContext)
    assert "self.report_call_index += 1" in report_source
    assert "self.current_report_index += 1" in report_source
    # The controller's poll marks a report taken with task_done, which flush.py counts on.
    poll_source = inspect.getsource(worker_module.RayTrainWorker.poll_status)
    assert "result_queue.get_nowait()" in poll_source and "task_done()" in poll_source
    assert hasattr(queue_module.Queue(), "unfinished_tasks")


@pytest.mark.runtime
def test_ray_has_what_the_hang_watch_and_the_step_times_use() -> None:
    """trainer_runtime/hangwatch.py and steptime.py use Ray Train's internal callbacks (as its
    own NCCL hang detector does), a worker's `execute_async` and the name of its training
    thread, and turn on that detector by its variables: where any is gone, the watch quietly
    does nothing, so a Ray upgrade must be seen here."""
    pytest.importorskip("ray", reason="Ray comes with the runtime extra: make install")
    from ray.train.v2._internal import constants
    from ray.train.v2._internal.execution import callback
    from ray.train.v2._internal.execution.worker_group import thread_runner
    from ray.train.v2._internal.execution.worker_group.worker import Worker

    from trainer_runtime import hangwatch

    after_report = inspect.signature(callback.ReportCallback.after_report).parameters
    assert list(after_report)[1:] == ["training_report", "metrics"]
    for hook in ("after_worker_group_start", "after_worker_group_poll_status"):
        assert callable(getattr(callback.WorkerGroupCallback, hook))
    assert callable(callback.TrainContextCallback.on_report)
    assert callable(Worker.execute_async)
    assert f'name=f"{hangwatch.RAY_TRAINING_THREAD}(' in inspect.getsource(thread_runner)
    assert constants.ENABLE_NCCL_HANG_DETECTOR_ENV_VAR == hangwatch.NCCL_HANG_DETECTOR_ENV
    assert constants.NCCL_RAS_ACTION_ENV_VAR == hangwatch.NCCL_RAS_ACTION_ENV
    assert constants.NCCL_RAS_CONFIRM_DURATION_S_ENV_VAR == hangwatch.NCCL_RAS_CONFIRM_ENV
