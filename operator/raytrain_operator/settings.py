"""Operator configuration: command-line/environment options and kopf's settings.

No handler of ours keeps progress or a diff base in kopf's bookkeeping annotations (there is
no change handler: handlers/trainjobs.py), so kopf writes nothing on a TrainJob; should it ever,
it writes under its own prefix, `kopf.raytrain.dev/`: `raytrain.dev/` is the API's label and
annotation vocabulary, and the TrainJob's status schema is strict, so nothing may be stored
there but what we write on purpose. Releases before 0.2 put kopf's finalizer under
`raytrain.dev/` (`LEGACY_FINALIZER`, removed by handlers/legacy.py). No handler needs a
finalizer; `FINALIZER` is the one earlier versions had kopf put on running TrainJobs (for a
per-job resync timer), named so that kopf removes it where it finds it.
Watch timeouts are explicit because a watch that silently stops delivering events is the known
production failure of kopf operators.
"""

from __future__ import annotations

import concurrent.futures
import copy
import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, cast

import kopf

from raytrain_operator.builders.network import DEFAULT_INGRESS, parse_ingress
from raytrain_operator.builders.selectors import SELECTOR_ENV, parse_selector

KOPF_PREFIX = "kopf.raytrain.dev"
#: The KopfPeering (namespaced runs) or ClusterKopfPeering (cluster-wide) object instances
#: share: one works, the others wait (settings.peering).
PEERING_NAME = "raytrain-operator"
PEERING_MODES = ("auto", "required", "off")
FINALIZER = f"{KOPF_PREFIX}/finalizer"

#: What releases before 0.2 wrote under the API's own prefix.
LEGACY_PREFIX = "raytrain.dev"
LEGACY_FINALIZER = f"{LEGACY_PREFIX}/finalizer"

#: Seconds the API server keeps one watch request open before it ends it. Each new request
#: re-establishes the stream, so a stream stuck somewhere between us and etcd lives at most
#: this long even if bookmarks were to keep arriving.
WATCH_SERVER_TIMEOUT = 300
#: The client's own limit on one watch request: a little over the server's, so it fires only
#: when the server's end never arrives (a half-open connection).
WATCH_CLIENT_TIMEOUT = WATCH_SERVER_TIMEOUT + 30
#: Connecting to the API server; a failed connect is retried at once by kopf.
WATCH_CONNECT_TIMEOUT = 10


def _env_float(name: str, default: float) -> float:
    value = os.environ.get(name)
    return float(value) if value else default


def _env_bool(name: str, default: bool) -> bool:
    """`true`/`false` (also 1/0, yes/no, on/off, any case); unset or empty: the default."""
    value = (os.environ.get(name) or "").strip().lower()
    if not value:
        return default
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"{name}={value!r}: set it to true or false")


def _env_names(name: str) -> frozenset[str]:
    """A comma-separated list of names (spaces ignored); unset or empty: none."""
    value = os.environ.get(name) or ""
    return frozenset(part.strip() for part in value.split(",") if part.strip())


def _env_ingress(name: str) -> list[dict[str, Any]]:
    """A JSON list of NetworkPolicy ingress rules; unset or empty: KubeRay to the dashboard."""
    value = (os.environ.get(name) or "").strip()
    return parse_ingress(value, name) if value else copy.deepcopy(DEFAULT_INGRESS)


