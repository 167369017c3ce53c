"""Generated TrainJobs, valid and not, through the real API server and then the builders.

A seeded generator writes TrainJobs from valid parts and breaks about half of them with one or
two mutations taken from what users get wrong (a name starting with a digit, `cpu: 1e1000000`,
`subPath: ../../tmp`, a negative custom resource, a toleration without a key, ...). Each one is
created with a server-side dry run. The rules:

- unknown fields are refused as kubectl does by default (`fieldValidation=Strict`);
- every refusal names the field: the server's message contains a `spec.` path (or
  `metadata.name`);
- a mutation marked as invalid is refused (else the API has a hole);
- everything accepted goes through the operator's own path: the models parse it, the name fits,
  the spec check of the preflight passes or stalls naming a `spec.` field, the RayJob and the
  contract ConfigMap are built without an exception, and the API server accepts what was built
  (the RayJob, the ConfigMap and a Pod from each pod template, all dry runs, for every fourth
  case to keep the run short): a child the server refuses would be a TrainJob that never runs.
"""

from __future__ import annotations

import copy
import json
import random
import string
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pytest

from raytrain_contract.api.v1alpha1 import API_VERSION, GROUP, PLURAL, VERSION, TrainJob
from raytrain_contract.meta import Meta
from raytrain_operator.builders.contract import build_contract_configmap
from raytrain_operator.builders.names import name_problems
from raytrain_operator.builders.rayjob import build_rayjob
from raytrain_operator.handlers import preflight

pytestmark = pytest.mark.integration

SEED = 20261123
COUNT = 1000
#: Accepted TrainJobs whose children are also sent (four dry runs each): a deterministic sample.
CHILD_SAMPLE = 4
THREADS = 8

Doc = dict[str, Any]
Mutation = Callable[[Doc, random.Random], None]


# ------------------------------------------------------------------------------ valid parts


def _name(rng: random.Random) -> str:
    size = rng.randint(1, 40)
    middle = "".join(rng.choice(string.ascii_lowercase + string.digits + "-") for _ in range(size))
    name = rng.choice(string.ascii_lowercase) + middle[1:]
    return name.rstrip("-") or "a"


def _label_value(rng: random.Random) -> str:
    return rng.choice(["a", "team-a", "v1.2_3", "x" * 63, "", "A0"])


def _scaling(rng: random.Random) -> Doc:
    per_pod = rng.choice([1, 1, 2, 4, 8])
    out: Doc = {"workersPerPod": per_pod}
    if rng.random() < 0.6:
        out["numWorkers"] = per_pod * rng.randint(1, 16)
    else:
        low = rng.randint(1, 8)
        out["minWorkers"] = per_pod * low
        out["maxWorkers"] = per_pod * rng.randint(low, 16)
    out["useGpu"] = rng.random() < 0.5
    if out["useGpu"] and rng.random() < 0.5:
        out["acceleratorType"] = rng.choice(["NVIDIA-A100-SXM4-80GB", "Tesla-T4", "NVIDIA-L4"])
    res: Doc = {}
    if rng.random() < 0.7:
        res["cpu"] = rng.choice([1, 8, "2", "500m", "1.5", "1m", "1024", "2e0", "+3", 1024])
    if rng.random() < 0.5:
        res["memory"] = rng.choice(["8Gi", "512Mi", "1G", "1Mi", "64Ti", 2**30, "1.5Gi", "4e9"])
    if rng.random() < 0.4:
        res["gpu"] = rng.choice([1, 2, 8]) if "acceleratorType" in out else rng.randint(0, 8)
    if rng.random() < 0.3:
        res["custom"] = {
            rng.choice(["fast_disk", "Infiniband", "_x", "a.b-c"]): rng.choice(
                [0, 1, 0.5, 0.0001, 2.25, 10000, 1234.5678]
            )
        }
    if res:
        out["resourcesPerWorker"] = res
    out["placementStrategy"] = rng.choice(["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"])
    return out


