"""The runtime-status admission policy of the chart against a real API server.

The per-job runtime account (`<job>-runtime`) is made as the operator makes it
(builders/rbac.py), the policy as the chart renders it, and requests are sent as that account
by impersonation (`kubectl --as=system:serviceaccount:<ns>:<job>-runtime`, the admin
kubeconfig). The runtime may change status.trainerStatus and status.checkpoint of its own
TrainJob; every operator-owned status field, any other TrainJob and the main resource are
refused, with the policy's message when RBAC lets the request reach admission.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from _required import required
from _wait import wait_for

from raytrain_contract.api.v1alpha1 import TrainJob
from raytrain_contract.meta import Meta
from raytrain_operator.builders.rbac import build_rbac

pytestmark = pytest.mark.integration

ROOT = pathlib.Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "raytrain-operator"
CRD_FILE = ROOT / "crds" / "trainjobs.raytrain.dev.yaml"
TEMPLATE = "templates/runtime-status-policy.yaml"
TRAINJOBS = "trainjobs.raytrain.dev"

STATUS: dict[str, Any] = {
    "phase": "Running",
    "attempt": 0,
    "restarts": 0,
    "conditions": [
        {
            "type": "Running",
            "status": "True",
            "reason": "Running",
            "message": "the Ray cluster is up",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        }
    ],
}


@pytest.fixture(scope="module")
def helm() -> str:
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "helm.sh")], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        msg = f"could not get helm through scripts/helm.sh:\n{proc.stderr}"
        if required():
            pytest.fail(msg)
        pytest.skip(msg)
    return proc.stdout.strip().splitlines()[-1]


def policy_docs(helm: str, release: str, template: str = TEMPLATE) -> list[dict[str, Any]]:
    proc = subprocess.run(
        [
            helm,
            "template",
            release,
            str(CHART),
            "--namespace",
            "raytrain-system",
            "--show-only",
            template,
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


@pytest.fixture(scope="module")
def policy(kube_cluster: Any, helm: str) -> Iterator[list[dict[str, Any]]]:
    kube_cluster.kubectl(
        "apply",
        "--server-side",
        "--field-manager=raytrain-tests",
        "--force-conflicts",
        "-f",
        str(CRD_FILE),
    )
    kube_cluster.kubectl("wait", "--for=condition=Established", f"crd/{TRAINJOBS}", "--timeout=60s")
    docs = policy_docs(helm, "status-policy")
    assert [d["kind"] for d in docs] == [
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    ]
    for doc in docs:
        kube_cluster.apply(doc)
    yield docs
    for doc in reversed(docs):
        kube_cluster.kubectl(
            "delete", doc["kind"].lower(), doc["metadata"]["name"], "--ignore-not-found"
        )


def make_trainjob(kube_cluster: Any, namespace: str, name: str) -> dict[str, Any]:
    doc = {
        "apiVersion": "raytrain.dev/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "image": "raytrain/trainer-runtime:0.1.0",
            "entrypoint": "examples.digits.train:train_loop_per_worker",
            "scaling": {"numWorkers": 2},
            "storage": {"s3": {"uri": "s3://raytrain/checkpoints"}},
        },
    }
    kube_cluster.apply(doc, namespace=namespace)
    kube_cluster.kubectl(
        "patch",
        TRAINJOBS,
        name,
        "-n",
        namespace,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": STATUS}),
    )
    obj: dict[str, Any] = kube_cluster.get_json(TRAINJOBS, name, "-n", namespace)
    return obj


def make_runtime_account(kube_cluster: Any, obj: dict[str, Any]) -> str:
    """ServiceAccount, Role and RoleBinding as the operator creates them; the account's user."""
    trainjob = TrainJob.model_validate(obj)
    md = obj["metadata"]
    meta = Meta(name=md["name"], namespace=md["namespace"], uid=md["uid"])
    for child in build_rbac(trainjob, meta):
        kube_cluster.apply(child, namespace=md["namespace"])
    return f"system:serviceaccount:{md['namespace']}:{md['name']}-runtime"


def as_user(
    kube_cluster: Any, user: str, namespace: str, *args: str
) -> subprocess.CompletedProcess[str]:
    proc: subprocess.CompletedProcess[str] = kube_cluster.kubectl(
        f"--as={user}", "--as-group=system:serviceaccounts", "-n", namespace, *args, check=False
    )
    return proc


def patch_status(
    kube_cluster: Any, user: str, namespace: str, name: str, status: dict[str, Any]
) -> subprocess.CompletedProcess[str]:
    return as_user(
        kube_cluster,
        user,
        namespace,
        "patch",
        TRAINJOBS,
        name,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": status}),
    )


