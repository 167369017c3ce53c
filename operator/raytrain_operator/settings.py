"""Operator configuration: command-line/environment options and kopf's settings.

kopf keeps its bookkeeping under our own prefix (`raytrain.dev/...`), in annotations only: the
TrainJob's status schema is strict, so nothing may be stored there but what we write on purpose.
Watch timeouts are explicit because a watch that silently stops delivering events is the known
production failure of kopf operators.
"""

from __future__ import annotations

import concurrent.futures
import os
from dataclasses import dataclass, field

import kopf

PREFIX = "raytrain.dev"
FINALIZER = f"{PREFIX}/finalizer"


def _env_float(name: str, default: float) -> float:
    value = os.environ.get(name)
    return float(value) if value else default


@dataclass
class OperatorConfig:
    namespaces: list[str] = field(default_factory=list)
    metrics_port: int = 8080
    health_port: int = 8081
    verbose: bool = False
    #: Every TrainJob is reconciled at least this often (RayJob status, deadlines, TTL).
    resync_seconds: float = field(
        default_factory=lambda: _env_float("RAYTRAIN_RESYNC_SECONDS", 10.0)
    )
    #: How long to wait before re-checking storage or credentials that were missing.
    preflight_retry_seconds: float = field(
        default_factory=lambda: _env_float("RAYTRAIN_PREFLIGHT_RETRY_SECONDS", 15.0)
    )
    #: Longest wait for the runtime's checkpoint before a suspend goes ahead.
    checkpoint_grace_seconds: float = field(
        default_factory=lambda: _env_float("RAYTRAIN_CHECKPOINT_GRACE_SECONDS", 120.0)
    )
    workers: int = 16


CONFIG = OperatorConfig()


def configure_kopf(settings: kopf.OperatorSettings, config: OperatorConfig) -> None:
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=PREFIX)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=PREFIX, key="last-handled-configuration"
    )
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.watching.connect_timeout = 10
    settings.watching.inactivity_timeout = 600
    settings.execution.executor = concurrent.futures.ThreadPoolExecutor(
        max_workers=config.workers, thread_name_prefix="raytrain"
    )
