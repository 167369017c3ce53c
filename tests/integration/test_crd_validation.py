"""The real API server accepts every example and refuses every malformed TrainJob.

Each case breaks one schema or CEL rule (or makes a mistake users make) and names the words the
server's refusal must contain: the field, and for our CEL rules the fix.
"""

from __future__ import annotations

import copy
import json
import pathlib
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from raytrain_contract.api.v1alpha1 import TrainJob

pytestmark = pytest.mark.integration

ROOT = pathlib.Path(__file__).resolve().parents[2]

Doc = dict[str, Any]


def _valid() -> Doc:
    return {
        "apiVersion": "raytrain.dev/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "bad-input"},
        "spec": {
            "image": "raytrain/trainer-runtime:0.1.0",
            "entrypoint": "examples.digits.train:train_loop_per_worker",
            "scaling": {"numWorkers": 2},
            "storage": {"s3": {"uri": "s3://raytrain/checkpoints"}},
        },
    }


def _set(path: str, value: Any) -> Callable[[Doc], None]:
    """Set (or with value=DELETE, remove) a dotted path inside the manifest."""

    def mutate(doc: Doc) -> None:
        *parents, leaf = path.split(".")
        node = doc
        for key in parents:
            node = node.setdefault(key, {})
        if value is DELETE:
            node.pop(leaf, None)
        else:
            node[leaf] = value

    return mutate


DELETE = object()
PVC = {"pvc": {"claimName": "ckpt"}}
S3 = {"uri": "s3://raytrain/checkpoints"}