def wait_until_enforced(kube_cluster: Any, user: str, namespace: str, name: str) -> None:
    """A new policy reaches the API server's admission chain within seconds, not at once."""

    def refused() -> bool:
        probe = patch_status(kube_cluster, user, namespace, name, {"restarts": 7})
        if probe.returncode == 0:
            # Not enforced yet: the admin puts the value back.
            kube_cluster.kubectl(
                "patch",
                TRAINJOBS,
                name,
                "-n",
                namespace,
                "--subresource=status",
                "--type=merge",
                "-p",
                json.dumps({"status": {"restarts": 0}}),
            )
        return "ValidatingAdmissionPolicy" in probe.stderr

    wait_for(refused, timeout=60, what="the runtime-status policy to be enforced")


def test_runtime_may_change_only_its_two_fields(
    kube_cluster: Any, namespace: str, policy: list[dict[str, Any]]
) -> None:
    job = make_trainjob(kube_cluster, namespace, "job-a")
    user = make_runtime_account(kube_cluster, job)
    wait_until_enforced(kube_cluster, user, namespace, "job-a")

    trainer = {"phase": "Training", "step": 3, "attempt": 0, "message": "epoch 1"}
    ok = patch_status(
        kube_cluster,
        user,
        namespace,
        "job-a",
        {"trainerStatus": trainer, "checkpoint": {"count": 1, "latestURI": "s3://b/c/1"}},
    )
    assert ok.returncode == 0, ok.stderr
    status = kube_cluster.get_json(TRAINJOBS, "job-a", "-n", namespace)["status"]
    assert status["trainerStatus"]["step"] == 3
    assert status["checkpoint"]["count"] == 1

    for field, value in [
        ("restarts", 5),
        ("attempt", 3),
        ("phase", "Succeeded"),
        ("conditions", [{**STATUS["conditions"][0], "status": "False"}]),
        ("completionTime", "2026-01-01T01:00:00Z"),
    ]:
        proc = patch_status(kube_cluster, user, namespace, "job-a", {field: value})
        assert proc.returncode != 0, f"status.{field} was accepted"
        assert f"may not change status.{field} of TrainJob job-a" in proc.stderr, proc.stderr
        assert "ValidatingAdmissionPolicy" in proc.stderr
    # Removing an operator-owned field is a change too.
    proc = patch_status(kube_cluster, user, namespace, "job-a", {"restarts": None})
    assert "may not change status.restarts" in proc.stderr, proc.stderr
    # Labels through the status subresource: refused by the policy or ignored by the server,
    # never kept.
    before = kube_cluster.get_json(TRAINJOBS, "job-a", "-n", namespace)["metadata"]
    as_user(
        kube_cluster,
        user,
        namespace,
        "patch",
        TRAINJOBS,
        "job-a",
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"metadata": {"labels": {"raytrain.dev/trainjob": "job-b"}}}),
    )
    after_meta = kube_cluster.get_json(TRAINJOBS, "job-a", "-n", namespace)["metadata"]
    assert after_meta.get("labels") == before.get("labels")
    # A refused request changed nothing.
    after = kube_cluster.get_json(TRAINJOBS, "job-a", "-n", namespace)["status"]
    assert {k: after[k] for k in STATUS} == STATUS

    # The admin (a user, not a runtime account) is not matched by the policy.
    admin = kube_cluster.kubectl(
        "patch",
        TRAINJOBS,
        "job-a",
        "-n",
        namespace,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": {"restarts": 1}}),
        check=False,
    )
    assert admin.returncode == 0, admin.stderr


