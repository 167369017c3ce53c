"""Version 1 of the runtime contract: the one model both the operator and the runtime use.

The operator builds a `Contract` and renders it with `dump_contract`; the runtime reads the
mounted file with `read_contract`. Both sides therefore agree on every key, type and default by
construction, and a change to the document is a change to this file alone.

Compatibility rules (docs/runtime-contract.md):

- `contractVersion` is the major version. A runtime refuses a document of another major version
  with a message naming both.
- Within a major version, keys this runtime does not know are ignored with a warning, so an
  operator release that adds an optional key keeps working with images built FROM an older
  runtime. New keys must therefore be optional, with a default that means "as before".
- The 0.1.0 runtime refused unknown keys and required every key it knew. `dump_contract` writes
  every known key (nulls included) and leaves out keys added later while they hold their
  default, so documents of jobs that do not use a newer feature still parse there. The contract
  tests feed documents to the 0.1.0 parser to keep that true.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

CONTRACT_VERSION = 1
"""The major version this package renders and reads."""

# Where the operator mounts the document and what the runtime reads by default.
CONTRACT_DIR = "/etc/raytrain"
CONTRACT_KEY = "contract.json"
CONTRACT_PATH = f"{CONTRACT_DIR}/{CONTRACT_KEY}"
CONTRACT_ENV = "RAYTRAIN_CONTRACT"

# Defaults, written once: the operator renders them and the runtime falls back to them.
DEFAULT_TORCH_TIMEOUT_SECONDS = 1800
DEFAULT_REPORT_MIN_INTERVAL_SECONDS = 5.0

PlacementStrategy = Literal["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"]
DatasetFormat = Literal["parquet", "csv", "json", "numpy", "text"]
Order = Literal["max", "min"]

log = logging.getLogger("raytrain_contract")


class ContractError(ValueError):
    """The contract document is malformed; the message names the key and the bad value."""


class _Section(BaseModel):
    """Base of every section: camelCase keys on the wire, snake_case in Python, immutable.

    Unknown keys are dropped here (``extra="ignore"``); `load_contract` reports them first with
    their full path.
    """

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        frozen=True,
        extra="ignore",
    )


class TrainJobRef(_Section):
    api_version: str = Field(default="raytrain.dev/v1alpha1", min_length=1)
    namespace: str = Field(min_length=1)
    name: str = Field(min_length=1)
    uid: str = Field(min_length=1)


class Scaling(_Section):
    num_workers: int | None = Field(default=None, ge=1)
    min_workers: int | None = Field(default=None, ge=1)
    max_workers: int | None = Field(default=None, ge=1)
    use_gpu: bool = False
    # Already in Ray's terms: CPU, GPU, memory (bytes) and custom resource names.
    resources_per_worker: dict[str, int | float] = Field(default_factory=dict)
    placement_strategy: PlacementStrategy = "PACK"
    accelerator_type: str | None = None

    @field_validator("resources_per_worker", mode="before")
    @classmethod
    def _null_is_empty(cls, value: Any) -> Any:
        return {} if value is None else value

    @field_validator("placement_strategy", mode="before")
    @classmethod
    def _null_is_pack(cls, value: Any) -> Any:
        return "PACK" if value is None else value

    @model_validator(mode="after")
    def _fixed_or_elastic(self) -> Scaling:
        num, lo, hi = self.num_workers, self.min_workers, self.max_workers
        if num is None and (lo is None or hi is None):
            raise ValueError(
                "set either numWorkers or both minWorkers and maxWorkers "
                f"(got numWorkers={num!r}, minWorkers={lo!r}, maxWorkers={hi!r})"
            )
        if num is not None and (lo is not None or hi is not None):
            raise ValueError(
                f"numWorkers={num!r} and minWorkers/maxWorkers={lo!r}/{hi!r} are exclusive"
            )
        if lo is not None and hi is not None and lo > hi:
            raise ValueError(f"minWorkers={lo} must be <= maxWorkers={hi}")
        return self

    @property
    def elastic(self) -> bool:
        return self.num_workers is None


class TorchSettings(_Section):
    backend: str = Field(min_length=1)
    timeout_seconds: int = Field(default=DEFAULT_TORCH_TIMEOUT_SECONDS, ge=1)


class PvcStorage(_Section):
    """A shared mount, at the same absolute path in every pod."""

    type: Literal["pvc"] = "pvc"
    path: str

    @field_validator("path")
    @classmethod
    def _absolute(cls, path: str) -> str:
        if not path.startswith("/"):
            raise ValueError("a pvc path must be absolute")
        return path

    # The same attributes as S3Storage, so readers need not check the type first.
    @property
    def endpoint(self) -> str | None:
        return None

    @property
    def region(self) -> str | None:
        return None


class S3Storage(_Section):
    """An S3 or S3-compatible prefix. Credentials never travel in the document."""

    type: Literal["s3"] = "s3"
    path: str
    endpoint: str | None = None
    region: str | None = None

    @field_validator("path")
    @classmethod
    def _s3_uri(cls, path: str) -> str:
        if not path.startswith("s3://") or len(path.rstrip("/")) <= len("s3://"):
            raise ValueError("expected s3://bucket[/prefix]")
        return path.rstrip("/")


Storage = PvcStorage | S3Storage


class CheckpointSettings(_Section):
    num_to_keep: int | None = Field(default=None, ge=1)
    score_attribute: str | None = None
    score_order: Order | None = None
    #: What a resume checks of a checkpoint against its manifest (raytrain_contract.checkpoints).
    verify: Literal["checksums", "sizes"] = "checksums"


class FailureSettings(_Section):
    max_failures: int = Field(default=0, ge=-1)
    #: spec.failure.hangTimeoutSeconds: None derives the timeout from the report interval
    #: (raytrain_contract.hang), 0 turns the runtime's hang watch off.
    hang_timeout_seconds: float | None = Field(default=None, ge=0)
    #: spec.failure.onHang: Restart, Fail or Report (raytrain_contract.hang.ON_HANG_VALUES).
    on_hang: Literal["Restart", "Fail", "Report"] = "Restart"


class Dataset(_Section):
    uri: str = Field(min_length=1)
    format: DatasetFormat
    split: bool = True


class TuneScheduler(_Section):
    type: Literal["ASHA", "FIFO"] = "ASHA"
    max_t: int | None = Field(default=None, ge=1)
    grace_period: int = Field(default=1, ge=1)
    reduction_factor: float = Field(default=2.0, gt=1)

    @field_validator("type", mode="before")
    @classmethod
    def _null_is_asha(cls, value: Any) -> Any:
        return "ASHA" if value is None else value

    @field_validator("grace_period", "reduction_factor", mode="before")
    @classmethod
    def _null_is_default(cls, value: Any, info: Any) -> Any:
        if value is None:
            return cls.model_fields[info.field_name].default
        return value


class TuneSettings(_Section):
    param_space: dict[str, Any]
    num_samples: int = Field(default=1, ge=1)
    metric: str = Field(min_length=1)
    mode: Order = "max"
    max_concurrent_trials: int | None = Field(default=None, ge=1)
    scheduler: TuneScheduler | None = None


class ReportSettings(_Section):
    enabled: bool = True
    min_interval_seconds: float = Field(default=DEFAULT_REPORT_MIN_INTERVAL_SECONDS, ge=0)


class CodeSnapshot(_Section):
    """The user's code as a zip archive in the job's storage (spec.code): where it is and the
    SHA-256 of its bytes. The runtime refuses an archive whose hash differs."""

    uri: str = Field(min_length=1)
    sha256: str = Field(pattern="^[0-9a-f]{64}$")

    @field_validator("uri")
    @classmethod
    def _archive_location(cls, value: str) -> str:
        if not (value.startswith("s3://") or value.startswith("/")):
            raise ValueError("expected an s3:// URI or an absolute path")
        return value


class Contract(_Section):
    """The whole document for one attempt of one TrainJob."""

    contract_version: int = CONTRACT_VERSION
    train_job: TrainJobRef
    # Ray Train's run name: stable across attempts of one TrainJob, new for a re-created one.
    run_name: str = Field(min_length=1)
    attempt: int = Field(default=0, ge=0)
    entrypoint: str
    config: dict[str, Any] = Field(default_factory=dict)
    scaling: Scaling
    torch: TorchSettings
    storage: Storage = Field(discriminator="type")
    checkpoint: CheckpointSettings = Field(default_factory=CheckpointSettings)
    failure: FailureSettings = Field(default_factory=FailureSettings)
    datasets: dict[str, Dataset] = Field(default_factory=dict)
    tune: TuneSettings | None = None
    report: ReportSettings = Field(default_factory=ReportSettings)
    # A checkpoint of another run (an s3:// URI, or an absolute path on the shared mount) that
    # the loop gets from ray.train.get_checkpoint() while this run has none of its own.
    resume_from: str | None = Field(default=None, min_length=1)
    # The training code as a snapshot in storage, on the import path of the driver and every
    # worker; None: the entrypoint is imported from the image.
    code: CodeSnapshot | None = None

    @field_validator("resume_from")
    @classmethod
    def _checkpoint_location(cls, value: str | None) -> str | None:
        if value is not None and not (value.startswith("s3://") or value.startswith("/")):
            raise ValueError("expected an s3:// URI or an absolute path")
        return value

    @field_validator("config", "checkpoint", "failure", "datasets", "report", mode="before")
    @classmethod
    def _null_is_default(cls, value: Any) -> Any:
        return {} if value is None else value

    @field_validator("entrypoint")
    @classmethod
    def _module_and_function(cls, value: str) -> str:
        if ":" not in value:
            raise ValueError("expected 'module:function' or 'path/to/script.py:function'")
        return value


# Keys each section had in the 0.1.0 release. A key added since is left out of the rendered
# document while it holds its default (see the module docstring).
_ADDED_SINCE_0_1_0: dict[type[BaseModel], frozenset[str]] = {
    Contract: frozenset({"resume_from", "code"}),
    CheckpointSettings: frozenset({"verify"}),
    FailureSettings: frozenset({"hang_timeout_seconds", "on_hang"}),
}


def dump_contract(contract: Contract) -> dict[str, Any]:
    """The JSON-ready document: camelCase keys, every 0.1.0 key present (nulls included)."""
    document = contract.model_dump(mode="json", by_alias=True)
    _drop_unset_new_keys(contract, document)
    return document


def _drop_unset_new_keys(model: BaseModel, document: dict[str, Any]) -> None:
    added = _ADDED_SINCE_0_1_0.get(type(model), frozenset())
    for name, field in type(model).model_fields.items():
        key = field.alias or name
        value = getattr(model, name)
        if name in added and value == field.get_default(call_default_factory=True):
            document.pop(key, None)
        elif isinstance(value, BaseModel) and isinstance(document.get(key), dict):
            _drop_unset_new_keys(value, document[key])


def to_json(contract: Contract) -> str:
    return json.dumps(dump_contract(contract), indent=2, sort_keys=True)


def unknown_keys(data: Any, model: type[BaseModel] = Contract, where: str = "") -> list[str]:
    """Dotted paths of the keys in ``data`` that ``model`` (and its sections) do not define."""
    if not isinstance(data, Mapping):
        return []
    found: list[str] = []
    fields = {(f.alias or n): f for n, f in model.model_fields.items()}
    for key, value in data.items():
        path = f"{where}.{key}" if where else str(key)
        field = fields.get(key)
        if field is None:
            found.append(path)
            continue
        for section, keyed in _sections(field.annotation):
            if keyed and isinstance(value, Mapping):
                for name, item in value.items():
                    found += unknown_keys(item, section, f"{path}.{name}")
            elif not keyed:
                if isinstance(value, Mapping) and "type" in section.model_fields:
                    tag = section.model_fields["type"].default
                    if value.get("type") not in (None, tag):
                        continue
                found += unknown_keys(value, section, path)
    return found


def _sections(annotation: Any) -> list[tuple[type[BaseModel], bool]]:
    """The section models an annotation holds; True where they are values of a dict."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [(annotation, False)]
    origin = get_origin(annotation)
    args = get_args(annotation)
    if origin is dict and len(args) == 2:
        return [(m, True) for m, _ in _sections(args[1])]
    # Optional, unions and Annotated: whatever their members hold.
    return [found for arg in args for found in _sections(arg)]