@dataclass
class OperatorConfig:
    namespaces: list[str] = field(default_factory=list)
    metrics_port: int = 8080
    health_port: int = 8081
    verbose: bool = False
    #: How often the whole set is listed and compared with what the passes read (the safety
    #: net for a missed event; handlers/engine.py). No job gets a pass of its own for it:
    #: events and the times a plan names (deadlines, grace periods, the TTL) bring passes.
    resync_seconds: float = field(
        default_factory=lambda: _env_float("RAYTRAIN_RESYNC_SECONDS", 300.0)
    )
    #: How long to wait before re-checking storage or credentials that were missing.
    preflight_retry_seconds: float = field(
        default_factory=lambda: _env_float("RAYTRAIN_PREFLIGHT_RETRY_SECONDS", 15.0)
    )
    #: Longest wait for the runtime's checkpoint before a suspend goes ahead.
    checkpoint_grace_seconds: float = field(
        default_factory=lambda: _env_float("RAYTRAIN_CHECKPOINT_GRACE_SECONDS", 120.0)
    )
    #: Whether a TrainJob may set spec.head/workerTemplate.serviceAccountName. Off (chart value
    #: podOverrides.allowServiceAccountName=false), such a TrainJob stalls before anything is
    #: created: whoever may create TrainJobs could otherwise run pods as any ServiceAccount of
    #: the namespace.
    allow_service_account_name: bool = field(
        default_factory=lambda: _env_bool("RAYTRAIN_ALLOW_SERVICE_ACCOUNT_NAME", True)
    )
    #: Whether a TrainJob may set spec.head/workerTemplate.envFrom (chart value
    #: podOverrides.allowEnvFrom): off, a TrainJob cannot load any Secret of its namespace into
    #: its pods' environment.
    allow_env_from: bool = field(default_factory=lambda: _env_bool("RAYTRAIN_ALLOW_ENV_FROM", True))
    #: Whether a TrainJob may put its pods in the node's network namespace
    #: (spec.head/workerTemplate.hostNetwork; chart value podOverrides.allowHostNetwork). Off
    #: by default: a pod on the host network reaches every service on the node's interfaces,
    #: and the restricted Pod Security profile refuses it. A ClusterTrainJobTemplate that sets
    #: it grants it to the jobs that name the template (handlers/preflight.py).
    allow_host_network: bool = field(
        default_factory=lambda: _env_bool("RAYTRAIN_ALLOW_HOST_NETWORK", False)
    )
    #: Whether a TrainJob may set spec.network (chart value podOverrides.allowNetworkProfiles),
    #: whose profiles add the IPC_LOCK capability to the workers: the restricted Pod Security
    #: profile adds none. Off by default; a ClusterTrainJobTemplate that sets spec.network
    #: grants it to the jobs that name the template.
    allow_network_profiles: bool = field(
        default_factory=lambda: _env_bool("RAYTRAIN_ALLOW_NETWORK_PROFILES", False)
    )
    #: Volume types a TrainJob may add to its pods beyond those of the restricted Pod Security
    #: profile (preflight.RESTRICTED_VOLUME_TYPES), e.g. nfs (chart value
    #: podOverrides.volumeTypes, RAYTRAIN_VOLUME_TYPES comma-separated). None by default: a
    #: hostPath of /proc on a shared node reads other tenants' environment.
    volume_types: frozenset[str] = field(
        default_factory=lambda: _env_names("RAYTRAIN_VOLUME_TYPES")
    )
    #: Runtime classes a TrainJob may name in spec.head/workerTemplate.runtimeClassName (chart
    #: value podOverrides.runtimeClasses, RAYTRAIN_RUNTIME_CLASSES comma-separated). None by
    #: default: a runtime class picks the node's container runtime handler (nvidia's hands the
    #: pod every GPU of the node past the device plugin), which the restricted Pod Security
    #: profile leaves to the administrator.
    runtime_classes: frozenset[str] = field(
        default_factory=lambda: _env_names("RAYTRAIN_RUNTIME_CLASSES")
    )
    #: Schedulers a TrainJob may name in spec.head/workerTemplate.schedulerName besides the
    #: default one (chart value podOverrides.schedulers, RAYTRAIN_SCHEDULERS comma-separated):
    #: another scheduler places pods by its own rules, past the quotas and placement the
    #: cluster's own keeps.
    schedulers: frozenset[str] = field(default_factory=lambda: _env_names("RAYTRAIN_SCHEDULERS"))
    #: The namespaces whose TrainJobs this operator manages: a LabelSelector on their labels
    #: (chart value namespaceSelector, RAYTRAIN_NAMESPACE_SELECTOR as JSON). None: every
    #: namespace it watches (handlers/namespaces.py).
    namespace_selector: dict[str, Any] | None = field(
        default_factory=lambda: parse_selector(os.environ.get(SELECTOR_ENV) or "")
    )
    #: Whether preflight reads the credentials Secret a job names (its key names only) before
    #: anything is created. The chart turns it off unless its account may (rbac.readSecrets,
    #: off by default: no `get secrets`); the pods' own failure then names a missing Secret or
    #: key (status/triage/config.py, config_problem). A 403 skips the check either way.
    read_secrets: bool = field(default_factory=lambda: _env_bool("RAYTRAIN_READ_SECRETS", True))
    #: Whether each TrainJob gets a NetworkPolicy that admits to its pods only its own pods and
    #: the peers below (chart value networkPolicy.enabled; builders/network.py).
    network_policy: bool = field(default_factory=lambda: _env_bool("RAYTRAIN_NETWORK_POLICY", True))
    #: The peers every job's NetworkPolicy admits besides the job's own pods (chart values
    #: networkPolicy.kuberay and networkPolicy.extraIngress).
    network_policy_ingress: list[dict[str, Any]] = field(
        default_factory=lambda: _env_ingress("RAYTRAIN_NETWORK_POLICY_INGRESS")
    )
    #: Passes that run at once (and the threads that carry their side-by-side requests).
    workers: int = 16
    #: kopf peering: auto (peer when the peering object exists), required (refuse to run
    #: without it), off (standalone).
    peering_mode: str = "auto"
    peering_name: str = PEERING_NAME
    #: Among running instances the highest priority works, the others wait; two instances of
    #: the same priority would both pause. Default: the start time in ms (the newest wins).
    peering_priority: int = 0