def test_runtime_may_not_touch_another_trainjob(
    kube_cluster: Any, namespace: str, policy: list[dict[str, Any]]
) -> None:
    job_a = make_trainjob(kube_cluster, namespace, "job-a")
    make_trainjob(kube_cluster, namespace, "job-b")
    user = make_runtime_account(kube_cluster, job_a)
    wait_until_enforced(kube_cluster, user, namespace, "job-a")
    trainer = {"trainerStatus": {"phase": "Training", "step": 1}}

    # RBAC refuses first: the per-job Role names its own TrainJob only.
    proc = patch_status(kube_cluster, user, namespace, "job-b", trainer)
    assert proc.returncode != 0
    assert "forbidden" in proc.stderr.lower(), proc.stderr

    # With a Role too wide (every TrainJob, the main resource too), the policy still refuses.
    wide = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "too-wide", "namespace": namespace},
        "rules": [
            {
                "apiGroups": ["raytrain.dev"],
                "resources": ["trainjobs", "trainjobs/status"],
                "verbs": ["get", "patch", "update", "delete"],
            }
        ],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "too-wide", "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "too-wide"},
        "subjects": [{"kind": "ServiceAccount", "name": "job-a-runtime", "namespace": namespace}],
    }
    kube_cluster.apply(wide, namespace=namespace)
    kube_cluster.apply(binding, namespace=namespace)

    def reaches_admission() -> bool:
        proc = patch_status(kube_cluster, user, namespace, "job-b", trainer)
        return "ValidatingAdmissionPolicy" in proc.stderr

    wait_for(reaches_admission, timeout=30, what="the wide RoleBinding to take effect")
    proc = patch_status(kube_cluster, user, namespace, "job-b", trainer)
    assert proc.returncode != 0
    assert (
        "ServiceAccount job-a-runtime may patch the status of TrainJob job-a only, "
        "not of TrainJob job-b" in proc.stderr
    ), proc.stderr

    spec = as_user(
        kube_cluster,
        user,
        namespace,
        "patch",
        TRAINJOBS,
        "job-a",
        "--type=merge",
        "-p",
        '{"spec": {"suspend": true}}',
    )
    assert spec.returncode != 0
    assert "not UPDATE trainjobs (TrainJob job-a)" in spec.stderr, spec.stderr
    gone = as_user(kube_cluster, user, namespace, "delete", TRAINJOBS, "job-b")
    assert gone.returncode != 0
    assert "not DELETE trainjobs (TrainJob job-b)" in gone.stderr, gone.stderr
    assert kube_cluster.get_json(TRAINJOBS, "job-a", "-n", namespace)["spec"].get("suspend") in (
        None,
        False,
    )


def test_a_report_of_an_earlier_attempt_changes_nothing(
    kube_cluster: Any, namespace: str, policy: list[dict[str, Any]]
) -> None:
    """Once the operator moved the job to attempt 1, a late report of attempt 0 (its driver
    still running, or an upload that finished after the retry began) is refused: it can make
    neither its checkpoint the one the next attempt resumes from, nor its phase the job's. The
    other writers of the same account (the preStop hook, the out-of-memory watcher) do not
    touch these fields and are not affected."""
    job = make_trainjob(kube_cluster, namespace, "job-a")
    user = make_runtime_account(kube_cluster, job)
    wait_until_enforced(kube_cluster, user, namespace, "job-a")
    first = {
        "trainerStatus": {"phase": "Training", "step": 4, "attempt": 0, "epoch": 3},
        "checkpoint": {"count": 2, "latestURI": "s3://b/run/checkpoint_2"},
    }
    ok = patch_status(kube_cluster, user, namespace, "job-a", first)
    assert ok.returncode == 0, ok.stderr

    # The operator starts attempt 1 (the admin stands in for it here).
    kube_cluster.kubectl(
        "patch", TRAINJOBS, "job-a", "-n", namespace, "--subresource=status", "--type=merge",
        "-p", json.dumps({"status": {"attempt": 1, "restarts": 1}}),
    )  # fmt: skip
    before = kube_cluster.get_json(TRAINJOBS, "job-a", "-n", namespace)["status"]

    late = {
        "trainerStatus": {"phase": "Succeeded", "step": 9, "attempt": 0, "epoch": 7},
        "checkpoint": {"count": 3, "latestURI": "s3://b/run/checkpoint_3"},
    }
    for body in (
        late,
        {"checkpoint": late["checkpoint"]},
        {"trainerStatus": late["trainerStatus"]},
    ):
        proc = patch_status(kube_cluster, user, namespace, "job-a", body)
        assert proc.returncode != 0, f"{body} was accepted"
        assert (
            "sent a report of attempt 0 to TrainJob job-a, which is at attempt 1: only the "
            "current attempt may report" in proc.stderr
        ), proc.stderr
    assert kube_cluster.get_json(TRAINJOBS, "job-a", "-n", namespace)["status"] == before

    # The current attempt reports as usual, and the disruption notice of any attempt passes.
    now = {
        "trainerStatus": {"phase": "Training", "step": 5, "attempt": 1, "epoch": 3},
        "checkpoint": {"count": 3, "latestURI": "s3://b/run/checkpoint_3"},
    }
    ok = patch_status(kube_cluster, user, namespace, "job-a", now)
    assert ok.returncode == 0, ok.stderr
    disrupted = {"disrupted": {"attempt": 0, "pod": "job-a-0-head-x", "reason": "Evicted"}}
    assert patch_status(kube_cluster, user, namespace, "job-a", disrupted).returncode == 0
    status = kube_cluster.get_json(TRAINJOBS, "job-a", "-n", namespace)["status"]
    assert status["checkpoint"]["latestURI"] == "s3://b/run/checkpoint_3"
    assert status["trainerStatus"]["attempt"] == 1


