"""Parse the runtime contract (docs/runtime-contract.md) into typed, frozen dataclasses.

The operator renders the document; this module is the runtime's only reader of it. Every key the
document defines is required (values may be null where the doc says so), unknown keys are refused,
and an unknown ``contractVersion`` is refused with a message naming both versions.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

SUPPORTED_VERSION = 1

_TOP_KEYS = {
    "contractVersion",
    "trainJob",
    "runName",
    "attempt",
    "entrypoint",
    "config",
    "scaling",
    "torch",
    "storage",
    "checkpoint",
    "failure",
    "datasets",
    "tune",
    "report",
}
_PLACEMENT = {"PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"}
_FORMATS = {"parquet", "csv", "json", "numpy", "text"}


class ContractError(ValueError):
    """The contract document is malformed; the message names the key and the bad value."""


@dataclass(frozen=True)
class TrainJobRef:
    api_version: str
    namespace: str
    name: str
    uid: str


@dataclass(frozen=True)
class Scaling:
    num_workers: int | None
    min_workers: int | None
    max_workers: int | None
    use_gpu: bool
    resources_per_worker: dict[str, float]
    placement_strategy: str
    accelerator_type: str | None

    @property
    def elastic(self) -> bool:
        return self.num_workers is None


@dataclass(frozen=True)
class TorchSettings:
    backend: str
    timeout_seconds: int


@dataclass(frozen=True)
class Storage:
    type: Literal["pvc", "s3"]
    path: str
    endpoint: str | None = None
    region: str | None = None


@dataclass(frozen=True)
class CheckpointSettings:
    num_to_keep: int | None
    score_attribute: str | None
    score_order: Literal["max", "min"] | None


@dataclass(frozen=True)
class FailureSettings:
    max_failures: int


@dataclass(frozen=True)
class Dataset:
    uri: str
    format: str
    split: bool


@dataclass(frozen=True)
class TuneScheduler:
    type: str
    max_t: int | None
    grace_period: int
    reduction_factor: float


@dataclass(frozen=True)
class TuneSettings:
    param_space: dict[str, Any]
    num_samples: int
    metric: str
    mode: Literal["max", "min"]
    max_concurrent_trials: int | None
    scheduler: TuneScheduler | None


@dataclass(frozen=True)
class ReportSettings:
    enabled: bool
    min_interval_seconds: float


@dataclass(frozen=True)
class Contract:
    contract_version: int
    train_job: TrainJobRef
    run_name: str
    attempt: int
    entrypoint: str
    config: dict[str, Any]
    scaling: Scaling
    torch: TorchSettings
    storage: Storage
    checkpoint: CheckpointSettings
    failure: FailureSettings
    datasets: dict[str, Dataset] = field(default_factory=dict)
    tune: TuneSettings | None = None
    report: ReportSettings = ReportSettings(enabled=True, min_interval_seconds=5.0)


# -- small typed readers: each names the full key path of a bad value ---------------------------


def _obj(data: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(data, Mapping):
        raise ContractError(f"{where}: expected an object, got {data!r}")
    return data


def _keys(data: Mapping[str, Any], where: str, required: set[str], optional: set[str]) -> None:
    unknown = set(data) - required - optional
    if unknown:
        raise ContractError(
            f"{where}: unknown key(s) {sorted(unknown)}; contract v{SUPPORTED_VERSION} "
            f"defines {sorted(required | optional)}"
        )
    missing = required - set(data)
    if missing:
        raise ContractError(f"{where}: missing key(s) {sorted(missing)}")


def _str(v: Any, where: str, *, nullable: bool = False) -> Any:
    if v is None and nullable:
        return None
    if not isinstance(v, str) or not v:
        raise ContractError(f"{where}: expected a non-empty string, got {v!r}")
    return v


def _int(v: Any, where: str, *, nullable: bool = False, minimum: int | None = None) -> Any:
    if v is None and nullable:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise ContractError(f"{where}: expected an integer, got {v!r}")
    if minimum is not None and v < minimum:
        raise ContractError(f"{where}: must be >= {minimum}, got {v!r}")
    return v


def _num(v: Any, where: str) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise ContractError(f"{where}: expected a number, got {v!r}")
    return float(v)


def _bool(v: Any, where: str) -> bool:
    if not isinstance(v, bool):
        raise ContractError(f"{where}: expected true or false, got {v!r}")
    return v


def _order(v: Any, where: str, *, nullable: bool) -> Any:
    if v is None and nullable:
        return None
    if v not in ("max", "min"):
        raise ContractError(f"{where}: expected 'max' or 'min', got {v!r}")
    return v


# -- sections ------------------------------------------------------------------------------------


def _train_job(d: Any) -> TrainJobRef:
    o = _obj(d, "trainJob")
    _keys(o, "trainJob", {"namespace", "name", "uid"}, {"apiVersion"})
    return TrainJobRef(
        api_version=_str(o.get("apiVersion", "raytrain.dev/v1alpha1"), "trainJob.apiVersion"),
        namespace=_str(o["namespace"], "trainJob.namespace"),
        name=_str(o["name"], "trainJob.name"),
        uid=_str(o["uid"], "trainJob.uid"),
    )


def _scaling(d: Any) -> Scaling:
    o = _obj(d, "scaling")
    keys = {
        "numWorkers",
        "minWorkers",
        "maxWorkers",
        "useGpu",
        "resourcesPerWorker",
        "placementStrategy",
        "acceleratorType",
    }
    _keys(o, "scaling", keys, set())
    num = _int(o["numWorkers"], "scaling.numWorkers", nullable=True, minimum=1)
    lo = _int(o["minWorkers"], "scaling.minWorkers", nullable=True, minimum=1)
    hi = _int(o["maxWorkers"], "scaling.maxWorkers", nullable=True, minimum=1)
    if num is None and (lo is None or hi is None):
        raise ContractError(
            "scaling: set either numWorkers or both minWorkers and maxWorkers "
            f"(got numWorkers={num!r}, minWorkers={lo!r}, maxWorkers={hi!r})"
        )
    if num is not None and (lo is not None or hi is not None):
        raise ContractError(
            f"scaling: numWorkers={num!r} and minWorkers/maxWorkers={lo!r}/{hi!r} are exclusive"
        )
    if lo is not None and hi is not None and lo > hi:
        raise ContractError(f"scaling: minWorkers={lo} must be <= maxWorkers={hi}")
    res = _obj(o["resourcesPerWorker"] or {}, "scaling.resourcesPerWorker")
    resources = {str(k): _num(v, f"scaling.resourcesPerWorker.{k}") for k, v in res.items()}
    placement = o["placementStrategy"] or "PACK"
    if placement not in _PLACEMENT:
        raise ContractError(
            f"scaling.placementStrategy: {placement!r} is not one of {sorted(_PLACEMENT)}"
        )
    return Scaling(
        num_workers=num,
        min_workers=lo,
        max_workers=hi,
        use_gpu=_bool(o["useGpu"], "scaling.useGpu"),
        resources_per_worker=resources,
        placement_strategy=placement,
        accelerator_type=_str(o["acceleratorType"], "scaling.acceleratorType", nullable=True),
    )


def _torch(d: Any) -> TorchSettings:
    o = _obj(d, "torch")
    _keys(o, "torch", {"backend", "timeoutSeconds"}, set())
    return TorchSettings(
        backend=_str(o["backend"], "torch.backend"),
        timeout_seconds=_int(o["timeoutSeconds"], "torch.timeoutSeconds", minimum=1),
    )


def _storage(d: Any) -> Storage:
    o = _obj(d, "storage")
    kind = o.get("type")
    if kind == "pvc":
        _keys(o, "storage", {"type", "path"}, set())
        path = _str(o["path"], "storage.path")
        if not path.startswith("/"):
            raise ContractError(f"storage.path: a pvc path must be absolute, got {path!r}")
        return Storage(type="pvc", path=path)
    if kind == "s3":
        _keys(o, "storage", {"type", "path", "endpoint", "region"}, set())
        path = _str(o["path"], "storage.path")
        if not path.startswith("s3://") or len(path) <= len("s3://"):
            raise ContractError(f"storage.path: expected s3://bucket[/prefix], got {path!r}")
        return Storage(
            type="s3",
            path=path.rstrip("/"),
            endpoint=_str(o["endpoint"], "storage.endpoint", nullable=True),
            region=_str(o["region"], "storage.region", nullable=True),
        )
    raise ContractError(f"storage.type: expected 'pvc' or 's3', got {kind!r}")


def _checkpoint(d: Any) -> CheckpointSettings:
    o = _obj(d, "checkpoint")
    _keys(o, "checkpoint", set(), {"numToKeep", "scoreAttribute", "scoreOrder"})
    return CheckpointSettings(
        num_to_keep=_int(o.get("numToKeep"), "checkpoint.numToKeep", nullable=True, minimum=1),
        score_attribute=_str(o.get("scoreAttribute"), "checkpoint.scoreAttribute", nullable=True),
        score_order=_order(o.get("scoreOrder"), "checkpoint.scoreOrder", nullable=True),
    )


def _failure(d: Any) -> FailureSettings:
    o = _obj(d, "failure")
    _keys(o, "failure", {"maxFailures"}, set())
    return FailureSettings(max_failures=_int(o["maxFailures"], "failure.maxFailures", minimum=-1))


def _datasets(d: Any) -> dict[str, Dataset]:
    o = _obj(d or {}, "datasets")
    out: dict[str, Dataset] = {}
    for name, spec in o.items():
        where = f"datasets.{name}"
        s = _obj(spec, where)
        _keys(s, where, {"uri", "format"}, {"split"})
        fmt = s["format"]
        if fmt not in _FORMATS:
            raise ContractError(f"{where}.format: {fmt!r} is not one of {sorted(_FORMATS)}")
        out[str(name)] = Dataset(
            uri=_str(s["uri"], f"{where}.uri"),
            format=fmt,
            split=_bool(s.get("split", True), f"{where}.split"),
        )
    return out


def _tune(d: Any) -> TuneSettings | None:
    if d is None:
        return None
    o = _obj(d, "tune")
    _keys(
        o,
        "tune",
        {"paramSpace", "metric"},
        {"numSamples", "mode", "maxConcurrentTrials", "scheduler"},
    )
    sched = None
    if o.get("scheduler") is not None:
        s = _obj(o["scheduler"], "tune.scheduler")
        _keys(s, "tune.scheduler", set(), {"type", "maxT", "gracePeriod", "reductionFactor"})
        stype = s.get("type") or "ASHA"
        if stype not in ("ASHA", "FIFO"):
            raise ContractError(f"tune.scheduler.type: expected ASHA or FIFO, got {stype!r}")
        sched = TuneScheduler(
            type=stype,
            max_t=_int(s.get("maxT"), "tune.scheduler.maxT", nullable=True, minimum=1),
            grace_period=_int(s.get("gracePeriod", 1) or 1, "tune.scheduler.gracePeriod"),
            reduction_factor=_num(s.get("reductionFactor", 2.0) or 2.0, "tune.reductionFactor"),
        )
    return TuneSettings(
        param_space=dict(_obj(o["paramSpace"], "tune.paramSpace")),
        num_samples=_int(o.get("numSamples", 1), "tune.numSamples", minimum=1),
        metric=_str(o["metric"], "tune.metric"),
        mode=_order(o.get("mode") or "max", "tune.mode", nullable=False),
        max_concurrent_trials=_int(
            o.get("maxConcurrentTrials"), "tune.maxConcurrentTrials", nullable=True, minimum=1
        ),
        scheduler=sched,
    )


def _report(d: Any) -> ReportSettings:
    o = _obj(d, "report")
    _keys(o, "report", {"enabled", "minIntervalSeconds"}, set())
    interval = _num(o["minIntervalSeconds"], "report.minIntervalSeconds")
    if interval < 0:
        raise ContractError(f"report.minIntervalSeconds: must be >= 0, got {interval!r}")
    return ReportSettings(
        enabled=_bool(o["enabled"], "report.enabled"), min_interval_seconds=interval
    )


def load_contract(data: Mapping[str, Any]) -> Contract:
    """Parse a contract document (already decoded from JSON)."""
    o = _obj(data, "contract")
    version = o.get("contractVersion")
    if version != SUPPORTED_VERSION:
        raise ContractError(
            f"contractVersion: this runtime reads version {SUPPORTED_VERSION}, the document is "
            f"version {version!r}; use a trainer runtime image that matches the operator"
        )
    _keys(o, "contract", _TOP_KEYS - {"tune", "datasets"}, {"tune", "datasets"})
    entrypoint = _str(o["entrypoint"], "entrypoint")
    if ":" not in entrypoint:
        raise ContractError(
            f"entrypoint: expected 'module:function' or 'path/to/script.py:function', "
            f"got {entrypoint!r}"
        )
    config = o["config"]
    return Contract(
        contract_version=version,
        train_job=_train_job(o["trainJob"]),
        run_name=_str(o["runName"], "runName"),
        attempt=_int(o["attempt"], "attempt", minimum=0),
        entrypoint=entrypoint,
        config=dict(_obj(config, "config")) if config is not None else {},
        scaling=_scaling(o["scaling"]),
        torch=_torch(o["torch"]),
        storage=_storage(o["storage"]),
        checkpoint=_checkpoint(o["checkpoint"] or {}),
        failure=_failure(o["failure"] or {"maxFailures": 0}),
        datasets=_datasets(o.get("datasets")),
        tune=_tune(o.get("tune")),
        report=_report(o["report"]),
    )


def read_contract(path: str | Path) -> Contract:
    """Read and parse the contract file (normally $RAYTRAIN_CONTRACT)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ContractError(f"cannot read the runtime contract at {p}: {exc}") from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ContractError(f"the runtime contract at {p} is not valid JSON: {exc}") from exc
    return load_contract(data)
