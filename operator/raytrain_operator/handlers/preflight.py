"""Checks that must pass before a RayJob is created: the spec fits, the storage and the
credentials exist.

A Ray cluster that starts without its checkpoint storage wastes GPUs and then fails in a way
that is hard to read; these checks fail early, with the field, the object and the fix.

Overrides an administrator turned off (OperatorConfig.allow_service_account_name and
allow_env_from, chart values podOverrides.*): a TrainJob that uses one stalls before anything
is created, since either lets whoever may create TrainJobs borrow rights they may not hold
(run pods as any ServiceAccount, read any Secret of the namespace).

Secrets: read only where the operator's account may (chart value rbac.readSecrets, off by
default, sets OperatorConfig.read_secrets; a 403 skips the check). Without it a missing Secret
or key is named from the pods' own failure (status/triage/config.py, config_problem), once they
exist. The API has no way to list a Secret's key names without sending its values too, so the
Secret is read as raw bytes (`_preload_content=False`: the Kubernetes client then never passes
the body to its debug logger, which logs every other response body at DEBUG), parsed here, and
only the names of its `data` keys are kept. A Stalled message names the one key that is missing,
never the Secret's other keys: a TrainJob creator who may not read the Secret learns nothing
from it but whether the key they named is there.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from raytrain_contract.api import templates
from raytrain_contract.api.v1alpha1 import TrainJob
from raytrain_contract.meta import Meta
from raytrain_operator import k8s
from raytrain_operator.builders.contract import CONTRACT_KEY, build_contract_configmap
from raytrain_operator.builders.errors import SpecError
from raytrain_operator.handlers import faults
from raytrain_operator.settings import OperatorConfig
from raytrain_operator.status import triage

#: Kubernetes' limit of a ConfigMap's data (keys and values together).
CONFIGMAP_LIMIT = 1024 * 1024
#: Kubernetes' limit of one object's annotations (keys and values together).
ANNOTATIONS_LIMIT = 256 * 1024
#: kopf keeps a copy of the spec (and the labels) in an annotation of the TrainJob, plus a small
#: progress record per handler: room for those next to the spec's own bytes.
KOPF_OVERHEAD = 4 * 1024

Problem = tuple[str, str]


def _json_size(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


def _largest_field(spec: dict[str, Any]) -> tuple[str, int]:
    name, value = max(spec.items(), key=lambda item: _json_size(item[1]))
    return f"spec.{name}", _json_size(value)


def spec_problem(trainjob: TrainJob, meta: Meta) -> Problem | None:
    """What in the spec itself keeps the children from being created (no API call).

    The API server cannot bound the size of free-form fields (`config`, `tune.paramSpace`,
    `affinity`): a spec that makes the contract ConfigMap larger than 1 MiB, or that leaves no
    room for kopf's copy of it in the TrainJob's annotations, would fail on every write.
    """
    spec = trainjob.spec.model_dump(mode="json", by_alias=True, exclude_none=True)
    biggest, biggest_size = _largest_field(spec)
    used = sum(len(k) + len(v) for k, v in meta.annotations.items())
    needed = _json_size(spec) + _json_size(dict(meta.labels)) + KOPF_OVERHEAD
    if used + needed > ANNOTATIONS_LIMIT:
        return (
            "SpecTooLarge",
            f"{biggest}: {biggest_size} bytes of JSON make the spec {_json_size(spec)} bytes; "
            f"the operator keeps a copy of the spec in an annotation and an object's "
            f"annotations may hold {ANNOTATIONS_LIMIT} bytes ({used} used already, e.g. by "
            "kubectl apply's last-applied-configuration). Keep large data out of the spec: put "
            f"it in the image or in the checkpoint storage and pass its path in {biggest}",
        )
    try:
        configmap = build_contract_configmap(trainjob, meta, 0)
    except SpecError as exc:
        return (faults.INVALID_SPEC, faults.spec_message(exc))
    size = sum(len(k) + len(v.encode()) for k, v in configmap["data"].items())
    if size > CONFIGMAP_LIMIT:
        return (
            "SpecTooLarge",
            f"{biggest}: the runtime contract ({CONTRACT_KEY}) would be {size} bytes, more "
            f"than the {CONFIGMAP_LIMIT} bytes a ConfigMap holds; {biggest} is {biggest_size} "
            "bytes of it. Put large data in the image or in the checkpoint storage and pass its "
            f"path in {biggest}",
        )
    return None


#: The pod overrides of a TrainJob: (field path under spec, attribute of TrainJobSpec).
_OVERRIDES = (("spec.head", "head"), ("spec.workerTemplate", "worker_template"))


def _describe_env_from(entries: list[dict[str, Any]]) -> str:
    """`secretRef s3-creds, configMapRef settings`: what the entries load, without values."""
    names = []
    for entry in entries:
        for kind in ("secretRef", "configMapRef"):
            ref = entry.get(kind)
            if isinstance(ref, dict):
                names.append(f"{kind} {ref.get('name')!r}")
    return ", ".join(names) or json.dumps(entries)


def override_problem(trainjob: TrainJob, config: OperatorConfig) -> Problem | None:
    """A serviceAccountName or envFrom that this operator's settings forbid.

    spec.storage.s3.serviceAccountName (IRSA) names the pods' account too, so it is forbidden
    with the overrides' serviceAccountName: otherwise it would be the same way around.
    """
    spec = trainjob.spec
    if not config.allow_service_account_name:
        accounts = [
            (f"{path}.serviceAccountName", getattr(spec, attr).service_account_name)
            for path, attr in _OVERRIDES
            if getattr(spec, attr) is not None
        ]
        if spec.storage.s3 is not None:
            accounts.append(
                ("spec.storage.s3.serviceAccountName", spec.storage.s3.service_account_name)
            )
        for path, account in accounts:
            if account:
                fix = (
                    " (for S3 access, use spec.storage.s3.credentialsSecret instead)"
                    if path.startswith("spec.storage")
                    else ""
                )
                return (
                    "OverrideForbidden",
                    f"{path}: {account!r} is not allowed here: this operator runs TrainJob pods "
                    "only as their per-job ServiceAccount (chart value "
                    f"podOverrides.allowServiceAccountName is false). Remove {path}{fix}, or ask "
                    "the cluster administrator to allow it",
                )
    if not config.allow_env_from:
        for path, attr in _OVERRIDES:
            overrides = getattr(spec, attr)
            if overrides is not None and overrides.env_from:
                return (
                    "OverrideForbidden",
                    f"{path}.envFrom: [{_describe_env_from(overrides.env_from)}] is not allowed "
                    "here: this operator does not load whole Secrets or ConfigMaps into "
                    "TrainJob pods (chart value podOverrides.allowEnvFrom is false). Remove "
                    f"{path}.envFrom and set the variables the job needs in {path}.env, or ask "
                    "the cluster administrator to allow it",
                )
    return None


#: The volume types the restricted Pod Security profile allows (Kubernetes' "Pod Security
#: Standards", restricted: "Volume Types"). Every other type (hostPath, nfs, iscsi, ...)
#: reaches past the pod: it must be granted (OperatorConfig.volume_types, or a
#: ClusterTrainJobTemplate that sets the volume).
RESTRICTED_VOLUME_TYPES = frozenset(
    {
        "configMap",
        "csi",
        "downwardAPI",
        "emptyDir",
        "ephemeral",
        "persistentVolumeClaim",
        "projected",
        "secret",
    }
)
CLUSTER_TEMPLATE = "ClusterTrainJobTemplate"
#: The scheduler a pod gets when it names none: no grant needed to name it.
DEFAULT_SCHEDULER = "default-scheduler"
#: What naming each of these chooses for the pods, for the refusal.
_CHOOSES = {
    "runtimeClassName": "a runtime class picks the container runtime handler the node runs "
    "the pods with (nvidia's hands them every GPU of the node, past the device plugin)",
    "schedulerName": "a scheduler other than the cluster's places the pods by its own rules, "
    "past the quotas and placement the default scheduler keeps",
}
_RAW_OVERRIDES = (("head", "spec.head"), ("workerTemplate", "spec.workerTemplate"))


def _volume_type(volume: Mapping[str, Any]) -> str:
    kinds = sorted(k for k in volume if k != "name")
    return kinds[0] if len(kinds) == 1 else "/".join(kinds) or "(no source)"


def _named(entries: Any, name: Any) -> Mapping[str, Any] | None:
    for entry in entries if isinstance(entries, list) else ():
        if isinstance(entry, Mapping) and entry.get("name") == name:
            return entry
    return None


def pod_policy_problem(
    trainjob: TrainJob,
    config: OperatorConfig,
    own: Mapping[str, Any] | None = None,
    template: Mapping[str, Any] | None = None,
) -> Problem | None:
    """A volume type, hostNetwork or spec.network (IPC_LOCK) past the restricted Pod Security
    profile, or a runtime class or scheduler, that nobody with the right to grant it granted.

    Who may grant it: the cluster administrator, for every job (chart values
    podOverrides.volumeTypes, allowHostNetwork, allowNetworkProfiles, runtimeClasses and
    schedulers), or for the jobs that name a ClusterTrainJobTemplate, by setting it in that
    template (only a cluster administrator can write one). A namespaced TrainJobTemplate grants
    nothing: whoever may create TrainJobs in a namespace may usually write its templates too.
    ``own`` and ``template`` are the job's own spec and its template's (raw), to tell where a
    value came from.
    """
    spec = trainjob.spec
    own = own or {}
    granted = template if templates.reference(own) and _kind(own) == CLUSTER_TEMPLATE else None
    if spec.network is not None and not config.allow_network_profiles:
        from_template = "network" not in own and _object((granted or {}).get("network"))
        if not from_template:
            profile = spec.network.profile.value
            return (
                "OverrideForbidden",
                f"spec.network: profile {profile} is not allowed here: it adds the IPC_LOCK "
                "capability to the workers (RDMA pins memory), which the restricted Pod "
                "Security profile refuses. Remove spec.network (NCCL then uses TCP sockets), "
                "or ask a cluster administrator to grant it: for every job with the chart "
                "value podOverrides.allowNetworkProfiles, or for some jobs with a "
                "ClusterTrainJobTemplate that sets spec.network and that they name in "
                "spec.template",
            )
    for key, path in _RAW_OVERRIDES:
        overrides = getattr(spec, "head" if key == "head" else "worker_template")
        if overrides is None:
            continue
        mine = _object(own.get(key))
        theirs = _object((granted or {}).get(key))
        for i, volume in enumerate(overrides.volumes or []):
            kind = _volume_type(volume)
            if kind in RESTRICTED_VOLUME_TYPES or kind in config.volume_types:
                continue
            name = volume.get("name")
            if (
                _named(mine.get("volumes"), name) is None
                and _named(theirs.get("volumes"), name) == volume
            ):
                continue
            return (
                "OverrideForbidden",
                f"{path}.volumes[{i}] ({name!r}): a {kind} volume "
                f"({json.dumps(volume.get(kind), sort_keys=True)}) is not allowed here: TrainJob "
                "pods get only the volume types of the restricted Pod Security profile "
                f"({', '.join(sorted(RESTRICTED_VOLUME_TYPES))}). Use one of those (a "
                "persistentVolumeClaim for shared data), or ask a cluster administrator to grant "
                f"{kind}: for every job with the chart value podOverrides.volumeTypes, or for "
                "some jobs with a ClusterTrainJobTemplate that sets this volume and that they "
                "name in spec.template",
            )
        for name, value, allowed, setting in (
            (
                "runtimeClassName",
                overrides.runtime_class_name,
                config.runtime_classes,
                "podOverrides.runtimeClasses",
            ),
            (
                "schedulerName",
                overrides.scheduler_name,
                config.schedulers | {DEFAULT_SCHEDULER},
                "podOverrides.schedulers",
            ),
        ):
            if value is None or value in allowed:
                continue
            if name not in mine and theirs.get(name) == value:
                continue
            return (
                "OverrideForbidden",
                f"{path}.{name}: {value!r} is not allowed here: {_CHOOSES[name]}, which is a "
                f"cluster administrator's choice. Remove {path}.{name}, or ask a cluster "
                f"administrator to grant {value!r}: for every job with the chart value "
                f"{setting}, or for some jobs with a ClusterTrainJobTemplate that sets it and "
                "that they name in spec.template",
            )
        if overrides.host_network and not config.allow_host_network:
            if "hostNetwork" not in mine and theirs.get("hostNetwork") is True:
                continue
            return (
                "OverrideForbidden",
                f"{path}.hostNetwork: true is not allowed here: a pod on the node's network "
                "reaches every service listening on the node, and the restricted Pod Security "
                f"profile refuses it. Remove {path}.hostNetwork, or ask a cluster administrator "
                "to grant it: for every job with the chart value podOverrides.allowHostNetwork, "
                "or for some jobs with a ClusterTrainJobTemplate that sets it and that they name "
                "in spec.template",
            )
    return None


def _object(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _kind(own: Mapping[str, Any]) -> str:
    ref = templates.reference(own)
    return ref[0] if ref else ""


def secret_key_names(namespace: str, name: str) -> frozenset[str] | None:
    """Names of a Secret's keys, None when it does not exist, k8s.UNREADABLE when the operator
    may not read it; its values are never kept or logged (k8s.secret_keys)."""
    return k8s.secret_keys(namespace, name)


def claim_problem(trainjob: TrainJob, namespace: str) -> Problem | None:
    """A ResourceClaimTemplate or ResourceClaim that spec.head or spec.workerTemplate names in
    resourceClaims and that does not exist. Without the check, KubeRay's pods would wait in
    Pending for the claim the scheduler cannot find, with no word in the TrainJob."""
    spec = trainjob.spec
    for field, overrides in (("head", spec.head), ("workerTemplate", spec.worker_template)):
        for i, entry in enumerate((overrides.resource_claims if overrides else None) or []):
            for key, (kind, plural) in k8s.DRA_REFERENCES.items():
                name = entry.get(key)
                if not name or k8s.dra_object_exists(namespace, plural, str(name)) is not False:
                    continue
                what = (
                    "a DeviceClass of a DRA driver on the nodes and the devices each pod gets"
                    if kind == "ResourceClaimTemplate"
                    else "the devices the pods share"
                )
                return (
                    "ResourceClaimNotFound",
                    f"spec.{field}.resourceClaims[{i}].{key}: {kind} {name!r} does not exist "
                    f"in namespace {namespace!r}; create it (it names {what}) or set {key} to "
                    f"an existing {kind}",
                )
    return None


def check(
    trainjob: TrainJob,
    meta: Meta,
    config: OperatorConfig | None = None,
    own: Mapping[str, Any] | None = None,
    template: Mapping[str, Any] | None = None,
) -> Problem | None:
    """(reason, message) of the first problem found, or None when the RayJob can be created.
    ``own`` and ``template``: the job's own spec and its template's, as written."""
    config = config or OperatorConfig()
    problem = (
        spec_problem(trainjob, meta)
        or override_problem(trainjob, config)
        or pod_policy_problem(trainjob, config, own, template)
    )
    if problem is not None:
        return problem
    ns = meta.namespace
    storage = trainjob.spec.storage
    if storage.pvc is not None:
        claim = storage.pvc.claim_name
        modes = k8s.pvc_access_modes(ns, claim)
        if modes is None:
            return (
                "StorageNotFound",
                f"spec.storage.pvc.claimName: PersistentVolumeClaim {claim!r} does not exist in "
                f"namespace {ns!r}; create it with accessModes [ReadWriteMany] "
                "(see examples/digits-pvc.yaml) or point claimName at an existing claim",
            )
        if "ReadWriteMany" not in modes:
            return (
                "StorageNotShared",
                f"spec.storage.pvc.claimName: PersistentVolumeClaim {claim!r} has accessModes "
                f"{modes}; the head and every worker mount it at once, which needs "
                "ReadWriteMany: create a ReadWriteMany claim (NFS, CephFS, EFS...) and set "
                "claimName to it",
            )
    ref = storage.s3.credentials_secret if storage.s3 is not None else None
    keys = secret_key_names(ns, ref.name) if ref is not None and config.read_secrets else None
    if ref is not None and config.read_secrets and keys is not k8s.UNREADABLE:
        if keys is None:
            return "CredentialsNotFound", triage.credentials_not_found(ref, ns)
        for field, key in triage.credential_keys(ref):
            if key not in (keys or ()):
                return "CredentialsIncomplete", triage.credentials_incomplete(ref, field, key)
    problem = claim_problem(trainjob, ns)
    if problem is not None:
        return problem
    if storage.s3 is not None and storage.s3.service_account_name:
        account = storage.s3.service_account_name
        if not k8s.service_account_exists(ns, account):
            return (
                "ServiceAccountNotFound",
                f"spec.storage.s3.serviceAccountName: ServiceAccount {account!r} does not exist "
                f"in namespace {ns!r}; create it with its cloud identity (for IRSA the "
                "eks.amazonaws.com/role-arn annotation)",
            )
    return None


def resume_source(
    trainjob: TrainJob, meta: Meta, status: Mapping[str, Any]
) -> tuple[str | None, Problem | None]:
    """The checkpoint spec.resumeFrom names, or why it cannot be used yet.

    Recorded in status.resumedFrom when the first RayJob is created and reused from there, so a
    retry starts from the same place even after the other TrainJob is gone or has moved on (and
    once the run has a checkpoint of its own, the runtime uses that instead).
    """
    ref = trainjob.spec.resume_from
    if ref is None:
        return None, None
    recorded = status.get("resumedFrom")
    if recorded:
        return str(recorded), None
    if ref.checkpoint:
        return ref.checkpoint, None
    name, ns = str(ref.train_job), meta.namespace
    if name == meta.name:
        return None, (
            "ResumeSourceInvalid",
            f"spec.resumeFrom.trainJob: {name!r} is this TrainJob; name the TrainJob whose "
            "checkpoint to start from",
        )
    source = k8s.get_trainjob(ns, name)
    if source is None:
        return None, (
            "ResumeSourceNotFound",
            f"spec.resumeFrom.trainJob: TrainJob {name!r} does not exist in namespace {ns!r}; "
            "name an existing TrainJob, or set spec.resumeFrom.checkpoint to the checkpoint's "
            "location (the status.checkpoint.latestURI the deleted job showed)",
        )
    source_status = source.get("status") or {}
    latest = (source_status.get("checkpoint") or {}).get("latestURI")
    if not latest:
        phase = source_status.get("phase") or "Pending"
        return None, (
            "ResumeSourceNotReady",
            f"spec.resumeFrom.trainJob: TrainJob {name!r} has no checkpoint yet "
            f"(status.checkpoint.latestURI is empty, phase {phase}); this job starts once it "
            "reports one, or set spec.resumeFrom.checkpoint to a checkpoint's location",
        )
    latest = str(latest)
    storage = trainjob.spec.storage
    source_storage = (
        templates.effective_value(source.get("spec") or {}, source_status, "storage") or {}
    )
    if storage.s3 is not None and not latest.startswith("s3://"):
        return None, (
            "ResumeSourceUnreachable",
            f"spec.resumeFrom.trainJob: TrainJob {name!r} keeps its checkpoints on a volume "
            f"({latest}) and this job's storage is s3; use the same storage as {name!r}",
        )
    if storage.pvc is not None:
        claim = (source_storage.get("pvc") or {}).get("claimName")
        mount = storage.pvc.mount_path.rstrip("/")
        if claim != storage.pvc.claim_name or not latest.startswith(mount + "/"):
            where = f"PersistentVolumeClaim {claim!r}" if claim else "s3"
            return None, (
                "ResumeSourceUnreachable",
                f"spec.resumeFrom.trainJob: TrainJob {name!r} keeps its checkpoints in {where} "
                f"({latest}), which this job's pods do not mount; set spec.storage.pvc to the "
                "same claimName and mountPath as that job",
            )
    return latest, None