class NoDiffBase(kopf.DiffBaseStorage):
    """kopf builds a diff base (a deep copy of the object, less its status) of every event,
    for change handlers, daemons and timers: the operator has none of them (handlers/
    trainjobs.py), so it keeps none and stores none. Every event of every watched kind would
    otherwise cost a copy of its object."""

    def build(self, *, body: kopf.Body, extra_fields: Any = None) -> kopf.BodyEssence:
        return cast(kopf.BodyEssence, {})

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        return None

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        return None


#: The Kubernetes client logs the body of every response it deserialises here, at DEBUG.
CLIENT_BODY_LOGGER = "kubernetes.client.rest"


class NoSecretBodies(logging.Filter):
    """Drops the client's DEBUG record of a response body that is a Secret or a SecretList.

    `--verbose` puts every logger at DEBUG. The operator reads Secrets without that record
    (handlers/preflight.py); this filter keeps any other read of a Secret from logging it too.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else (record.args,)
        for arg in args:
            text = arg.decode(errors="replace") if isinstance(arg, bytes) else str(arg)
            if '"kind":"Secret' in text.replace(" ", ""):
                return False
        return True


#: kopf's logger of per-object lines.
KOPF_OBJECTS_LOGGER = "kopf.objects"


class QuietEventHandlers(logging.Filter):
    """Drops kopf's "Handler '...' succeeded." line of an event handler, written at INFO for
    every event of every watched object: our event handlers only queue work, so each line would
    say nothing at all, several times per TrainJob (handlers/trainjobs.py, events.py, legacy.py).
    Failures, and every line in verbose mode, pass."""

    def __init__(self, handler_ids: Iterable[str]) -> None:
        super().__init__()
        self._lines = frozenset(f"Handler '{h}' succeeded." for h in handler_ids)

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.levelno == logging.INFO and record.msg in self._lines)


#: The ids of our kopf event handlers (kopf.on.event), whose success lines are dropped.
EVENT_HANDLER_IDS = ("trainjob-event", "wake-trainjob", "wake-trainjob-cluster", "legacy-finalizer")


def install_log_filters(verbose: bool = False) -> None:
    logger = logging.getLogger(CLIENT_BODY_LOGGER)
    if not any(isinstance(f, NoSecretBodies) for f in logger.filters):
        logger.addFilter(NoSecretBodies())
    objects = logging.getLogger(KOPF_OBJECTS_LOGGER)
    for found in [f for f in objects.filters if isinstance(f, QuietEventHandlers)]:
        objects.removeFilter(found)
    if not verbose:
        objects.addFilter(QuietEventHandlers(EVENT_HANDLER_IDS))


def configure_kopf(settings: kopf.OperatorSettings, config: OperatorConfig) -> None:
    install_log_filters(config.verbose)
    settings.persistence.finalizer = FINALIZER
    settings.peering.name = config.peering_name
    settings.peering.standalone = config.peering_mode == "off"
    settings.peering.mandatory = config.peering_mode == "required"
    settings.peering.priority = config.peering_priority
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=KOPF_PREFIX)
    settings.persistence.diffbase_storage = NoDiffBase()
    # inactivity_timeout stays at kopf's default (70 s): the API server sends a bookmark every
    # minute and keeps 75 s of events, so a stream silent for longer is dead and is reopened
    # while the events it missed can still be replayed.
    settings.watching.server_timeout = WATCH_SERVER_TIMEOUT
    settings.watching.client_timeout = WATCH_CLIENT_TIMEOUT
    settings.watching.connect_timeout = WATCH_CONNECT_TIMEOUT
    # Events are the transitions reconcile posts on purpose; handler log lines ("Handler
    # 'resume' succeeded" for every TrainJob at each start) would otherwise become Events too.
    settings.posting.loggers = False
    # kopf's own handlers only queue work (or remove an old finalizer): a few threads do.
    settings.execution.executor = concurrent.futures.ThreadPoolExecutor(
        max_workers=4, thread_name_prefix="raytrain-kopf"
    )