# (id, mutation, words the refusal must contain)
CASES: list[tuple[str, list[Callable[[Doc], None]], list[str]]] = [
    (
        "no-storage",
        [_set("spec.storage", DELETE)],
        ["spec.storage is required (unless spec.template"],
    ),
    ("empty-storage", [_set("spec.storage", {})], ["exactly one of storage.pvc", "storage.s3"]),
    (
        "two-storages",
        [_set("spec.storage", {"s3": S3, **PVC})],
        ["spec.storage", "exactly one of storage.pvc"],
    ),
    ("empty-scaling", [_set("spec.scaling", {})], ["spec.scaling", "set numWorkers"]),
    (
        "no-scaling",
        [_set("spec.scaling", DELETE)],
        ["spec.scaling is required (unless spec.template"],
    ),
    (
        "zero-workers",
        [_set("spec.scaling.numWorkers", 0)],
        ["spec.scaling.numWorkers", "greater than or equal to 1"],
    ),
    (
        "negative-workers",
        [_set("spec.scaling.numWorkers", -3)],
        ["spec.scaling.numWorkers", "greater than or equal to 1"],
    ),
    (
        "workers-as-text",
        [_set("spec.scaling.numWorkers", "two")],
        ["spec.scaling.numWorkers", "integer"],
    ),
    (
        "fixed-and-elastic",
        [_set("spec.scaling.minWorkers", 1), _set("spec.scaling.maxWorkers", 4)],
        ["spec.scaling", "numWorkers cannot be combined"],
    ),
    (
        "min-only",
        [_set("spec.scaling", {"minWorkers": 2})],
        ["spec.scaling", "both minWorkers and maxWorkers"],
    ),
    (
        "min-above-max",
        [_set("spec.scaling", {"minWorkers": 4, "maxWorkers": 2})],
        ["spec.scaling.minWorkers must be less than or equal to spec.scaling.maxWorkers"],
    ),
    (
        "min-zero",
        [_set("spec.scaling", {"minWorkers": 0, "maxWorkers": 2})],
        ["spec.scaling.minWorkers", "greater than or equal to 1"],
    ),
    (
        "workers-not-multiple-of-pod",
        [_set("spec.scaling", {"numWorkers": 3, "workersPerPod": 2})],
        ["spec.scaling.numWorkers must be a multiple of spec.scaling.workersPerPod"],
    ),
    (
        "elastic-not-multiple-of-pod",
        [_set("spec.scaling", {"minWorkers": 1, "maxWorkers": 4, "workersPerPod": 2})],
        ["minWorkers and maxWorkers must be multiples of spec.scaling.workersPerPod"],
    ),
    (
        "slices-of-a-fixed-job",
        [_set("spec.scaling.kueueWorkloadSlices", True), _set("spec.queueName", "team")],
        ["spec.scaling.kueueWorkloadSlices resizes an elastic job", "instead of numWorkers"],
    ),
    (
        "slices-without-a-queue",
        [
            _set("spec.scaling", {"minWorkers": 1, "maxWorkers": 4, "kueueWorkloadSlices": True}),
        ],
        ["spec.scaling.kueueWorkloadSlices needs spec.queueName"],
    ),
    (
        "accelerator-without-gpu",
        [_set("spec.scaling.acceleratorType", "NVIDIA-A100-SXM4-80GB")],
        ["spec.scaling.acceleratorType needs", "useGpu: true"],
    ),
    (
        "unknown-placement",
        [_set("spec.scaling.placementStrategy", "RANDOM")],
        [
            "spec.scaling.placementStrategy",
            "Unsupported value",
            # The whole list, to the line's end: no other value is accepted.
            'supported values: "PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"\n',
        ],
    ),
    (
        "negative-gpu",
        [_set("spec.scaling.resourcesPerWorker", {"gpu": -1})],
        ["spec.scaling.resourcesPerWorker.gpu", "greater than or equal to 0"],
    ),
    (
        "unknown-backend",
        [_set("spec.torch", {"backend": "mpi"})],
        ["spec.torch.backend", "Unsupported value", 'supported values: "nccl", "gloo"\n'],
    ),
    (
        "zero-torch-timeout",
        [_set("spec.torch", {"timeoutSeconds": 0})],
        ["spec.torch.timeoutSeconds", "greater than or equal to 1"],
    ),
    (
        "unknown-score-order",
        [_set("spec.checkpoint", {"scoreAttribute": "accuracy", "scoreOrder": "up"})],
        ["spec.checkpoint.scoreOrder", "Unsupported value", 'supported values: "max", "min"\n'],
    ),
    (
        "score-order-without-attribute",
        [_set("spec.checkpoint", {"scoreOrder": "min"})],
        ["spec.checkpoint.scoreOrder needs spec.checkpoint.scoreAttribute"],
    ),
    (
        "keep-zero-checkpoints",
        [_set("spec.checkpoint", {"numToKeep": 0})],
        ["spec.checkpoint.numToKeep", "greater than or equal to 1"],
    ),
    (
        "entrypoint-without-function",
        [_set("spec.entrypoint", "train.py")],
        ["spec.entrypoint must be module:function"],
    ),
    (
        "entrypoint-with-space",
        [_set("spec.entrypoint", "my module:train")],
        ["spec.entrypoint must be module:function"],
    ),
    (
        "entrypoint-shell-command",
        [_set("spec.entrypoint", "python train.py --epochs 3")],
        ["spec.entrypoint must be module:function"],
    ),
    (
        "no-entrypoint",
        [_set("spec.entrypoint", DELETE)],
        ["spec.entrypoint is required (unless spec.template"],
    ),
    ("no-image", [_set("spec.image", DELETE)], ["spec.image is required (unless spec.template"]),
    ("empty-image", [_set("spec.image", "")], ["spec.image", "at least 1"]),
    (
        "bad-pull-policy",
        [_set("spec.imagePullPolicy", "Sometimes")],
        ["spec.imagePullPolicy", "should match"],
    ),
    (
        "s3-uri-with-https",
        [_set("spec.storage.s3.uri", "https://raytrain/checkpoints")],
        ["spec.storage.s3.uri must look like s3://bucket/prefix"],
    ),
    (
        "s3-uri-upper-case-bucket",
        [_set("spec.storage.s3.uri", "s3://My_Bucket/ckpt")],
        ["spec.storage.s3.uri must look like s3://bucket/prefix"],
    ),
    (
        "s3-without-uri",
        [_set("spec.storage", {"s3": {"region": "us-east-1"}})],
        ["spec.storage.s3.uri", "Required value"],
    ),
    (
        "s3-endpoint-without-scheme",
        [_set("spec.storage.s3.endpoint", "minio:9000")],
        ["spec.storage.s3.endpoint must be a URL"],
    ),
    (
        "s3-secret-and-irsa",
        [
            _set("spec.storage.s3.credentialsSecret", {"name": "creds"}),
            _set("spec.storage.s3.serviceAccountName", "irsa"),
        ],
        ["set credentialsSecret or serviceAccountName (IRSA), not both"],
    ),
    (
        "secret-without-name",
        [_set("spec.storage.s3.credentialsSecret", {"accessKeyIdKey": "id"})],
        ["spec.storage.s3.credentialsSecret.name", "Required value"],
    ),
    (
        "pvc-without-claim",
        [_set("spec.storage", {"pvc": {"mountPath": "/ckpt"}})],
        ["spec.storage.pvc.claimName", "Required value"],
    ),
    (
        "pvc-relative-mount",
        [_set("spec.storage", {"pvc": {"claimName": "ckpt", "mountPath": "data"}})],
        ["spec.storage.pvc.mountPath", "should match"],
    ),
    (
        "negative-backoff",
        [_set("spec.backoffLimit", -1)],
        ["spec.backoffLimit", "greater than or equal to 0"],
    ),
    (
        "max-failures-below-minus-one",
        [_set("spec.failure", {"maxFailures": -2})],
        ["spec.failure.maxFailures", "greater than or equal to -1"],
    ),
    (
        "zero-deadline",
        [_set("spec.activeDeadlineSeconds", 0)],
        ["spec.activeDeadlineSeconds", "greater than or equal to 1"],
    ),
    (
        "unknown-dataset-format",
        [_set("spec.datasets", {"train": {"uri": "s3://raytrain/data", "format": "xlsx"}})],
        ["format", "Unsupported value", "parquet"],
    ),
    (
        "tune-without-metric",
        [_set("spec.tune", {"paramSpace": {"lr": {"loguniform": [0.001, 0.1]}}})],
        ["spec.tune.metric", "Required value"],
    ),
    (
        "workers-at-top-level",
        [_set("spec.numWorkers", 2)],
        ['unknown field "spec.numWorkers"'],
    ),
    (
        "name-too-long",
        [_set("metadata.name", "a" * 41)],
        ["metadata.name must be at most 40 characters", "choose a shorter name"],
    ),
    (
        "name-starts-with-digit",
        [_set("metadata.name", "1digits")],
        ["metadata.name must start with a lower-case letter", "DNS-1035"],
    ),
    (
        "cpu-beyond-any-quantity",
        [_set("spec.scaling.resourcesPerWorker", {"cpu": "1e1000000"})],
        ["spec.scaling.resourcesPerWorker.cpu must be a Kubernetes quantity between 1m and 1024"],
    ),
    (
        "cpu-not-a-quantity",
        [_set("spec.scaling.resourcesPerWorker", {"cpu": "two"})],
        ["spec.scaling.resourcesPerWorker.cpu must be a Kubernetes quantity"],
    ),
    (
        "memory-negative",
        [_set("spec.scaling.resourcesPerWorker", {"memory": "-8Gi"})],
        ["spec.scaling.resourcesPerWorker.memory must be a Kubernetes quantity"],
    ),
    (
        "custom-negative",
        [_set("spec.scaling.resourcesPerWorker", {"custom": {"fast_disk": -1}})],
        ["spec.scaling.resourcesPerWorker.custom.fast_disk", "greater than or equal to 0"],
    ),
    (
        "custom-named-cpu",
        [_set("spec.scaling.resourcesPerWorker", {"custom": {"CPU": 2}})],
        ["spec.scaling.resourcesPerWorker.custom", "are not custom resources"],
    ),
    (
        "subpath-leaves-the-claim",
        [_set("spec.storage", {"pvc": {"claimName": "ckpt", "subPath": "../../tmp"}})],
        ["spec.storage.pvc.subPath must stay inside the claim"],
    ),
    (
        "mount-over-shm",
        [_set("spec.storage", {"pvc": {"claimName": "ckpt", "mountPath": "/dev/shm"}})],
        ["spec.storage.pvc.mountPath must not hide or nest"],
    ),
    (
        "s3-prefix-leaves-the-bucket",
        [_set("spec.storage.s3.uri", "s3://raytrain/../other")],
        ["spec.storage.s3.uri: the prefix must not contain"],
    ),
    (
        "worker-template-cpu",
        [_set("spec.workerTemplate", {"resources": {"limits": {"cpu": "2"}}})],
        ["spec.workerTemplate.resources sets cpu", "resourcesPerWorker.cpu"],
    ),
    (
        "worker-template-gpu-with-use-gpu",
        [
            _set("spec.scaling.useGpu", True),
            _set("spec.workerTemplate", {"resources": {"requests": {"nvidia.com/gpu": 1}}}),
        ],
        ["spec.workerTemplate.resources sets nvidia.com/gpu"],
    ),
    (
        "worker-template-memory-twice",
        [
            _set("spec.scaling.resourcesPerWorker", {"memory": "4Gi"}),
            _set("spec.workerTemplate", {"resources": {"limits": {"memory": "8Gi"}}}),
        ],
        ["spec.workerTemplate.resources sets memory"],
    ),
    (
        "volume-named-like-ours",
        [_set("spec.workerTemplate", {"volumes": [{"name": "raytrain-shm", "emptyDir": {}}]})],
        ["spec.*.volumes: the name raytrain-shm belongs to a volume the operator adds"],
    ),
    (
        "mount-over-dev-shm",
        [
            _set(
                "spec.workerTemplate",
                {
                    "volumes": [{"name": "big", "emptyDir": {"medium": "Memory"}}],
                    "volumeMounts": [{"name": "big", "mountPath": "/dev/shm"}],
                },
            )
        ],
        [
            "spec.*.volumeMounts: mountPath /dev/shm must not be or nest in "
            "/etc/raytrain or /dev/shm"
        ],
    ),
    (
        "mount-under-the-contract",
        [
            _set(
                "spec.head",
                {
                    "volumes": [{"name": "x", "emptyDir": {}}],
                    "volumeMounts": [{"name": "x", "mountPath": "/etc/raytrain/extra"}],
                },
            )
        ],
        ["mountPath /etc/raytrain/extra must not be or nest in /etc/raytrain"],
    ),
    (
        "mount-without-volume",
        [_set("spec.head", {"volumeMounts": [{"name": "cache", "mountPath": "/data"}]})],
        ["spec.*.volumeMounts: every mount names an entry of volumes"],
    ),
    (
        "mount-over-checkpoint-claim",
        [
            _set("spec.storage", {"pvc": {"claimName": "ckpt"}}),
            _set(
                "spec.workerTemplate",
                {
                    "volumes": [{"name": "x", "emptyDir": {}}],
                    "volumeMounts": [{"name": "x", "mountPath": "/mnt/raytrain/cache"}],
                },
            ),
        ],
        ["spec.workerTemplate.volumeMounts: a mountPath must not be, hold or nest in"],
    ),
    (
        "claim-with-two-sources",
        [
            _set(
                "spec.workerTemplate",
                {
                    "resourceClaims": [
                        {"name": "g", "resourceClaimName": "a", "resourceClaimTemplateName": "b"}
                    ]
                },
            )
        ],
        ["spec.*.resourceClaims: every entry sets exactly one of resourceClaimName"],
    ),
    (
        "container-claim-unknown",
        [_set("spec.head", {"resources": {"claims": [{"name": "gpus"}]}})],
        ["spec.*.resources.claims: every claim names an entry of resourceClaims"],
    ),
    (
        "unknown-network-profile",
        [_set("spec.network", {"profile": "myrinet"})],
        ["spec.network.profile", "Unsupported value"],
    ),
    (
        "scheduler-name-with-space",
        [_set("spec.workerTemplate", {"schedulerName": "my scheduler"})],
        ["spec.workerTemplate.schedulerName", "should match"],
    ),
    (
        "accelerator-with-space",
        [
            _set("spec.scaling.useGpu", True),
            _set("spec.scaling.acceleratorType", "NVIDIA A100"),
        ],
        ["spec.scaling.acceleratorType", "should match"],
    ),
    (
        "toleration-without-key",
        [_set("spec.head", {"tolerations": [{"operator": "Equal", "value": "a"}]})],
        ["spec.head.tolerations[0]", "without a key must have operator Exists"],
    ),
    (
        "retry-policy-unknown-class",
        [_set("spec.retryPolicy", {"classes": {"OOMKilled": True, "OutOfMemory": True}})],
        ["spec.retryPolicy.classes: a key must be one of OOMKilled, ImagePullFailed", "Unknown"],
    ),
    (
        "retry-policy-class-not-a-bool",
        [_set("spec.retryPolicy", {"classes": {"OOMKilled": "yes"}})],
        ["spec.retryPolicy.classes.OOMKilled", "must be of type boolean"],
    ),
    (
        "retry-policy-exit-code-too-high",
        [_set("spec.retryPolicy", {"exitCodes": [{"code": 256, "retry": True}]})],
        ["spec.retryPolicy.exitCodes[0].code", "less than or equal to 255"],
    ),
    (
        "retry-policy-exit-code-twice",
        [
            _set(
                "spec.retryPolicy",
                {"exitCodes": [{"code": 75, "retry": True}, {"code": 75, "retry": False}]},
            )
        ],
        ["spec.retryPolicy.exitCodes[1]", "Duplicate value"],
    ),
    (
        "retry-policy-exit-code-without-retry",
        [_set("spec.retryPolicy", {"exitCodes": [{"code": 75}]})],
        ["spec.retryPolicy.exitCodes[0].retry", "Required value"],
    ),
    (
        "pre-running-deadline-zero",
        [_set("spec.preRunningDeadlineSeconds", 0)],
        ["spec.preRunningDeadlineSeconds", "greater than or equal to 1"],
    ),
    (
        "resume-from-both",
        [_set("spec.resumeFrom", {"trainJob": "digits", "checkpoint": "s3://raytrain/c/x"})],
        ["spec.resumeFrom: set exactly one of resumeFrom.trainJob"],
    ),
    (
        "resume-from-neither",
        [_set("spec.resumeFrom", {})],
        ["spec.resumeFrom: set exactly one of resumeFrom.trainJob"],
    ),
    (
        "resume-from-relative-path",
        [_set("spec.resumeFrom", {"checkpoint": "runs/checkpoint_1"})],
        ["spec.resumeFrom.checkpoint must be a checkpoint directory"],
    ),
    (
        "resume-from-dot-dot",
        [_set("spec.resumeFrom", {"checkpoint": "s3://raytrain/checkpoints/../other"})],
        ["spec.resumeFrom.checkpoint must be a checkpoint directory", "'..'"],
    ),
    (
        "resume-from-a-path-with-s3-storage",
        [_set("spec.resumeFrom", {"checkpoint": "/mnt/raytrain/run/checkpoint_1"})],
        ["spec.resumeFrom.checkpoint must be where this job's pods can read it"],
    ),
    (
        "resume-from-outside-the-claim",
        [
            _set("spec.storage", PVC),
            _set("spec.resumeFrom", {"checkpoint": "/data/run/checkpoint_1"}),
        ],
        ["spec.resumeFrom.checkpoint must be where", "under spec.storage.pvc.mountPath"],
    ),
    (
        "resume-from-a-bad-name",
        [_set("spec.resumeFrom", {"trainJob": "Digits_1"})],
        ["spec.resumeFrom.trainJob"],
    ),
    (
        "scaling-without-a-worker-count",
        [_set("spec.scaling", {"resourcesPerWorker": {"cpu": "1"}})],
        ["spec.scaling: set numWorkers for a fixed-size job, or both minWorkers and maxWorkers"],
    ),
    (
        "max-workers-zero",
        [_set("spec.scaling", {"minWorkers": 1, "maxWorkers": 0})],
        ["spec.scaling.maxWorkers", "greater than or equal to 1"],
    ),
    (
        "zero-workers-per-pod",
        [_set("spec.scaling.workersPerPod", 0)],
        ["spec.scaling.workersPerPod", "greater than or equal to 1"],
    ),
    (
        "accelerator-with-zero-gpus",
        [
            _set("spec.scaling.useGpu", True),
            _set("spec.scaling.acceleratorType", "NVIDIA-L4"),
            _set("spec.scaling.resourcesPerWorker", {"gpu": 0}),
        ],
        ["spec.scaling.acceleratorType needs GPUs", "resourcesPerWorker.gpu to 1 or more"],
    ),
    (
        "accelerator-named-gpu",
        [_set("spec.scaling.useGpu", True), _set("spec.scaling.acceleratorType", "Tesla-GPU")],
        ["spec.scaling.acceleratorType must not end in 'gpu'"],
    ),
    (
        "memory-beyond-64ti",
        [_set("spec.scaling.resourcesPerWorker", {"memory": "65Ti"})],
        [
            "spec.scaling.resourcesPerWorker.memory must be a Kubernetes quantity",
            "between 1Mi and 64Ti",
        ],
    ),
    (
        "custom-too-precise",
        [_set("spec.scaling.resourcesPerWorker", {"custom": {"fast_disk": 0.00001}})],
        ["spec.scaling.resourcesPerWorker.custom", "at most 4 decimal places"],
    ),
    (
        "pvc-mount-with-dot-dot",
        [_set("spec.storage", {"pvc": {"claimName": "ckpt", "mountPath": "/mnt/../etc"}})],
        ["spec.storage.pvc.mountPath must be a plain absolute path without '.' or '..'"],
    ),
    (
        "node-selector-bad-key",
        [_set("spec.head", {"nodeSelector": {"bad key!": "x"}})],
        ["spec.*.nodeSelector: every key must be a node label key"],
    ),
    (
        "env-value-and-value-from",
        [
            _set(
                "spec.workerTemplate",
                {
                    "env": [
                        {
                            "name": "POD",
                            "value": "x",
                            "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}},
                        }
                    ]
                },
            )
        ],
        ["spec.*.env: set value or valueFrom of an environment variable, not both"],
    ),
    (
        "limit-beyond-1ei",
        [_set("spec.head", {"resources": {"limits": {"memory": "2Ei"}}})],
        ["spec.*.resources.limits: every amount must be a Kubernetes quantity between 0 and 1Ei"],
    ),
    (
        "dataset-name-starts-with-digit",
        [_set("spec.datasets", {"1train": {"uri": "s3://raytrain/data"}})],
        ["spec.datasets: a dataset name has at most 63 letters"],
    ),
    # What a job may not set on its pods: the keys the operator, KubeRay and the
    # NetworkPolicies go by, the runtime's own variables, credentials in the endpoint's URL.
    (
        "pod-label-names-kuberay",
        [_set("spec.head", {"labels": {"app.kubernetes.io/name": "kuberay-operator"}})],
        ["spec.*.labels: the key app.kubernetes.io/name is reserved", "NetworkPolicies"],
    ),
    (
        "pod-annotation-of-ray",
        [_set("spec.workerTemplate", {"annotations": {"team": "a", "ray.io/ft-enabled": "x"}})],
        ["spec.*.annotations: the key ray.io/ft-enabled is reserved"],
    ),
    (
        "pod-label-of-the-operator",
        [_set("spec.workerTemplate", {"labels": {"raytrain.dev/trainjob": "other"}})],
        ["spec.*.labels: the key raytrain.dev/trainjob is reserved"],
    ),
    (
        "env-sets-the-attempt",
        [_set("spec.workerTemplate", {"env": [{"name": "RAYTRAIN_ATTEMPT", "value": "7"}]})],
        ["spec.*.env: RAYTRAIN_ATTEMPT is set by the operator", "remove it from env"],
    ),
    (
        "env-sets-the-pod-name",
        [_set("spec.head", {"env": [{"name": "A", "value": "1"}, {"name": "RAYTRAIN_POD_NAME"}]})],
        ["spec.*.env: RAYTRAIN_POD_NAME is set by the operator"],
    ),
    (
        "endpoint-with-credentials",
        [_set("spec.storage.s3", {**S3, "endpoint": "https://AKIAKEY:s3cr3t@minio.storage:9000"})],
        ["spec.storage.s3.endpoint must not hold credentials", "spec.storage.s3.credentialsSecret"],
    ),
    # Names of objects the pods refer to must be names the API server would give an object.
    (
        "claim-name-not-a-dns-subdomain",
        [_set("spec.storage", {"pvc": {"claimName": "Ckpt_1"}})],
        ["spec.storage.pvc.claimName", "should match"],
    ),
    (
        "secret-name-not-a-dns-subdomain",
        [_set("spec.storage.s3", {**S3, "credentialsSecret": {"name": "S3_Creds"}})],
        ["spec.storage.s3.credentialsSecret.name", "should match"],
    ),
    (
        "irsa-account-not-a-dns-subdomain",
        [_set("spec.storage.s3", {**S3, "serviceAccountName": "IRSA_Account"})],
        ["spec.storage.s3.serviceAccountName", "should match"],
    ),
    (
        "head-account-not-a-dns-subdomain",
        [_set("spec.head", {"serviceAccountName": "Head_Account"})],
        ["spec.head.serviceAccountName", "should match"],
    ),
    (
        "priority-class-not-a-dns-subdomain",
        [_set("spec.workerTemplate", {"priorityClassName": "High_Priority"})],
        ["spec.workerTemplate.priorityClassName", "should match"],
    ),
]