def _storage(rng: random.Random) -> Doc:
    if rng.random() < 0.4:
        pvc: Doc = {"claimName": rng.choice(["ckpt", "shared.nfs", "a" * 63])}
        if rng.random() < 0.5:
            pvc["mountPath"] = rng.choice(["/mnt/raytrain", "/data/ckpt", "/checkpoints", "/m"])
        if rng.random() < 0.5:
            pvc["subPath"] = rng.choice(["runs", "team/a/runs", "/runs", "a..b", "./x", "x."])
        return {"pvc": pvc}
    s3: Doc = {
        "uri": rng.choice(
            ["s3://raytrain/checkpoints", "s3://my-bucket", "s3://a.b-c/x/y.z/", "s3://abc/..x"]
        )
    }
    if rng.random() < 0.5:
        s3["endpoint"] = rng.choice(["http://minio.storage:9000", "https://s3.example.com/"])
    if rng.random() < 0.5:
        s3["region"] = rng.choice(["us-east-1", "eu-west-2", "garage"])
    who = rng.random()
    if who < 0.4:
        secret: Doc = {"name": rng.choice(["creds", "s3.creds"])}
        if rng.random() < 0.3:
            secret["accessKeyIdKey"] = "id"
            secret["secretAccessKeyKey"] = "secret.key"
        if rng.random() < 0.3:
            secret["sessionTokenKey"] = "token_1"
        s3["credentialsSecret"] = secret
    elif who < 0.6:
        s3["serviceAccountName"] = "irsa"
    return {"s3": s3}


def _overrides(rng: random.Random, head: bool) -> Doc:
    out: Doc = {}
    if head and rng.random() < 0.5:
        out["resources"] = {
            "requests": {"cpu": rng.choice(["1", 2, "250m"]), "memory": "2Gi"},
            "limits": {"memory": rng.choice(["2Gi", "4G", 2**31])},
        }
    if rng.random() < 0.4:
        out["nodeSelector"] = {
            rng.choice(["pool", "example.com/pool", "kubernetes.io/arch"]): _label_value(rng)
        }
    if rng.random() < 0.4:
        out["tolerations"] = rng.choice(
            [
                [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                [{"operator": "Exists"}],
                [{"key": "pool", "value": "a", "effect": "NoExecute", "tolerationSeconds": 30}],
            ]
        )
    if rng.random() < 0.3:
        out["env"] = [
            {"name": "LOG_LEVEL", "value": "debug"},
            {"name": "my.var-1", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        ]
    if rng.random() < 0.3:
        out["affinity"] = rng.choice(
            [
                {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {
                                    "matchExpressions": [
                                        {"key": "pool", "operator": "In", "values": ["a", "b"]}
                                    ]
                                },
                                {"matchExpressions": [{"key": "gpu", "operator": "Exists"}]},
                            ]
                        }
                    }
                },
                {
                    "podAntiAffinity": {
                        "preferredDuringSchedulingIgnoredDuringExecution": [
                            {
                                "weight": 10,
                                "podAffinityTerm": {
                                    "topologyKey": "kubernetes.io/hostname",
                                    "labelSelector": {"matchLabels": {"app": "db"}},
                                },
                            }
                        ]
                    }
                },
                {"podAffinity": {}},
            ]
        )
    if rng.random() < 0.2:
        out["envFrom"] = [
            {"configMapRef": {"name": "settings"}},
            {"prefix": "S3_", "secretRef": {"name": "s3.creds", "optional": True}},
        ]
    if rng.random() < 0.3:
        out["labels"] = {"team": _label_value(rng), "example.com/cost-center": "ml"}
    if rng.random() < 0.3:
        out["annotations"] = {"example.com/note": "free text: any characters!"}
    if rng.random() < 0.2:
        out["terminationGracePeriodSeconds"] = rng.choice([1, 30, 86400])
    return out