def test_what_a_resume_found_is_reported_by_the_current_attempt_only(
    kube_cluster: Any, namespace: str, policy: list[dict[str, Any]]
) -> None:
    """The checkpoint a resume used and those its check passed over (status.checkpoint's
    resumedFrom, resumedAttempt and rejected) are the runtime's to write, under the attempt
    rule of the rest of status.checkpoint: the current attempt's report is kept whole, an
    earlier attempt's is refused. What the operator announced of them is the operator's."""
    job = make_trainjob(kube_cluster, namespace, "job-a")
    user = make_runtime_account(kube_cluster, job)
    wait_until_enforced(kube_cluster, user, namespace, "job-a")
    # The operator starts attempt 1 (the admin stands in for it here).
    kube_cluster.kubectl(
        "patch", TRAINJOBS, "job-a", "-n", namespace, "--subresource=status", "--type=merge",
        "-p", json.dumps({"status": {"attempt": 1, "restarts": 1}}),
    )  # fmt: skip
    run = "s3://b/run"
    rejected = [
        {
            "uri": f"{run}/checkpoint_3",
            "problem": "size",
            "reason": "file model.pt is 12 bytes, the manifest says 1234",
            "attempt": 1,
            "time": "2026-12-03T12:00:00Z",
        },
        {
            "uri": f"{run}/checkpoint_2",
            "problem": "no-manifest",
            "reason": "no manifest (.raytrain/manifest.json): its upload did not finish",
            "attempt": 1,
            "time": "2026-12-03T12:00:01Z",
        },
    ]
    resume = {
        "trainerStatus": {"phase": "Running", "step": 0, "attempt": 1},
        "checkpoint": {
            "latestURI": f"{run}/checkpoint_1",
            "resumedFrom": f"{run}/checkpoint_1",
            "resumedAttempt": 1,
            "rejected": rejected,
        },
    }
    ok = patch_status(kube_cluster, user, namespace, "job-a", resume)
    assert ok.returncode == 0, ok.stderr
    checkpoint = kube_cluster.get_json(TRAINJOBS, "job-a", "-n", namespace)["status"]["checkpoint"]
    assert checkpoint["resumedFrom"] == f"{run}/checkpoint_1"
    assert checkpoint["resumedAttempt"] == 1
    assert checkpoint["rejected"] == rejected
    before = kube_cluster.get_json(TRAINJOBS, "job-a", "-n", namespace)["status"]

    # The same report from attempt 0 (its driver still running after the retry began).
    late = {
        "trainerStatus": {"phase": "Running", "step": 0, "attempt": 0},
        "checkpoint": {
            "resumedFrom": f"{run}/checkpoint_3",
            "resumedAttempt": 0,
            "rejected": [{**r, "attempt": 0} for r in rejected[1:]],
        },
    }
    proc = patch_status(kube_cluster, user, namespace, "job-a", late)
    assert proc.returncode != 0, "attempt 0's resume report was accepted"
    assert (
        "sent a report of attempt 0 to TrainJob job-a, which is at attempt 1: only the "
        "current attempt may report" in proc.stderr
    ), proc.stderr
    assert kube_cluster.get_json(TRAINJOBS, "job-a", "-n", namespace)["status"] == before

    # The record of what the operator announced is the operator's.
    announced = {"uri": f"{run}/checkpoint_2", "attempt": 1, "time": "2026-12-03T12:00:01Z"}
    proc = patch_status(kube_cluster, user, namespace, "job-a", {"announcedRejection": announced})
    assert proc.returncode != 0, "status.announcedRejection was accepted"
    assert "may not change status.announcedRejection of TrainJob job-a" in proc.stderr, proc.stderr
    admin = kube_cluster.kubectl(
        "patch", TRAINJOBS, "job-a", "-n", namespace, "--subresource=status", "--type=merge",
        "-p", json.dumps({"status": {"announcedRejection": announced}}), check=False,
    )  # fmt: skip
    assert admin.returncode == 0, admin.stderr
    status = kube_cluster.get_json(TRAINJOBS, "job-a", "-n", namespace)["status"]
    assert status["announcedRejection"] == announced