@pytest.mark.parametrize(
    ("mutations", "expected"),
    [pytest.param(m, e, id=i) for i, m, e in CASES],
)
def test_malformed_trainjob_is_refused(
    kube_cluster: Any, namespace: str, mutations: list[Callable[[Doc], None]], expected: list[str]
) -> None:
    doc = _valid()
    for mutate in mutations:
        mutate(doc)
    result = kube_cluster.kubectl(
        "create", "-n", namespace, "-f", "-", check=False, input=json.dumps(doc)
    )
    assert result.returncode != 0, f"the server accepted a malformed TrainJob: {doc}"
    for words in expected:
        assert words in result.stderr, f"refusal does not mention {words!r}: {result.stderr}"


def test_at_least_thirty_rules_are_exercised() -> None:
    assert len(CASES) >= 30


def test_valid_manifest_is_accepted(kube_cluster: Any, namespace: str) -> None:
    result = kube_cluster.kubectl(
        "create", "-n", namespace, "-f", "-", check=False, input=json.dumps(_valid())
    )
    assert result.returncode == 0, result.stderr
    got = json.loads(
        kube_cluster.kubectl("get", "rtj", "bad-input", "-n", namespace, "-o", "json").stdout
    )
    # The server stores no default for what a template may set (a stored default would hide
    # the template's value); the operator applies them to the spec it runs.
    assert "workersPerPod" not in got["spec"]["scaling"]
    assert "placementStrategy" not in got["spec"]["scaling"]
    assert "backoffLimit" not in got["spec"]
    assert got["spec"]["suspend"] is False  # not a template's: still defaulted
    spec = TrainJob.model_validate(got).spec
    assert (spec.scaling.workers_per_pod, spec.backoff_limit) == (1, 0)
    assert spec.scaling.placement_strategy.value == "PACK"