def valid_trainjob(rng: random.Random) -> Doc:
    spec: Doc = {
        "image": rng.choice(["raytrain/trainer-runtime:0.1.0", "registry.example.com:5000/t@sha"]),
        "entrypoint": rng.choice(["examples.digits.train:train_loop_per_worker", "a/b.py:main"]),
        "scaling": _scaling(rng),
        "storage": _storage(rng),
    }
    if rng.random() < 0.5:
        spec["config"] = {"epochs": rng.randint(1, 50), "lr": 0.01, "nested": {"a": [1, 2]}}
    if rng.random() < 0.3:
        spec["torch"] = {"backend": rng.choice(["nccl", "gloo"]), "timeoutSeconds": 600}
    if rng.random() < 0.3:
        spec["checkpoint"] = {"numToKeep": 2, "scoreAttribute": "acc", "scoreOrder": "min"}
    if rng.random() < 0.3:
        spec["failure"] = {"maxFailures": rng.choice([-1, 0, 3])}
    if rng.random() < 0.2:
        spec["datasets"] = {"train": {"uri": "s3://raytrain/data", "format": "csv"}}
    if rng.random() < 0.15:
        spec["tune"] = {
            "paramSpace": {"lr": {"loguniform": [0.001, 0.1]}},
            "metric": "acc",
            "numSamples": 4,
            "scheduler": {"type": "ASHA", "maxT": 10},
        }
    if rng.random() < 0.4:
        spec["head"] = _overrides(rng, head=True)
    if rng.random() < 0.4:
        spec["workerTemplate"] = _overrides(rng, head=False)
    if rng.random() < 0.2:
        spec["queueName"] = "team-a"
    if rng.random() < 0.2:
        spec["suspend"] = True
    if rng.random() < 0.2:
        spec["activeDeadlineSeconds"] = rng.choice([1, 3600, 315360000])
    if rng.random() < 0.2:
        spec["ttlSecondsAfterFinished"] = rng.choice([0, 3600])
    if rng.random() < 0.1:
        spec["rayVersion"] = rng.choice(["2.60.0", "2.9", "2.61.0rc1"])
    return {
        "apiVersion": API_VERSION,
        "kind": "TrainJob",
        "metadata": {"name": _name(rng)},
        "spec": spec,
    }


# -------------------------------------------------------------------------------- mutations


def _at(doc: Doc, path: str) -> tuple[Doc, str]:
    *parents, leaf = path.split(".")
    node = doc
    for key in parents:
        node = node.setdefault(key, {})
    return node, leaf


def _put(path: str, *values: Any) -> Mutation:
    def mutate(doc: Doc, rng: random.Random) -> None:
        node, leaf = _at(doc, path)
        node[leaf] = copy.deepcopy(rng.choice(values))

    return mutate


def _pvc(**fields: Any) -> Mutation:
    def mutate(doc: Doc, rng: random.Random) -> None:
        doc["spec"]["storage"] = {"pvc": {"claimName": "ckpt", **fields}}

    return mutate


def _gpu_job(doc: Doc, rng: random.Random) -> None:
    doc["spec"]["scaling"] = {"numWorkers": 2, "useGpu": True}


