"""Optional Ray Tune search over the training run (the contract's ``tune`` key).

Ray Train V2 no longer accepts a trainer inside ``Tuner``: each trial is a small driver function
that builds and fits its own ``TorchTrainer`` and passes its reports to Tune through
``TuneReportCallback``. The param space is the documented ``{uniform: [lo, hi]}`` family.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from raytrain_contract import ContractError, TuneSettings

#: Ray's own resource of the head node (every Ray cluster's head has 1 of it).
HEAD_NODE_RESOURCE = "node:__internal_head__"
#: What one trial's driver takes of it: room for far more concurrent trials than a head holds.
TRIAL_DRIVER_HEAD_SHARE = 0.001


def concurrent_trials(settings: TuneSettings) -> int:
    """Trials run at once: ``maxConcurrentTrials``, else 1.

    The operator sizes the worker group for that many trials. Left to Ray, the count would
    have no bound: a trial's driver asks only for a share of the head, so every trial would
    start a driver there (each imports torch) and wait for workers that never come.
    """
    return settings.max_concurrent_trials or 1


def translate_param_space(
    space: Mapping[str, Any], where: str = "tune.paramSpace"
) -> dict[str, Any]:
    """Turn the documented forms into Ray Tune search-space objects (plain values stay)."""
    from ray import tune

    out: dict[str, Any] = {}
    for key, spec in space.items():
        here = f"{where}.{key}"
        if isinstance(spec, Mapping) and len(spec) == 1:
            ((form, arg),) = spec.items()
            if form in ("uniform", "loguniform", "randint"):
                if (
                    not isinstance(arg, list)
                    or len(arg) != 2
                    or not all(isinstance(v, int | float) and not isinstance(v, bool) for v in arg)
                    or arg[0] >= arg[1]
                ):
                    raise ContractError(
                        f"{here}.{form}: expected [lo, hi] with lo < hi, got {arg!r}"
                    )
                if form == "uniform":
                    out[key] = tune.uniform(float(arg[0]), float(arg[1]))
                elif form == "loguniform":
                    if arg[0] <= 0:
                        raise ContractError(f"{here}.loguniform: lo must be > 0, got {arg[0]!r}")
                    out[key] = tune.loguniform(float(arg[0]), float(arg[1]))
                else:
                    if not all(isinstance(v, int) for v in arg):
                        raise ContractError(f"{here}.randint: expected integers, got {arg!r}")
                    out[key] = tune.randint(arg[0], arg[1])
                continue
            if form in ("choice", "grid"):
                if not isinstance(arg, list) or not arg:
                    raise ContractError(f"{here}.{form}: expected a non-empty list, got {arg!r}")
                out[key] = tune.choice(arg) if form == "choice" else tune.grid_search(arg)
                continue
        out[key] = spec
    return out


def run_tune(
    settings: TuneSettings,
    base_config: Mapping[str, Any],
    make_trainer: Callable[[dict[str, Any], str, list[Any]], Any],
    *,
    run_name: str,
    storage_path: str,
    storage_filesystem: Any,
) -> Any:
    """Run the search; ``make_trainer(config, name, callbacks)`` builds one trial's trainer."""
    from ray import tune
    from ray.tune.integration.ray_train import TuneReportCallback

    def trial(config: dict[str, Any]) -> None:
        trial_id = tune.get_context().get_trial_id()
        report_to_tune = TuneReportCallback()  # type: ignore[no-untyped-call]
        trainer = make_trainer(config, f"{run_name}-{trial_id}", [report_to_tune])
        trainer.fit()

    scheduler: Any = None
    if settings.scheduler is not None and settings.scheduler.type == "ASHA":
        from ray.tune.schedulers import ASHAScheduler

        s = settings.scheduler
        scheduler = ASHAScheduler(
            max_t=s.max_t or 100,
            grace_period=s.grace_period,
            reduction_factor=s.reduction_factor,
        )
    param_space = {**base_config, **translate_param_space(settings.param_space)}
    # The trial function only drives its TorchTrainer, whose workers hold the CPUs and GPUs.
    # It runs on the head, beside the runtime's own driver: the TorchTrainer's controller is
    # placed on the trial's node, and the two together (torch imported in each, about 0.6 GB)
    # on a worker pod push that pod over its memory limit. The head advertises no CPU, so
    # the trial asks for none and takes a sliver of the head's own resource instead.
    trainable = tune.with_resources(trial, {"cpu": 0, HEAD_NODE_RESOURCE: TRIAL_DRIVER_HEAD_SHARE})
    experiment = f"{storage_path.rstrip('/')}/{run_name}"
    if tune.Tuner.can_restore(experiment, storage_filesystem=storage_filesystem):
        # A retry of the same run: finish the search, never start it over.
        tuner = tune.Tuner.restore(
            experiment,
            trainable,
            resume_errored=True,
            param_space=param_space,
            storage_filesystem=storage_filesystem,
        )
    else:
        tuner = tune.Tuner(
            trainable,
            param_space=param_space,
            tune_config=tune.TuneConfig(
                metric=settings.metric,
                mode=settings.mode,
                num_samples=settings.num_samples,
                max_concurrent_trials=concurrent_trials(settings),
                scheduler=scheduler,
            ),
            run_config=tune.RunConfig(
                name=run_name,
                storage_path=storage_path,
                storage_filesystem=storage_filesystem,
            ),
        )
    return tuner.fit()