def test_a_job_may_carry_reserved_labels_itself(kube_cluster: Any, namespace: str) -> None:
    """A TrainJob's own labels are its users' (their tooling may name the app): the reserved
    ones are accepted on the TrainJob and are not copied to its children (meta.py)."""
    doc = _valid()
    doc["metadata"]["labels"] = {"app.kubernetes.io/name": "kuberay-operator"}
    doc["spec"]["head"] = {"labels": {"team": "a"}, "env": [{"name": "RAYTRAIN_LOG", "value": "1"}]}
    doc["spec"]["storage"]["s3"]["endpoint"] = "https://minio.storage:9000"
    result = kube_cluster.kubectl(
        "create", "-n", namespace, "-f", "-", check=False, input=json.dumps(doc)
    )
    assert result.returncode == 0, result.stderr


def test_a_retry_policy_is_accepted_as_written(kube_cluster: Any, namespace: str) -> None:
    doc = _valid()
    doc["metadata"]["name"] = "retry-policy"
    policy = {
        "classes": {"OOMKilled": True, "UserException": False},
        "exitCodes": [{"code": 75, "retry": True}],
    }
    doc["spec"]["retryPolicy"] = policy
    result = kube_cluster.kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(doc))
    assert result.returncode == 0, result.stderr
    got = json.loads(
        kube_cluster.kubectl("get", "rtj", "retry-policy", "-n", namespace, "-o", "json").stdout
    )
    assert got["spec"]["retryPolicy"] == policy


