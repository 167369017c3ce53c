"""Property-based tests of the builders over generated valid TrainJobs.

The strategies follow the API models' constraints (and the CRD's CEL rules): name length, the
numWorkers/minWorkers/maxWorkers rules, workersPerPod divisibility, acceleratorType only with
GPUs, exactly one storage. For every generated job: nothing crashes, every child name fits in
63 characters with KubeRay's suffixes, every pod has the storage wiring and the contract mount,
credentials appear only as secretKeyRef, and no tooling or GitOps key reaches a child.

Secret-like sentinel values are planted in every generated job where a leak could come from:
the parent's labels and annotations that must not be copied (tooling bookkeeping such as
kubectl's last-applied-configuration, which holds whatever was applied; GitOps tracking; keys
under someone else's prefix) and the pod overrides' tooling keys. A builder that copied any of
them would put a sentinel into a child, and the credentials test fails.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raytrain_contract.api.v1alpha1 import MAX_NAME_LENGTH, TrainJob
from raytrain_contract.meta import Meta
from raytrain_operator.builders.contract import build_contract_configmap, render_contract
from raytrain_operator.builders.names import DNS_LABEL_MAX, all_names, name_problems
from raytrain_operator.builders.rayjob import build_rayjob
from raytrain_operator.builders.rbac import build_rbac

#: Values a Secret could hold, planted in the inputs below under keys that must never reach a
#: child; no rendered object may contain them.
SENTINELS = ("AKIA-SENTINEL-ACCESS-KEY", "sentinel/secret+value==")
TOOLING_KEYS = (
    "kubectl.kubernetes.io/last-applied-configuration",
    "kopf.zalando.org/last-handled-configuration",
    "app.kubernetes.io/instance",
    "argocd.argoproj.io/instance",
    "argocd.argoproj.io/tracking-id",
    "kustomize.toolkit.fluxcd.io/name",
    "kustomize.toolkit.fluxcd.io/namespace",
    "helm.toolkit.fluxcd.io/name",
)

#: Keys of the parent that are never copied: the tooling and GitOps keys, and any key under a
#: prefix that is not on the allow-list (another tool's, like Vault's agent annotations).
FOREIGN_KEYS = (
    "vault.hashicorp.com/agent-inject-secret-s3",
    "example.com/token",
    "kopf.zalando.org/handler-progress",
)

dns_label = st.from_regex(r"\A[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?\Z")
# TrainJob names are DNS-1035 labels (they start with a letter): the API refuses others.
names = st.from_regex(r"\A[a-z]([a-z0-9-]{0,38}[a-z0-9])?\Z").filter(
    lambda s: len(s) <= MAX_NAME_LENGTH
)
plain_keys = st.from_regex(r"\A[a-z][a-z0-9]{0,10}\Z")
label_values = st.from_regex(r"\A[a-z0-9]{0,10}\Z")
labels = st.dictionaries(
    st.one_of(plain_keys, st.sampled_from(TOOLING_KEYS)), label_values, max_size=6
)
#: At least one sentinel under a key that must not be copied (tooling, GitOps or foreign).
planted = st.dictionaries(
    st.sampled_from(TOOLING_KEYS + FOREIGN_KEYS), st.sampled_from(SENTINELS), min_size=1, max_size=4
)
#: Pod-level overrides keep the user's own keys but drop tooling keys.
planted_tooling = st.dictionaries(
    st.sampled_from(TOOLING_KEYS), st.sampled_from(SENTINELS), min_size=1, max_size=2
)
#: The same for pod labels, whose values the API validates as label values: only the sentinel
#: that is one.
planted_tooling_labels = st.dictionaries(
    st.sampled_from(TOOLING_KEYS), st.just(SENTINELS[0]), min_size=1, max_size=2
)


def _with(base: st.SearchStrategy[dict[str, str]], extra: st.SearchStrategy[dict[str, str]]) -> Any:
    return st.tuples(base, extra).map(lambda pair: {**pair[0], **pair[1]})


cpu = st.one_of(
    st.integers(1, 64),
    st.integers(1, 64).map(str),
    st.integers(100, 64000).map(lambda m: f"{m}m"),
)
memory = st.one_of(
    st.integers(1, 512).map(lambda g: f"{g}Gi"),
    st.integers(64, 65536).map(lambda m: f"{m}Mi"),
    st.integers(1, 100).map(lambda g: f"{g}G"),
)


@st.composite
def scaling(draw: st.DrawFn) -> dict[str, Any]:
    per_pod = draw(st.integers(1, 8))
    out: dict[str, Any] = {"workersPerPod": per_pod}
    if draw(st.booleans()):
        out["numWorkers"] = per_pod * draw(st.integers(1, 64))
    else:
        low = draw(st.integers(1, 32))
        out["minWorkers"] = per_pod * low
        out["maxWorkers"] = per_pod * draw(st.integers(low, 64))
    use_gpu = draw(st.booleans())
    out["useGpu"] = use_gpu
    if use_gpu and draw(st.booleans()):
        out["acceleratorType"] = draw(st.sampled_from(["NVIDIA-A100-SXM4-80GB", "Tesla-T4", "L4"]))
    res: dict[str, Any] = {}
    if draw(st.booleans()):
        res["cpu"] = draw(cpu)
    if draw(st.booleans()):
        res["memory"] = draw(memory)
    if draw(st.booleans()):
        # The shorthand or the Kubernetes name: the same resource either way.
        res[draw(st.sampled_from(["gpu", "nvidia.com/gpu"]))] = draw(st.integers(0, 8))
    if draw(st.booleans()):
        res[draw(st.sampled_from(["rdma/ib", "vpc.amazonaws.com/efa"]))] = draw(st.integers(0, 4))
    if draw(st.booleans()):
        res["custom"] = draw(st.dictionaries(plain_keys, st.floats(0.1, 16), max_size=2))
    if res:
        out["resourcesPerWorker"] = res
    out["placementStrategy"] = draw(
        st.sampled_from(["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"])
    )
    return out


@st.composite
def storage(draw: st.DrawFn) -> dict[str, Any]:
    if draw(st.booleans()):
        pvc: dict[str, Any] = {"claimName": draw(dns_label)}
        if draw(st.booleans()):
            pvc["mountPath"] = "/" + draw(st.from_regex(r"\A[a-z]{1,10}(/[a-z]{1,10}){0,2}\Z"))
        if draw(st.booleans()):
            pvc["subPath"] = draw(st.from_regex(r"\A[a-z]{1,10}\Z"))
        return {"pvc": pvc}
    s3: dict[str, Any] = {
        "uri": "s3://" + draw(st.from_regex(r"\A[a-z0-9][a-z0-9.-]{1,20}[a-z0-9]\Z"))
    }
    if draw(st.booleans()):
        s3["endpoint"] = draw(
            st.sampled_from(["http://127.0.0.1:9000", "https://minio.storage:9000"])
        )
    if draw(st.booleans()):
        s3["region"] = draw(st.sampled_from(["us-east-1", "eu-west-1"]))
    who = draw(st.sampled_from(["secret", "irsa", "none"]))
    if who == "secret":
        secret: dict[str, Any] = {"name": draw(dns_label)}
        if draw(st.booleans()):
            secret["sessionTokenKey"] = "token"
        s3["credentialsSecret"] = secret
    elif who == "irsa":
        s3["serviceAccountName"] = draw(dns_label)
    return {"s3": s3}


overrides = st.fixed_dictionaries(
    {},
    optional={
        "nodeSelector": st.dictionaries(plain_keys, label_values, max_size=2),
        "tolerations": st.lists(
            st.fixed_dictionaries({"key": plain_keys, "operator": st.just("Exists")}), max_size=2
        ),
        "priorityClassName": dns_label,
        "env": st.lists(
            st.fixed_dictionaries(
                {"name": st.from_regex(r"\A[A-Z][A-Z0-9_]{0,10}\Z"), "value": label_values}
            ),
            max_size=3,
        ),
        "serviceAccountName": dns_label,
        "labels": _with(labels, planted_tooling_labels),
        "annotations": _with(labels, planted_tooling),
        "schedulerName": dns_label,
        "runtimeClassName": dns_label,
        "hostNetwork": st.booleans(),
        "imagePullSecrets": st.lists(st.fixed_dictionaries({"name": dns_label}), max_size=2),
    },
)


@st.composite
def trainjobs(draw: st.DrawFn) -> tuple[TrainJob, Meta, int]:
    spec: dict[str, Any] = {
        "image": "raytrain/trainer-runtime:0.1.0",
        "entrypoint": "pkg.mod:train",
        "scaling": draw(scaling()),
        "storage": draw(storage()),
    }
    if draw(st.booleans()):
        spec["head"] = draw(overrides)
    if draw(st.booleans()):
        spec["workerTemplate"] = draw(overrides)
    if draw(st.booleans()):
        spec["queueName"] = draw(dns_label)
    spec["suspend"] = draw(st.booleans())
    if draw(st.booleans()):
        spec["imagePullPolicy"] = draw(st.sampled_from(["Always", "IfNotPresent", "Never"]))
    name = draw(names)
    meta = Meta(
        name=name,
        namespace=draw(dns_label),
        uid=str(draw(st.uuids())),
        generation=draw(st.integers(1, 1000)),
        labels=draw(_with(labels, planted)),
        annotations=draw(_with(labels, planted)),
    )
    tj = TrainJob.model_validate({"metadata": {"name": name}, "spec": spec})
    return tj, meta, draw(st.integers(0, 100))


def _pod_templates(rayjob: dict[str, Any]) -> list[dict[str, Any]]:
    cluster = rayjob["spec"]["rayClusterSpec"]
    return [cluster["headGroupSpec"]["template"]] + [
        g["template"] for g in cluster["workerGroupSpecs"]
    ]


def _all_keys(objs: list[dict[str, Any]]) -> set[str]:
    keys: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("labels", "annotations", "matchLabels") and isinstance(value, dict):
                    keys.update(value)
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(objs)
    return keys


PROPS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPS
@given(trainjobs())
def test_every_child_name_fits_63_characters(case: tuple[TrainJob, Meta, int]) -> None:
    tj, meta, attempt = case
    assert name_problems(meta.name) == []
    for child in all_names(meta.name, attempt).values():
        assert len(child) <= DNS_LABEL_MAX
    rayjob = build_rayjob(tj, meta, attempt, suspend=False)
    for obj in [rayjob, build_contract_configmap(tj, meta, attempt), *build_rbac(tj, meta)]:
        assert len(obj["metadata"]["name"]) <= DNS_LABEL_MAX


@PROPS
@given(trainjobs())
def test_every_pod_has_storage_and_contract(case: tuple[TrainJob, Meta, int]) -> None:
    tj, meta, attempt = case
    rayjob = build_rayjob(tj, meta, attempt, suspend=tj.spec.suspend)
    pvc = tj.spec.storage.pvc
    s3 = tj.spec.storage.s3
    for template in _pod_templates(rayjob):
        (container,) = template["spec"]["containers"]
        mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
        volumes = {v["name"]: v for v in template["spec"]["volumes"]}
        env = {e["name"]: e for e in container["env"]}
        assert mounts["/etc/raytrain"] == "raytrain-contract"
        assert volumes["raytrain-contract"]["configMap"]["name"] == f"{meta.name}-contract"
        assert env["RAYTRAIN_CONTRACT"]["value"] == "/etc/raytrain/contract.json"
        assert env["RAYTRAIN_TRAINJOB_NAME"]["value"] == meta.name
        if pvc is not None:
            name = mounts[pvc.mount_path]
            assert volumes[name]["persistentVolumeClaim"]["claimName"] == pvc.claim_name
        if s3 is not None and s3.credentials_secret is not None:
            ref = env["AWS_SECRET_ACCESS_KEY"]["valueFrom"]["secretKeyRef"]
            assert ref["name"] == s3.credentials_secret.name
        if (
            s3 is not None
            and s3.service_account_name
            and not any(
                o is not None and o.service_account_name
                for o in (tj.spec.head, tj.spec.worker_template)
            )
        ):
            assert template["spec"]["serviceAccountName"] == s3.service_account_name
    storage = render_contract(tj, meta, attempt)["storage"]
    if pvc is not None:
        assert storage["path"].startswith(pvc.mount_path.rstrip("/"))


@PROPS
@given(trainjobs())
def test_credentials_only_by_reference(case: tuple[TrainJob, Meta, int]) -> None:
    tj, meta, attempt = case
    objs = [
        build_rayjob(tj, meta, attempt, suspend=False),
        build_contract_configmap(tj, meta, attempt),
        *build_rbac(tj, meta),
    ]
    # The sentinels are in the input (so the check below can fail), and nowhere in the output.
    assert any(v in SENTINELS for v in [*meta.labels.values(), *meta.annotations.values()])
    text = json.dumps(objs)
    leaked = [sentinel for sentinel in SENTINELS if sentinel in text]
    assert not leaked, f"{leaked} reached a child: {text[:2000]}"
    for template in _pod_templates(objs[0]):
        for var in template["spec"]["containers"][0]["env"]:
            if var["name"] in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
                assert set(var) == {"name", "valueFrom"}
                assert set(var["valueFrom"]) == {"secretKeyRef"}


@PROPS
@given(trainjobs())
def test_no_tooling_or_gitops_key_in_any_child(case: tuple[TrainJob, Meta, int]) -> None:
    tj, meta, attempt = case
    objs = [
        build_rayjob(tj, meta, attempt, suspend=False),
        build_contract_configmap(tj, meta, attempt),
        *build_rbac(tj, meta),
    ]
    assert not _all_keys(objs) & set(TOOLING_KEYS)


@PROPS
@given(trainjobs())
def test_worker_resources_by_kubernetes_name_are_per_worker_times_workers_per_pod(
    case: tuple[TrainJob, Meta, int],
) -> None:
    tj, meta, attempt = case
    rj = build_rayjob(tj, meta, attempt, suspend=False)
    group = rj["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]
    limits = group["template"]["spec"]["containers"][0]["resources"]["limits"]
    per_pod = tj.spec.scaling.workers_per_pod
    res = tj.spec.scaling.resources_per_worker
    for name, amount in (res.kubernetes if res is not None else {}).items():
        assert limits[name] == str(int(amount) * per_pod)
    gpus = render_contract(tj, meta, attempt)["scaling"]["resourcesPerWorker"].get("GPU", 0)
    assert int(limits.get("nvidia.com/gpu", "0")) == gpus * per_pod


@PROPS
@given(trainjobs())
def test_contract_is_json_and_in_rays_terms(case: tuple[TrainJob, Meta, int]) -> None:
    tj, meta, attempt = case
    doc = json.loads(json.dumps(render_contract(tj, meta, attempt)))
    res = doc["scaling"]["resourcesPerWorker"]
    assert isinstance(res["CPU"], float) and res["CPU"] > 0
    assert isinstance(res.get("memory", 0), int)
    assert doc["torch"]["backend"] == ("nccl" if res.get("GPU") else "gloo")
    assert doc["attempt"] == attempt
    assert doc["runName"].startswith(meta.name + "-")
