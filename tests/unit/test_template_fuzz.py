"""Random TrainJob and template pairs through everything the operator runs on a new spec: the
merge, the models, the CRD's types and CEL rules (api/rules.py) and the builders.

Each pair starts from a complete valid spec, breaks one to three of its values (with values
users write by mistake: strings for numbers, reserved names, paths out of a mount, nulls) and
splits its fields at random between the job and its template. No pair may crash a pass (an
operator error instead of a message), and every refusal must name the field and say what to do,
with no validation library's own wording ("pydantic", its error URLs) in it.

`make test` runs 10,000 pairs (RAYTRAIN_FUZZ_PAIRS, set by scripts/test.sh); a bare `pytest`
runs 500. RAYTRAIN_FUZZ_SEED repeats a run; the seed is in the failure's message.
"""

from __future__ import annotations

import copy
import json
import os
import random
from collections.abc import Iterator
from typing import Any

from raytrain_operator.handlers import faults, reconcile

PAIRS = int(os.environ.get("RAYTRAIN_FUZZ_PAIRS", "500"))
SEED = int(os.environ.get("RAYTRAIN_FUZZ_SEED", "20261203"))

FULL: dict[str, Any] = {
    "image": "registry.example/team/trainer:1.0",
    "entrypoint": "examples.digits.train:train_loop_per_worker",
    "storage": {
        "s3": {
            "uri": "s3://team/runs",
            "endpoint": "http://minio.storage:9000",
            "credentialsSecret": {"name": "team-s3"},
        }
    },
    "scaling": {
        "numWorkers": 4,
        "workersPerPod": 2,
        "resourcesPerWorker": {"cpu": "1", "memory": "2Gi", "custom": {"ssd": 1}},
    },
    "backoffLimit": 3,
    "ttlSecondsAfterFinished": 600,
    "activeDeadlineSeconds": 3600,
    "config": {"epochs": 5, "optimizer": {"lr": 0.01}},
    "checkpoint": {"numToKeep": 2, "scoreAttribute": "loss", "scoreOrder": "min"},
    "retryPolicy": {"classes": {"OOMKilled": False}},
    "head": {
        "resources": {"requests": {"cpu": "1"}, "limits": {"memory": "4Gi"}},
        "env": [{"name": "A", "value": "1"}],
        "labels": {"team": "a"},
        "annotations": {"example.com/owner": "a"},
    },
    "workerTemplate": {
        "env": [{"name": "B", "value": "2"}],
        "envFrom": [{"secretRef": {"name": "team-env"}}],
        "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "nodeSelector": {"pool": "gpu"},
        "volumes": [{"name": "data", "emptyDir": {}}],
        "volumeMounts": [{"name": "data", "mountPath": "/data"}],
        "priorityClassName": "team-high",
    },
}
PVC = {"pvc": {"claimName": "team-ckpt", "mountPath": "/mnt/ckpt"}}

#: Values users write by mistake, and some right ones in the wrong place.
VALUES: list[Any] = [
    None, 0, -1, 1, 3, 5, 7, 2.5, 1e30, "", " ", "x", "2", "yes", "true", True, False, [], {},
    [1], {"a": 1}, [{"name": "x"}], "1Gi", "-1Gi", "500m", "1e1000000", "s3://b/p", "s3://B/p",
    "/mnt/ckpt", "/mnt/ckpt/x", "/etc/raytrain", "/dev/shm/x", "../x", "/a/../b", "ray.io/x",
    "app.kubernetes.io/name", "raytrain-storage", "RAYTRAIN_ATTEMPT", "a" * 300, "Exists",
    "NoExecute", "a:b", "a.py:b", "https://user:pass@host", "OOMKilled", "Checksums", "max",
]  # fmt: skip


def _paths(node: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _paths(value, (*path, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _paths(value, (*path, index))
    if path:
        yield path


def _set(node: Any, path: tuple[Any, ...], value: Any) -> None:
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value


def pair(rng: random.Random) -> tuple[dict[str, Any], dict[str, Any]]:
    spec = copy.deepcopy(FULL)
    if rng.random() < 0.3:
        spec["storage"] = copy.deepcopy(PVC)
    for _ in range(rng.randint(1, 3)):
        _set(spec, rng.choice(list(_paths(spec))), copy.deepcopy(rng.choice(VALUES)))
    own: dict[str, Any] = {"template": {"name": "team-defaults"}}
    template: dict[str, Any] = {}
    for key, value in spec.items():
        if isinstance(value, dict) and value and rng.random() < 0.3:
            # Split an object too: part of it in the template, part in the job.
            keys = list(value)
            cut = rng.randint(0, len(keys))
            template[key] = {k: value[k] for k in keys[:cut]}
            own[key] = {k: value[k] for k in keys[cut:]}
        elif rng.random() < 0.5:
            template[key] = value
        else:
            own[key] = value
    if rng.random() < 0.1:
        # The template's storage beside the job's own, of the other kind.
        template["storage"] = copy.deepcopy(PVC)
    return own, template


def unclear(message: str) -> str | None:
    """Why ``message`` would not tell a user what to fix; None when it does."""
    if not message.startswith("spec."):
        return "does not start with the field it is about"
    if "; " not in message:
        return "says no fix"
    for word in ("pydantic", "Traceback", "object at 0x", "CELEvalError", "could not be evaluated"):
        if word in message:
            return f"carries {word!r}"
    return None


def test_random_job_and_template_pairs_never_crash_a_pass_and_every_refusal_is_clear() -> None:
    rng = random.Random(SEED)
    refused = 0
    for number in range(PAIRS):
        own, template = pair(rng)
        body = {
            "metadata": {"name": "fuzz", "namespace": "team", "uid": "u", "generation": 1},
            "spec": own,
        }
        case = (
            f"pair {number} of seed {SEED}: job {json.dumps(own)}, template {json.dumps(template)}"
        )
        try:
            _, problem = reconcile.parse(body, template)
        except faults.BuilderBug as bug:
            raise AssertionError(f"{case}: the builders broke ({bug.error!r})") from bug
        if problem is None:
            continue
        refused += 1
        why = unclear(problem)
        assert why is None, f"{case}: the refusal {why}: {problem}"
    # The pairs must exercise refusals, and valid runs too.
    assert PAIRS // 4 < refused < PAIRS, refused