@pytest.mark.parametrize(
    "path", sorted(p.name for p in (ROOT / "examples").glob("*.yaml")), ids=str
)
def test_example_is_accepted(kube_cluster: Any, namespace: str, path: str) -> None:
    docs = [d for d in yaml.safe_load_all((ROOT / "examples" / path).read_text()) if d]
    result = kube_cluster.kubectl(
        "create",
        "-n",
        namespace,
        "--dry-run=server",
        "-f",
        "-",
        check=False,
        input="\n---\n".join(json.dumps(d) for d in docs),
    )
    assert result.returncode == 0, result.stderr
    assert any(d["kind"] == "TrainJob" for d in docs)


def test_short_name_and_category(kube_cluster: Any, namespace: str) -> None:
    kube_cluster.kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(_valid()))
    by_short = kube_cluster.kubectl("get", "rtj", "-n", namespace, "-o", "name").stdout
    by_category = kube_cluster.kubectl("get", "raytrain", "-n", namespace, "-o", "name").stdout
    assert "trainjob.raytrain.dev/bad-input" in by_short
    assert "trainjob.raytrain.dev/bad-input" in by_category


def test_explain_shows_descriptions(kube_cluster: Any) -> None:
    out = kube_cluster.kubectl("explain", "trainjobs.raytrain.dev.spec.storage").stdout
    assert "exactly one of pvc or s3" in out


