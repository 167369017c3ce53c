"""Build and run Ray Train's TorchTrainer from the contract, feeding the reporter.

Ray Train V2 (the default in this Ray, ``RAY_TRAIN_V2_ENABLED``): a controller actor drives the
worker group and calls ``UserCallback``s; a run with the same ``RunConfig(name)`` and storage
path finds its checkpoint-manager snapshot and hands the latest checkpoint to the loop through
``ray.train.get_checkpoint()``, on a worker-group restart and on a new driver alike. So resume
needs nothing from us but a stable run name (the contract's ``runName``) and storage.

Reports travel from the controller to the driver through a Ray queue; the driver owns the
single ``Reporter``, so there is one writer even when the controller is restarted. The same
queue carries the hang watch's stacks (trainer_runtime/hangwatch.py) and the ranks' step times
(trainer_runtime/steptime.py).
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import os
import threading
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from raytrain_contract import Contract
from trainer_runtime import hangwatch, manifests, resume, steptime
from trainer_runtime import runlog as runlog_module
from trainer_runtime.datawait import start_watch
from trainer_runtime.entrypoint import EntrypointError, load_entrypoint
from trainer_runtime.flush import flushed_before_raising, report_commit_callback
from trainer_runtime.reporter import (
    FAILED,
    RAYJOB_ENV,
    SUCCEEDED,
    Reporter,
    finished_epoch,
    total_epochs,
)
from trainer_runtime.runlog import RunLog, worker_error_text
from trainer_runtime.storage import StorageTarget, resolve_uri, storage_target
from trainer_runtime.tune import concurrent_trials

log = logging.getLogger("trainer_runtime")

EXIT_OK, EXIT_TRAINING_FAILED, EXIT_BAD_INPUT = 0, 1, 2


def _require_train_v2() -> None:
    from ray.train.v2._internal.constants import V2_ENABLED_ENV_VAR, is_v2_enabled

    if not is_v2_enabled():
        raise RuntimeError(
            f"{V2_ENABLED_ENV_VAR} is off: this runtime uses the Ray Train V2 API "
            f"(UserCallback, automatic resume); unset {V2_ENABLED_ENV_VAR} or set it to 1"
        )


def _make_bridge(queue: Any, target: StorageTarget, attempt: int | None = None) -> Any:
    """A UserCallback (runs in the controller) that finishes each checkpoint's manifest and
    forwards reports into ``queue``: a checkpoint is reported only with its manifest written."""
    from ray.train import UserCallback

    fence = os.environ.get(RAYJOB_ENV)

    class ReportBridge(UserCallback):  # type: ignore[misc]
        def after_report(self, run_context: Any, metrics: Any, checkpoint: Any) -> None:
            first = dict(metrics[0]) if metrics else {}
            uri = None
            if checkpoint is not None:
                try:
                    manifest = manifests.finish_manifest(
                        checkpoint.filesystem,
                        checkpoint.path,
                        run=run_context.run_config.name,
                        attempt=attempt,
                        fence=fence,
                        epoch=finished_epoch(first),
                        metrics=first,
                    )
                    if manifest is not None:
                        uri = target.uri(checkpoint.path)
                except Exception:
                    # Without its manifest the checkpoint is not one: it is not reported, and
                    # no resume uses it. Training goes on.
                    log.exception("could not write the manifest of %s", checkpoint.path)
            try:
                queue.put_nowait(("report", first, uri))
            except Exception:  # reporting must never break training
                log.exception("could not forward a report")

        def after_exception(self, run_context: Any, worker_exceptions: Any) -> None:
            try:
                queue.put_nowait(("error", describe_worker_errors(worker_exceptions), None))
                # Without their tracebacks (Ray unwraps them for user callbacks): kept only
                # where the WorkerErrorBridge below has not given the full text.
                details = {r: worker_error_text(e) for r, e in worker_exceptions.items()}
                queue.put_nowait(("worker_errors_short", details, None))
            except Exception:
                log.exception("could not forward a worker error")

    return ReportBridge()


def _make_error_bridge(queue: Any) -> Any | None:
    """A Ray Train worker-group callback (runs in the controller) that forwards each failed
    worker's error with its traceback into ``queue``, for the run log.

    A ``UserCallback`` gets the workers' exceptions without their tracebacks; the worker
    group's poll status still holds Ray's wrapper with the traceback text. Ray Train passes
    callbacks that are not ``UserCallback``s on to its controller as they are. This is Ray's
    internal API: when it is not there, the run log has the errors without tracebacks.
    """
    try:
        from ray.train.v2._internal.execution.callback import WorkerGroupCallback
    except ImportError:
        return None

    class WorkerErrorBridge(WorkerGroupCallback):  # type: ignore[misc]
        def before_worker_group_start(self, worker_group_context: Any) -> None:
            # Runs in the controller, before any checkpoint of this group is registered.
            try:
                manifests.install_rejection_guard()
            except Exception:
                log.exception("could not guard rejected checkpoints from numToKeep's retention")

        def after_worker_group_poll_status(self, worker_group_status: Any) -> None:
            try:
                statuses = worker_group_status.worker_statuses.items()
                errors = {r: s.error for r, s in statuses if s.error is not None}
                if errors:
                    details = {r: worker_error_text(e) for r, e in errors.items()}
                    queue.put_nowait(("worker_errors", details, None))
            except Exception:  # the run log must never break training
                log.exception("could not forward a worker's traceback")

    return WorkerErrorBridge()


def _root_cause(exc: BaseException) -> BaseException:
    seen = set()
    while id(exc) not in seen:
        seen.add(id(exc))
        inner = getattr(exc, "cause", None) or exc.__cause__
        if isinstance(inner, BaseException):
            exc = inner
        else:
            break
    return exc


def describe_error(exc: BaseException) -> str:
    root = _root_cause(exc)
    text = str(root).strip().splitlines()
    first = text[-1] if text else ""
    return f"{type(root).__name__}: {first}" if first else type(root).__name__


def describe_worker_errors(worker_exceptions: dict[int, BaseException]) -> str:
    parts = [f"worker {rank}: {describe_error(e)}" for rank, e in sorted(worker_exceptions.items())]
    return "; ".join(parts)


def describe_training_failure(exc: BaseException) -> str:
    failures = getattr(exc, "worker_failures", None)
    if isinstance(failures, dict) and failures:
        return "training failed: " + describe_worker_errors(failures)
    controller = getattr(exc, "controller_failure", None)
    if isinstance(controller, BaseException):
        return "training failed in the Ray Train controller: " + describe_error(controller)
    return "training failed: " + describe_error(exc)


def build_scaling_config(contract: Contract) -> Any:
    from ray.train import ScalingConfig

    s = contract.scaling
    num_workers: int | tuple[int, int]
    if s.num_workers is not None:
        num_workers = s.num_workers
    else:
        assert s.min_workers is not None and s.max_workers is not None
        num_workers = (s.min_workers, s.max_workers)
    return ScalingConfig(
        num_workers=num_workers,  # type: ignore[arg-type]  # V2 takes (min, max)
        use_gpu=s.use_gpu,
        resources_per_worker=dict(s.resources_per_worker) or None,
        placement_strategy=s.placement_strategy,
        accelerator_type=s.accelerator_type,
    )


def build_run_config(
    contract: Contract, target: StorageTarget, callbacks: list[Any], name: str | None = None
) -> Any:
    from ray.train import CheckpointConfig, FailureConfig, RunConfig

    c = contract.checkpoint
    return RunConfig(
        name=name or contract.run_name,
        storage_path=target.path,
        storage_filesystem=target.filesystem,
        checkpoint_config=CheckpointConfig(
            num_to_keep=c.num_to_keep,
            checkpoint_score_attribute=c.score_attribute,
            checkpoint_score_order=c.score_order or "max",
        ),
        failure_config=FailureConfig(max_failures=contract.failure.max_failures),
        callbacks=callbacks,
    )


_READERS = {
    "parquet": "read_parquet",
    "csv": "read_csv",
    "json": "read_json",
    "numpy": "read_numpy",
    "text": "read_text",
}

#: CPUs one Ray Data read task asks for unless told otherwise (Ray Data's default).
READ_TASK_CPUS = 1.0


def training_cpus(contract: Contract) -> float:
    """CPUs the training workers hold: workers (the most, when elastic) x CPUs per worker,
    times the concurrent trials of a search. A GPU worker holds no CPU unless it asks for one.
    """
    s = contract.scaling
    workers = s.num_workers if s.num_workers is not None else (s.max_workers or 1)
    per_worker = s.resources_per_worker.get("CPU", 0.0 if s.use_gpu else 1.0)
    trials = concurrent_trials(contract.tune) if contract.tune is not None else 1
    return float(trials * workers * per_worker)


@dataclass(frozen=True)
class DataPlan:
    """CPUs left to Ray Data beside the training workers, and what one read task asks for.

    Ray Train V2 does not tell Ray Data which CPUs its workers hold: Ray Data budgets for the
    whole cluster and submits read tasks that Ray cannot place while the workers hold every CPU.
    So the plan caps Ray Data at the spare CPUs and, when there are none, lets read tasks run
    without a CPU of their own (they share the workers' cores) rather than wait forever.
    """

    cluster_cpus: float
    training_cpus: float

    @property
    def spare_cpus(self) -> float:
        return max(0.0, self.cluster_cpus - self.training_cpus)

    @property
    def read_cpus(self) -> float:
        return READ_TASK_CPUS if self.spare_cpus >= READ_TASK_CPUS else 0.0


def plan_data(contract: Contract) -> DataPlan:
    import ray

    cpus = ray.cluster_resources().get("CPU", 0.0)  # type: ignore[no-untyped-call]
    return DataPlan(float(cpus), training_cpus(contract))


def _reader_kwargs(reader: Callable[..., Any], plan: DataPlan, workers: int) -> dict[str, Any]:
    if plan.read_cpus >= READ_TASK_CPUS:
        return {}
    if "num_cpus" not in inspect.signature(reader).parameters:
        return {}  # read_numpy: no per-task resources; the wait watch says when it starves
    # Without a CPU of their own, bound how many reads share the workers' cores at once.
    return {"num_cpus": plan.read_cpus, "concurrency": max(1, workers)}


@contextlib.contextmanager
def _listing_in_the_driver(wanted: bool) -> Iterator[None]:
    """Read parquet with Ray Data's first datasource, which lists files in the driver.

    The newer one lists them in a ``ListFiles`` task that always asks for a CPU, whatever the
    read's own ``num_cpus``: with no CPU left, that task would wait forever.
    """
    if not wanted:
        yield
        return
    from ray.data import DataContext

    ctx = DataContext.get_current()
    saved = ctx.use_datasource_v2
    ctx.use_datasource_v2 = False
    try:
        yield
    finally:
        ctx.use_datasource_v2 = saved


def build_datasets(
    contract: Contract, target: StorageTarget, plan: DataPlan | None = None
) -> tuple[dict[str, Any], Any]:
    if not contract.datasets:
        return {}, None
    import ray.data
    from ray.train import DataConfig

    plan = plan or plan_data(contract)
    s = contract.scaling
    workers = s.num_workers if s.num_workers is not None else (s.max_workers or 1)
    if plan.read_cpus < READ_TASK_CPUS:
        log.warning(
            "datasets %s: the training workers hold all %g CPUs of the cluster, none is left "
            "for Ray Data; its read tasks run without a CPU of their own and share the workers' "
            "cores. Give the cluster CPUs beyond the workers' for a faster input (docs/data.md)",
            ", ".join(repr(n) for n in contract.datasets),
            plan.cluster_cpus,
        )
    datasets = {}
    for name, spec in contract.datasets.items():
        fs, path = resolve_uri(spec.uri, target)
        reader = getattr(ray.data, _READERS[spec.format])
        with _listing_in_the_driver(plan.read_cpus < READ_TASK_CPUS):
            datasets[name] = reader(path, filesystem=fs, **_reader_kwargs(reader, plan, workers))
    split = [name for name, spec in contract.datasets.items() if spec.split]
    return datasets, DataConfig(datasets_to_split=split, execution_options=ingest_options(plan))


def ingest_options(plan: DataPlan) -> Any:
    """Ray Train's default ingest options, with Ray Data's CPU budget cut to the spare CPUs."""
    from ray.data import DataContext, ExecutionOptions

    current = DataContext.get_current().execution_options
    limits = current.resource_limits
    cpu = plan.spare_cpus if limits.cpu is None else min(limits.cpu, plan.spare_cpus)
    # exclude_resources is left out: deprecated in this Ray, and zero unless someone set it.
    return ExecutionOptions(
        resource_limits=limits.copy(cpu=cpu),
        preserve_order=current.preserve_order,
        verbose_progress=current.verbose_progress,
        label_selector=current.label_selector,
    )


def make_trainer(
    contract: Contract,
    train_fn: Callable[..., Any],
    target: StorageTarget,
    callbacks: list[Any],
    *,
    config: dict[str, Any] | None = None,
    name: str | None = None,
) -> Any:
    from ray.train.torch import TorchConfig, TorchTrainer

    datasets, data_config = build_datasets(contract, target)
    kwargs: dict[str, Any] = {}
    if data_config is not None:
        kwargs["dataset_config"] = data_config
    return TorchTrainer(
        train_fn,
        train_loop_config=dict(contract.config if config is None else config),
        torch_config=TorchConfig(
            backend=contract.torch.backend, timeout_s=contract.torch.timeout_seconds
        ),
        scaling_config=build_scaling_config(contract),
        run_config=build_run_config(contract, target, callbacks, name),
        datasets=datasets or None,
        **kwargs,
    )


def report_queue() -> Any:
    """The Ray queue that carries reports from Train's controller to this driver.

    Its actor lives on the driver's own node (hard affinity, no CPU): left to the scheduler it
    can land on a worker's node, and when that worker pod is deleted or preempted the queue dies
    with it, so every report after Ray Train restarts the group is lost (seen on real pods: the
    status stayed at the epoch of the fault while training went on to the end).
    """
    import ray
    from ray.util.queue import Queue
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    here = ray.get_runtime_context().get_node_id()
    return Queue(
        actor_options={
            "num_cpus": 0,
            "scheduling_strategy": NodeAffinitySchedulingStrategy(node_id=here, soft=False),
        }
    )


def _drain(
    queue: Any,
    reporter: Reporter,
    stop: threading.Event,
    runlog: RunLog | None = None,
    run: tuple[str, int] = ("", 0),
) -> None:
    from ray.util.queue import Empty

    rounds = steptime.StepRounds()

    def apply(item: tuple[str, Any, Any]) -> None:
        kind, payload, uri = item
        if kind == "steps":
            done = rounds.add(payload)
            if done:
                reporter.on_steps(rounds.status())
                if runlog is not None:
                    runlog.steps(done)
        elif kind == "started":
            rounds.reset()
            reporter.on_started()
        elif kind == "hang":
            stacks = None
            if runlog is not None:
                stacks = runlog.stacks(hangwatch.stacks_text(payload, *run))
            reporter.on_hang(payload, stacks)
        elif kind == "report":
            reporter.on_report(payload, uri)
            if runlog is not None:
                runlog.metric(
                    payload,
                    uri,
                    step=reporter.state.step,
                    checkpoints=reporter.state.checkpoint_count,
                )
        elif kind == "resume":
            reporter.on_resume(payload.get("resumed_from"), payload.get("rejected") or [])
        elif kind in ("worker_errors", "worker_errors_short"):
            if runlog is not None:
                runlog.worker_errors(payload, replace=kind == "worker_errors")
        else:
            reporter.on_worker_error(payload)

    while True:
        wait = reporter.seconds_until_due()
        timeout = 0.5 if wait is None else min(0.5, max(wait, 0.05))
        try:
            apply(queue.get(block=True, timeout=timeout))
        except Empty:
            if stop.is_set():
                break
        except Exception:
            log.exception("status reporting hiccup; training goes on")
            if stop.is_set():
                break
        reporter.tick()


#: How often Ray Train's controller polls the workers, unless the pod's environment says. A
#: report (and its checkpoint) counts only once polled, and every rank waits for that poll
#: before it trains on (trainer_runtime/flush.py): each checkpoint costs up to one poll of
#: waiting, and a failure shows one poll after it happens. So the poll is short for a small
#: group, and grows with the group to keep the controller at about POLLS_PER_S poll tasks a
#: second (one per worker per poll), never past POLL_MAX_S (Ray's default is 2 s).
POLL_MIN_S = 0.1
POLL_MAX_S = 0.5
POLLS_PER_S = 40


def poll_interval(workers: int) -> float:
    """The poll for a group of ``workers`` (the most an elastic group can have)."""
    return min(POLL_MAX_S, max(POLL_MIN_S, workers / POLLS_PER_S))


def set_poll_interval(workers: int) -> None:
    from ray.train.v2._internal.constants import HEALTH_CHECK_INTERVAL_S_ENV_VAR

    # Ray Train hands this variable from the driver to its controller.
    os.environ.setdefault(HEALTH_CHECK_INTERVAL_S_ENV_VAR, f"{poll_interval(workers):g}")


def open_run_log(target: StorageTarget, contract: Contract, attempt: int) -> RunLog | None:
    """The attempt's run log (driver output, metrics, worker errors) in checkpoint storage."""
    try:
        return runlog_module.open_run_log(target, contract.run_name, attempt)
    except Exception as exc:  # the run log must never stop training
        log.warning("no run log for this attempt: %s: %s", type(exc).__name__, exc)
        return None


def run_training(contract: Contract, reporter: Reporter) -> int:
    """Run the contract on the Ray cluster ``ray.init`` connected to; return the exit code.

    The reporter gets every report and, last, the terminal outcome. The driver's output, the
    metrics and any worker's error also go to the attempt's run log in checkpoint storage
    (trainer_runtime/runlog.py).
    """
    reporter.start()
    try:
        target = storage_target(contract.storage)
    except (OSError, ValueError) as exc:
        message = str(exc)
        log.error("%s", message)
        reporter.finish(FAILED, message)
        return EXIT_BAD_INPUT
    runlog = open_run_log(target, contract, reporter.state.attempt)
    if runlog is None:
        return _run_training(contract, reporter, target, None)
    with runlog_module.capture_driver_output(runlog):
        return _run_training(contract, reporter, target, runlog)


def _run_training(
    contract: Contract, reporter: Reporter, target: StorageTarget, runlog: RunLog | None
) -> int:
    try:
        _require_train_v2()
        set_poll_interval(contract.scaling.num_workers or contract.scaling.max_workers or 1)
        train_fn = load_entrypoint(contract.entrypoint)
    except (EntrypointError, RuntimeError, OSError, ValueError) as exc:
        message = str(exc)
        log.error("%s", message)
        reporter.finish(FAILED, message)
        return EXIT_BAD_INPUT

    workers = (
        str(contract.scaling.num_workers)
        if contract.scaling.num_workers is not None
        else f"{contract.scaling.min_workers}-{contract.scaling.max_workers}"
    )
    # The first line of the driver's log: what runs, where its checkpoints go.
    log.info(
        "run %s, attempt %d: %s workers, checkpoints in %s",
        contract.run_name,
        contract.attempt,
        workers,
        contract.storage.path,
    )
    if contract.code is not None:
        # Every attempt names the snapshot it runs: a retry runs the code the job was given.
        log.info("code: snapshot sha256:%s (%s)", contract.code.sha256, contract.code.uri)
    own_checkpoints = resume.run_has_checkpoint(target, contract.run_name)
    if own_checkpoints and contract.tune is None:
        # Before Ray Train reads its snapshot: its latest checkpoint must be one that checks out.
        check = manifests.check_run(target, contract.run_name, contract.attempt)
        if check.error is not None:
            log.error("%s", check.error)
            reporter.on_resume(None, [r.status() for r in check.rejected])
            reporter.finish(FAILED, check.error)
            return EXIT_BAD_INPUT
        if check.resumed_from is not None:
            log.info(
                "resuming from %s%s",
                check.resumed_from,
                " (it predates manifests: not verified)" if check.unverified else "",
            )
            reporter.on_resume(check.resumed_from, [r.status() for r in check.rejected])
    queue = report_queue()
    train_fn = manifests.with_verified(
        train_fn,
        target,
        attempt=contract.attempt,
        checksums=contract.checkpoint.verify == "checksums",
        queue=queue,
        seed=contract.resume_from if not own_checkpoints else None,
    )
    if contract.resume_from:
        if own_checkpoints:
            log.info("the run has checkpoints of its own: %s is not used", contract.resume_from)
        else:
            try:
                resume.check_source(contract.resume_from, target)
            except resume.ResumeSourceError as exc:
                message = str(exc)
                log.error("%s", message)
                reporter.finish(FAILED, message)
                return EXIT_BAD_INPUT
            log.info("the run starts from %s (spec.resumeFrom)", contract.resume_from)
        train_fn = resume.with_seed(train_fn, contract.resume_from, target)
    train_fn = flushed_before_raising(train_fn)
    train_fn = hangwatch.with_watched_thread(train_fn)
    for key, value in hangwatch.nccl_hang_detection(contract).items():
        # Read by Ray Train in this process when the trainer is built (an explicit setting of
        # the pod's environment wins).
        os.environ.setdefault(key, value)

    stop = threading.Event()
    drainer = threading.Thread(
        target=_drain,
        args=(queue, reporter, stop, runlog, (contract.run_name, reporter.state.attempt)),
        daemon=True,
    )
    drainer.start()
    watch: tuple[threading.Event, threading.Thread] | None = None
    if contract.datasets:
        watch = start_watch(list(contract.datasets), training_cpus(contract))
    try:
        bridge = _make_bridge(queue, target, contract.attempt)
        error_bridge = _make_error_bridge(queue)
        commit = report_commit_callback()
        hang_watch = hangwatch.make_hang_watch(queue, contract.failure.hang_timeout_seconds)
        # Step times pair the ranks' reports of one group: a search's trials would mix theirs.
        steps = steptime.step_time_callback(queue) if contract.tune is None else None
        bridges = [c for c in (bridge, error_bridge, commit, hang_watch, steps) if c is not None]
        if contract.tune is not None:
            from trainer_runtime.tune import run_tune

            log.info("search: up to %d trial(s) at once", concurrent_trials(contract.tune))
            grid = run_tune(
                contract.tune,
                contract.config,
                lambda cfg, name, cbs: make_trainer(
                    contract, train_fn, target, [*cbs, *bridges], config=cfg, name=name
                ),
                run_name=contract.run_name,
                storage_path=target.path,
                storage_filesystem=target.filesystem,
            )
            # Every trial failed: say why, before Tune's "No best trial found" (which reads as
            # a metric the loop does not report) when none of them reported at all.
            errors = [r.error for r in grid if r.error is not None]
            if errors and len(errors) == len(grid):
                raise errors[0]
            best = grid.get_best_result()
            outcome = f"best trial of {len(grid)}: {contract.tune.metric}=" + str(
                best.metrics.get(contract.tune.metric) if best.metrics else None
            )
        else:
            result = make_trainer(contract, train_fn, target, bridges).fit()
            metrics = result.metrics or {}
            shown = ", ".join(
                f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                for k, v in sorted(metrics.items())
                if isinstance(v, int | float) and not k.startswith("_")
            )
            outcome = f"finished: {shown}" if shown else "finished"
    except Exception as exc:
        message = describe_training_failure(exc)
        log.error("%s\n%s", message, traceback.format_exc())
        _stop(stop, drainer, watch)
        failures = getattr(exc, "worker_failures", None)
        if runlog is not None and isinstance(failures, dict) and failures:
            # Also here: the controller's own copy may not have reached the queue.
            short = {r: worker_error_text(e) for r, e in failures.items()}
            runlog.worker_errors(short, replace=False)
        reporter.finish(FAILED, message)
        return EXIT_TRAINING_FAILED
    _stop(stop, drainer, watch)
    log.info("run %s %s", contract.run_name, outcome)
    reporter.finish(SUCCEEDED, outcome)
    return EXIT_OK


def _stop(
    stop: threading.Event,
    drainer: threading.Thread,
    watch: tuple[threading.Event, threading.Thread] | None = None,
) -> None:
    if watch is not None:
        watch[0].set()
    stop.set()
    drainer.join(timeout=60)


def reporter_for(
    contract: Contract, transport: Any, *, min_interval: float | None = None
) -> Reporter:
    return Reporter(
        transport,
        attempt=contract.attempt,
        epochs=total_epochs(contract.config),
        min_interval=contract.report.min_interval_seconds if min_interval is None else min_interval,
        score_attribute=contract.checkpoint.score_attribute,
        score_order=contract.checkpoint.score_order,
    )
