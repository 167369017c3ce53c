"""What passes between the raytrain operator and the trainer runtime, defined once.

A small package both sides import (pydantic only: no kopf, no Kubernetes client, no Ray): the
versioned runtime contract (`raytrain_contract.v1`) and the timestamp format both writers of a
TrainJob's status use.
"""

from raytrain_contract.v1 import (
    CONTRACT_DIR,
    CONTRACT_ENV,
    CONTRACT_KEY,
    CONTRACT_PATH,
    CONTRACT_VERSION,
    DEFAULT_REPORT_MIN_INTERVAL_SECONDS,
    DEFAULT_TORCH_TIMEOUT_SECONDS,
    CheckpointSettings,
    Contract,
    ContractError,
    Dataset,
    FailureSettings,
    PvcStorage,
    ReportSettings,
    S3Storage,
    Scaling,
    Storage,
    TorchSettings,
    TrainJobRef,
    TuneScheduler,
    TuneSettings,
    dump_contract,
    load_contract,
    read_contract,
    to_json,
    unknown_keys,
)

__all__ = [
    "CONTRACT_DIR",
    "CONTRACT_ENV",
    "CONTRACT_KEY",
    "CONTRACT_PATH",
    "CONTRACT_VERSION",
    "DEFAULT_REPORT_MIN_INTERVAL_SECONDS",
    "DEFAULT_TORCH_TIMEOUT_SECONDS",
    "CheckpointSettings",
    "Contract",
    "ContractError",
    "Dataset",
    "FailureSettings",
    "PvcStorage",
    "ReportSettings",
    "S3Storage",
    "Scaling",
    "Storage",
    "TorchSettings",
    "TrainJobRef",
    "TuneScheduler",
    "TuneSettings",
    "dump_contract",
    "load_contract",
    "read_contract",
    "to_json",
    "unknown_keys",
]