def test_discovery_names_the_kind_its_short_name_and_the_status_subresource(
    kube_cluster: Any,
) -> None:
    listing = json.loads(kube_cluster.kubectl("get", "--raw", "/apis/raytrain.dev/v1alpha1").stdout)
    resources = {r["name"]: r for r in listing["resources"]}
    trainjobs = resources["trainjobs"]
    assert (trainjobs["kind"], trainjobs["namespaced"]) == ("TrainJob", True)
    # Kubeflow Trainer's TrainJob has no short name; ours must not be a generic one either.
    assert trainjobs["shortNames"] == ["rtj"]
    assert "raytrain" in trainjobs["categories"]
    assert "trainjobs/status" in resources


def _status_patch(kube_cluster: Any, namespace: str, status: Doc, *, check: bool = True) -> Any:
    return kube_cluster.kubectl(
        "patch", "rtj", "bad-input", "-n", namespace, "--subresource=status", "--type=merge",
        "-p", json.dumps({"status": status}), check=check,
    )  # fmt: skip


def test_kubectl_get_shows_the_status_in_its_columns(kube_cluster: Any, namespace: str) -> None:
    kube_cluster.kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(_valid()))
    status = {
        "phase": "Running",
        "trainerStatus": {"progressPercentage": 42, "epoch": 3, "estimatedRemainingSeconds": 120},
        "workers": {"ready": 2, "desired": 4},
        "rayJobName": "bad-input-0",
    }
    _status_patch(kube_cluster, namespace, status)

    def table(*wide: str) -> dict[str, str]:
        out = kube_cluster.kubectl("get", "rtj", "bad-input", "-n", namespace, *wide).stdout
        header, row = out.strip().splitlines()
        return dict(zip(header.split(), row.split(), strict=True))

    columns = table()
    assert columns.pop("AGE")
    assert columns == {
        "NAME": "bad-input",
        "STATUS": "Running",
        "PROGRESS": "42",
        "EPOCH": "3",
        "WORKERS": "2",
    }
    wide = table("-o", "wide")
    assert (wide["DESIRED"], wide["ETA"], wide["RAYJOB"]) == ("4", "120", "bad-input-0")