def _describe(error: Mapping[str, Any]) -> str:
    loc = ".".join(str(p) for p in error.get("loc", ()) if not str(p).startswith("function-"))
    # Discriminated unions add the tag to the path: storage.s3.path reads as storage.path.
    loc = loc.replace("storage.s3.", "storage.").replace("storage.pvc.", "storage.")
    message = str(error.get("msg", "invalid")).removeprefix("Value error, ")
    if error.get("type") == "missing":
        return f"{loc}: missing key"
    if error.get("type") in ("union_tag_invalid", "union_tag_not_found"):
        tag = (
            (error.get("input") or {}).get("type")
            if isinstance(error.get("input"), Mapping)
            else None
        )
        return f"{loc}.type: expected 'pvc' or 's3', got {tag!r}"
    shown = error.get("input")
    if isinstance(shown, Mapping):
        return f"{loc}: {message}"
    return f"{loc}: {message}, got {shown!r}"


def load_contract(data: Any) -> Contract:
    """Parse a decoded document. Unknown keys are logged and ignored; errors name the key."""
    if not isinstance(data, Mapping):
        raise ContractError(f"contract: expected a JSON object, got {type(data).__name__}")
    version = data.get("contractVersion")
    if version != CONTRACT_VERSION:
        raise ContractError(
            f"contractVersion: this runtime reads version {CONTRACT_VERSION}, the document is "
            f"version {version!r}; use a trainer runtime image that matches the operator"
        )
    extra = unknown_keys(data)
    if extra:
        log.warning(
            "runtime contract v%d: ignoring key(s) this runtime does not know: %s "
            "(written by a newer operator; upgrade the trainer runtime image to use them)",
            CONTRACT_VERSION,
            ", ".join(extra),
        )
    try:
        return Contract.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(_describe(e) for e in exc.errors())
        raise ContractError(f"invalid runtime contract: {problems}") from None


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