#: (id, mutation, the server must refuse it). Valid edge cases are mixed in (False).
MUTATIONS: list[tuple[str, Mutation, bool]] = [
    ("name-digit", _put("metadata.name", "1abc", "9", "0-digits"), True),
    ("name-upper", _put("metadata.name", "Digits", "digits.v2", "digits_2"), True),
    ("name-long", _put("metadata.name", "a" * 41), True),
    ("name-max", _put("metadata.name", "a" * 40, "a", "z9-x"), False),
    (
        "cpu-bad",
        _put(
            "spec.scaling.resourcesPerWorker.cpu",
            "1e1000000",
            "-1",
            "abc",
            "0",
            "1n",
            "2000",
            0,
            -2,
            "1e3Mi",
            " 1",
        ),
        True,
    ),
    (
        "memory-bad",
        _put(
            "spec.scaling.resourcesPerWorker.memory",
            "-1Gi",
            "1e1000000",
            "100Ei",
            "1",
            "1.5.5",
            "65Ti",
            -1,
        ),
        True,
    ),
    ("gpu-bad", _put("spec.scaling.resourcesPerWorker.gpu", -1, 65, "one"), True),
    (
        "custom-bad",
        _put(
            "spec.scaling.resourcesPerWorker.custom",
            {"fast_disk": -1},
            {"cpu": 1},
            {"GPU": 1},
            {"Memory": 2},
            {"my-gpu": 1},
            {"TPU": 1},
            {"x": 0.00001},
            {"x": 1e9},
            {"bad name!": 1},
            {"accelerator_type:A100": 1},
            {"x": 0.12345},
        ),
        True,
    ),
    ("subpath-escape", _pvc(subPath="../../tmp"), True),
    ("subpath-escape-2", _pvc(subPath="runs/../../x"), True),
    ("subpath-dotdot", _pvc(subPath=".."), True),
    (
        "mount-reserved",
        _put("spec.storage", {"pvc": {"claimName": "c", "mountPath": "/tmp"}}),
        True,
    ),
    ("mount-shm", _pvc(mountPath="/dev/shm"), True),
    ("mount-contract", _pvc(mountPath="/etc/raytrain"), True),
    ("mount-in-contract", _pvc(mountPath="/etc/raytrain/ckpt"), True),
    ("mount-dotdot", _pvc(mountPath="/mnt/../tmp"), True),
    ("mount-relative", _pvc(mountPath="mnt"), True),
    ("mount-trailing-slash", _pvc(mountPath="/mnt/"), True),
    ("mount-root", _pvc(mountPath="/"), True),
    ("claim-bad", _pvc(claimName="Bad_Claim"), True),
    (
        "s3-uri-escape",
        _put(
            "spec.storage", {"s3": {"uri": "s3://bucket/../other"}}, {"s3": {"uri": "s3://b/a/./c"}}
        ),
        True,
    ),
    (
        "secret-bad",
        _put(
            "spec.storage",
            {"s3": {"uri": "s3://bucket/x", "credentialsSecret": {"name": "Bad Name"}}},
            {
                "s3": {
                    "uri": "s3://bucket/x",
                    "credentialsSecret": {"name": "c", "accessKeyIdKey": "bad key"},
                }
            },
        ),
        True,
    ),
    (
        "s3-region-bad",
        _put("spec.storage", {"s3": {"uri": "s3://bkt/x", "region": "us east"}}),
        True,
    ),
    (
        "accelerator-bad",
        lambda doc, rng: (
            _gpu_job(doc, rng),
            _put("spec.scaling.acceleratorType", "NVIDIA A100", "x" * 64, "my-gpu", "-a")(doc, rng),
        ),
        True,
    ),
    (
        "accelerator-zero-gpu",
        lambda doc, rng: doc["spec"].update(
            scaling={
                "numWorkers": 1,
                "useGpu": True,
                "acceleratorType": "NVIDIA-A100-SXM4-80GB",
                "resourcesPerWorker": {"gpu": 0},
            }
        ),
        True,
    ),
    ("queue-bad", _put("spec.queueName", "bad queue", "", "-q"), True),
    ("deadline-huge", _put("spec.activeDeadlineSeconds", 10**12), True),
    ("ttl-huge", _put("spec.ttlSecondsAfterFinished", 10**12), True),
    (
        "head-resources-bad",
        _put(
            "spec.head.resources",
            {"limits": {"memory": "1e1000000"}},
            {"requests": {"cpu": "-1"}},
            {"limits": {"memory": "lots"}},
            {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}},
            {"requests": {"foo": "1"}},
        ),
        True,
    ),
    (
        "affinity-bad",
        _put(
            "spec.workerTemplate.affinity",
            {"podAffinity": 5},
            {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {}}},
            {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": "x"}},
            {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchExpressions": "x"}]
                    }
                }
            },
            {"nodeSelector": {"a": "b"}},
        ),
        True,
    ),
    (
        "env-from-bad",
        _put(
            "spec.workerTemplate.envFrom",
            [{"configMapRef": {"name": "Bad Name"}}],
            [{}],
            [{"configMapRef": {"name": "a"}, "secretRef": {"name": "b"}}],
            [{"prefix": "bad prefix", "secretRef": {"name": "b"}}],
        ),
        True,
    ),
    ("node-selector-key", _put("spec.head.nodeSelector", {"bad key": "a"}, {"-a": "b"}), True),
    ("node-selector-value", _put("spec.workerTemplate.nodeSelector", {"a": "bad value!"}), True),
    (
        "toleration-bad",
        _put(
            "spec.workerTemplate.tolerations",
            [{"operator": "Foo", "key": "a"}],
            [{"key": "a", "operator": "Exists", "value": "x"}],
            [{"key": "a", "tolerationSeconds": 5}],
            [{"value": "x"}],
            [{"key": "a", "effect": "Sometimes"}],
        ),
        True,
    ),
    (
        "env-bad",
        _put(
            "spec.head.env",
            [{"name": "1 bad"}],
            [{"name": "A", "value": "x", "valueFrom": {}}],
            [{"value": "x"}],
        ),
        True,
    ),
    ("labels-bad", _put("spec.workerTemplate.labels", {"bad key": "a"}, {"a": "x" * 64}), True),
    ("worker-resources", _put("spec.workerTemplate.resources", {"limits": {"cpu": "1"}}), True),
    ("priority-bad", _put("spec.head.priorityClassName", "Bad"), True),
    ("account-bad", _put("spec.workerTemplate.serviceAccountName", "Bad_SA"), True),
    ("image-bad", _put("spec.image", "has space", "", "a\nb"), True),
    ("dataset-name-bad", _put("spec.datasets", {"bad name!": {"uri": "s3://b/x"}}), True),
    ("ray-version-bad", _put("spec.rayVersion", "latest", "2"), True),
    ("entrypoint-bad", _put("spec.entrypoint", "train", "python train.py"), True),
    ("workers-zero", _put("spec.scaling", {"numWorkers": 0}), True),
    ("pull-policy-bad", _put("spec.imagePullPolicy", "Sometimes"), True),
    ("unknown-field", _put("spec.numWorkers", 2), True),
    # Sizes the API server cannot bound: the preflight's spec check stalls on them.
    ("config-300k", _put("spec.config", {"blob": "x" * 300_000}), False),
    ("config-1m", _put("spec.config", {"blob": "x" * 1_100_000}), False),
]
#: Mutations that are expensive to send: drawn rarely.
RARE = {"config-300k", "config-1m"}