def test_status_and_spec_are_written_apart(kube_cluster: Any, namespace: str) -> None:
    """The status subresource: a write to the object leaves its status, and a write to the
    status leaves its spec (so a user's apply never clobbers what the operator reported)."""
    kube_cluster.kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(_valid()))
    _status_patch(kube_cluster, namespace, {"phase": "Running"})
    kube_cluster.kubectl(
        "patch", "rtj", "bad-input", "-n", namespace, "--type=merge",
        "-p", json.dumps({"spec": {"suspend": True}, "status": {"phase": "Failed"}}),
    )  # fmt: skip
    _status_patch(kube_cluster, namespace, {"phase": "Suspended"})
    kube_cluster.kubectl(
        "patch", "rtj", "bad-input", "-n", namespace, "--subresource=status", "--type=merge",
        "-p", json.dumps({"spec": {"suspend": False}}),
    )  # fmt: skip
    got = json.loads(
        kube_cluster.kubectl("get", "rtj", "bad-input", "-n", namespace, "-o", "json").stdout
    )
    assert (got["spec"]["suspend"], got["status"]["phase"]) == (True, "Suspended")


CONDITION = {
    "type": "Ready",
    "status": "True",
    "lastTransitionTime": "2026-01-01T00:00:00Z",
    "reason": "Running",
}