@dataclass
class Case:
    index: int
    doc: Doc
    mutations: list[str] = field(default_factory=list)
    must_refuse: bool = False


def generate(count: int, seed: int) -> list[Case]:
    rng = random.Random(seed)
    common = [m for m in MUTATIONS if m[0] not in RARE]
    rare = [m for m in MUTATIONS if m[0] in RARE]
    cases = []
    for i in range(count):
        case = Case(i, valid_trainjob(rng))
        if rng.random() < 0.5:
            picks = rng.sample(common, rng.choice([1, 1, 2]))
            if rng.random() < 0.005:
                picks.append(rng.choice(rare))
            # Valid edge values first: one written after an invalid value of the same field
            # would replace it.
            for name, mutate, invalid in sorted(picks, key=lambda m: m[2]):
                mutate(case.doc, rng)
                case.mutations.append(name)
                case.must_refuse = case.must_refuse or invalid
        cases.append(case)
    # Every mutation at least once, on top of the random draw.
    for j, (name, mutate, invalid) in enumerate(MUTATIONS):
        case = Case(count + j, valid_trainjob(rng), [name], invalid)
        mutate(case.doc, rng)
        cases.append(case)
    return cases


# ---------------------------------------------------------------------------- the server


def _client(kubeconfig: str) -> Any:
    import kubernetes

    configuration = kubernetes.client.Configuration()
    kubernetes.config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    configuration.connection_pool_maxsize = THREADS * 2
    return kubernetes.client.ApiClient(configuration)


def _message(exc: Exception) -> str:
    body = getattr(exc, "body", None) or ""
    try:
        return str(json.loads(body).get("message") or body)
    except (TypeError, ValueError):
        return str(body or exc)


@dataclass
class Outcome:
    case: Case
    accepted: Doc | None = None
    refusal: str | None = None
    stall: str | None = None
    crash: str | None = None
    children_refused: list[str] = field(default_factory=list)


def _pod(template: Doc, namespace: str, name: str) -> Doc:
    """A Pod from a pod template, as KubeRay would create it (minus what it adds itself)."""
    spec = copy.deepcopy(template["spec"])
    # The per-job account is created by the operator next to the RayJob, a PriorityClass by the
    # cluster's admin: the dry run cannot know either, and admission refuses missing ones.
    spec["serviceAccountName"] = "default"
    spec.pop("priorityClassName", None)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {**copy.deepcopy(template["metadata"]), "name": name, "namespace": namespace},
        "spec": spec,
    }


def run_case(api: Any, namespace: str, case: Case) -> Outcome:
    import kubernetes
    from kubernetes.client.exceptions import ApiException

    custom = kubernetes.client.CustomObjectsApi(api)
    core = kubernetes.client.CoreV1Api(api)
    outcome = Outcome(case)
    # Raw responses: the client's model deserialisation would cost more than the server's work.
    raw = {"_preload_content": False, "dry_run": "All"}
    try:
        response = custom.create_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, case.doc, field_validation="Strict", **raw
        )
        outcome.accepted = json.loads(response.data)
    except ApiException as exc:
        outcome.refusal = f"{exc.status}: {_message(exc)}"
        return outcome
    body = outcome.accepted
    assert body is not None
    try:
        trainjob = TrainJob.model_validate({"metadata": body["metadata"], "spec": body["spec"]})
        meta = Meta.from_metadata({**body["metadata"], "uid": body["metadata"].get("uid") or "u"})
        problems = name_problems(meta.name)
        if problems:
            outcome.crash = f"accepted name refused by the builders: {problems[0]}"
            return outcome
        problem = preflight.spec_problem(trainjob, meta)
        if problem is not None:
            outcome.stall = problem[1]
            return outcome
        rayjob = build_rayjob(trainjob, meta, 0, suspend=False)
        configmap = build_contract_configmap(trainjob, meta, 0)
    except Exception as exc:  # the point: any exception here is a crash
        outcome.crash = f"{type(exc).__name__}: {exc}"
        return outcome
    if case.index % CHILD_SAMPLE:
        return outcome
    cluster = rayjob["spec"]["rayClusterSpec"]
    children: list[tuple[str, Callable[[], Any]]] = [
        (
            "RayJob",
            lambda: custom.create_namespaced_custom_object(
                "ray.io", "v1", namespace, "rayjobs", rayjob, **raw
            ),
        ),
        (
            "ConfigMap",
            lambda: core.create_namespaced_config_map(namespace, configmap, **raw),
        ),
        (
            "head Pod",
            lambda: core.create_namespaced_pod(
                namespace, _pod(cluster["headGroupSpec"]["template"], namespace, "h"), **raw
            ),
        ),
        (
            "worker Pod",
            lambda: core.create_namespaced_pod(
                namespace,
                _pod(cluster["workerGroupSpecs"][0]["template"], namespace, "w"),
                **raw,
            ),
        ),
    ]
    for what, create in children:
        try:
            create()
        except ApiException as exc:
            outcome.children_refused.append(f"{what}: {exc.status}: {_message(exc)}")
    return outcome


def test_generated_trainjobs(kube_cluster: Any, namespace: str) -> None:
    cases = generate(COUNT, SEED)
    api = _client(str(kube_cluster.kubeconfig))
    started = time.monotonic()
    with ThreadPoolExecutor(THREADS) as pool:
        outcomes = list(pool.map(lambda c: run_case(api, namespace, c), cases))
    elapsed = time.monotonic() - started

    accepted = [o for o in outcomes if o.accepted is not None]
    refused = [o for o in outcomes if o.refusal is not None]
    stalled = [o for o in outcomes if o.stall is not None]
    counts = Counter(m for o in refused for m in o.case.mutations)
    print(
        f"\n{len(cases)} TrainJobs in {elapsed:.1f} s: {len(accepted)} accepted "
        f"({len(stalled)} stalled by the spec check), {len(refused)} refused; "
        f"refusals by mutation: {dict(sorted(counts.items()))}"
    )

    crashes = [f"#{o.case.index} {o.case.mutations}: {o.crash}" for o in outcomes if o.crash]
    assert crashes == [], "builders crashed on accepted TrainJobs:\n" + "\n".join(crashes[:20])

    nameless = [
        f"#{o.case.index} {o.case.mutations}: {o.refusal}"
        for o in refused
        if "spec." not in (o.refusal or "") and "metadata.name" not in (o.refusal or "")
    ]
    assert nameless == [], "refusals that name no field:\n" + "\n".join(nameless[:20])

    holes = [
        f"#{o.case.index} {o.case.mutations}: {json.dumps(o.case.doc)[:400]}"
        for o in accepted
        if o.case.must_refuse
    ]
    assert holes == [], "invalid TrainJobs the API server accepted:\n" + "\n".join(holes[:20])

    vague = [f"#{o.case.index}: {o.stall}" for o in stalled if "spec." not in (o.stall or "")]
    assert vague == [], "stalls that name no field:\n" + "\n".join(vague)

    broken = [
        f"#{o.case.index} {o.case.mutations}: {r}" for o in accepted for r in o.children_refused
    ]
    assert broken == [], "children of accepted TrainJobs the API server refuses:\n" + "\n".join(
        broken[:20]
    )

    assert len(cases) >= 1000
    assert len(accepted) >= 300 and len(refused) >= 300, (len(accepted), len(refused))
    big = [o for o in outcomes if {"config-300k", "config-1m"} & set(o.case.mutations)]
    assert big and all(o.stall and "spec.config" in o.stall for o in big if o.accepted), [
        o.stall for o in big
    ]