def test_conditions_are_a_map_keyed_by_type(kube_cluster: Any, namespace: str) -> None:
    kube_cluster.kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(_valid()))
    twice = [CONDITION, {**CONDITION, "status": "False"}]
    refused = _status_patch(kube_cluster, namespace, {"conditions": twice}, check=False)
    assert refused.returncode != 0
    assert "status.conditions[1]" in refused.stderr and "Duplicate value" in refused.stderr
    for field in ("type", "status", "lastTransitionTime", "reason"):
        partial = {k: v for k, v in CONDITION.items() if k != field}
        refused = _status_patch(kube_cluster, namespace, {"conditions": [partial]}, check=False)
        assert refused.returncode != 0, field
        assert f"status.conditions[0].{field}" in refused.stderr, refused.stderr
        assert "Required value" in refused.stderr, refused.stderr
    # Server-side apply merges the list by type: two writers' conditions stand side by side.
    for manager, kind in (("one", "Ready"), ("two", "Progressing")):
        applied = {
            "apiVersion": "raytrain.dev/v1alpha1",
            "kind": "TrainJob",
            "metadata": {"name": "bad-input"},
            "status": {"conditions": [{**CONDITION, "type": kind}]},
        }
        kube_cluster.kubectl(
            "apply", "--server-side", f"--field-manager={manager}", "--subresource=status",
            "-n", namespace, "-f", "-", input=json.dumps(applied),
        )  # fmt: skip
    got = json.loads(
        kube_cluster.kubectl("get", "rtj", "bad-input", "-n", namespace, "-o", "json").stdout
    )
    assert sorted(c["type"] for c in got["status"]["conditions"]) == ["Progressing", "Ready"]


def _start(kube_cluster: Any, namespace: str, doc: Doc) -> None:
    kube_cluster.kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(doc))
    patch = {"status": {"startTime": "2026-01-01T00:00:00Z"}}
    kube_cluster.kubectl(
        "patch",
        "rtj",
        doc["metadata"]["name"],
        "-n",
        namespace,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps(patch),
    )


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("image", "raytrain/trainer-runtime:0.2.0"),
        ("entrypoint", "other.module:train"),
        ("storage", {"s3": {"uri": "s3://elsewhere/ckpt"}}),
    ],
)
def test_started_job_keeps_image_entrypoint_and_storage(
    kube_cluster: Any, namespace: str, field: str, value: Any
) -> None:
    doc = _valid()
    _start(kube_cluster, namespace, doc)
    patch = json.dumps({"spec": {field: value}})
    refused = kube_cluster.kubectl(
        "patch", "rtj", "bad-input", "-n", namespace, "--type=merge", "-p", patch, check=False
    )
    assert refused.returncode != 0
    assert "immutable once the job has started" in refused.stderr
    assert "spec.suspend: true" in refused.stderr


def test_suspended_job_may_change_its_image(kube_cluster: Any, namespace: str) -> None:
    doc = copy.deepcopy(_valid())
    _start(kube_cluster, namespace, doc)
    suspend = json.dumps({"spec": {"suspend": True}})
    kube_cluster.kubectl(
        "patch", "rtj", "bad-input", "-n", namespace, "--type=merge", "-p", suspend
    )
    change = json.dumps({"spec": {"image": "raytrain/trainer-runtime:0.2.0"}})
    kube_cluster.kubectl("patch", "rtj", "bad-input", "-n", namespace, "--type=merge", "-p", change)
    got = json.loads(
        kube_cluster.kubectl("get", "rtj", "bad-input", "-n", namespace, "-o", "json").stdout
    )
    assert got["spec"]["image"] == "raytrain/trainer-runtime:0.2.0"


def test_not_started_job_may_change_its_image(kube_cluster: Any, namespace: str) -> None:
    kube_cluster.kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(_valid()))
    change = json.dumps({"spec": {"image": "raytrain/trainer-runtime:0.2.0"}})
    result = kube_cluster.kubectl(
        "patch", "rtj", "bad-input", "-n", namespace, "--type=merge", "-p", change, check=False
    )
    assert result.returncode == 0, result.stderr


def test_resume_from_is_fixed_once_the_job_has_started(kube_cluster: Any, namespace: str) -> None:
    doc = _valid()
    doc["spec"]["resumeFrom"] = {"trainJob": "digits"}
    kube_cluster.kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(doc))
    # Before the job starts: a mistake in it can be fixed.
    fix = json.dumps({"spec": {"resumeFrom": {"trainJob": "digits-2"}}})
    kube_cluster.kubectl("patch", "rtj", "bad-input", "-n", namespace, "--type=merge", "-p", fix)
    recorded = {"status": {"resumedFrom": "s3://raytrain/checkpoints/digits-2-x/checkpoint_1"}}
    kube_cluster.kubectl(
        "patch", "rtj", "bad-input", "-n", namespace, "--subresource=status",
        "--type=merge", "-p", json.dumps(recorded),
    )  # fmt: skip
    for change in (
        {"spec": {"resumeFrom": {"trainJob": "digits-3"}}},
        {"spec": {"resumeFrom": None}},
    ):
        refused = kube_cluster.kubectl(
            "patch", "rtj", "bad-input", "-n", namespace, "--type=merge", "-p",
            json.dumps(change), check=False,
        )  # fmt: skip
        assert refused.returncode != 0, change
        assert "spec.resumeFrom cannot change once the job has started" in refused.stderr
