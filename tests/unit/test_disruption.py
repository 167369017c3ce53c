"""Disruptions: the PodDisruptionBudget, the workers' grace period and drain hook, the preemption
budget of the status machine, and the hook itself (trainer_runtime/drain.py)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from _clock import FakeClock
from _factories import meta, ours, trainjob
from test_status_machine import cond, rayjob, run, status_after
from test_triage import container, pod

from raytrain_contract.meta import LABEL_ROLE, LABEL_TRAINJOB
from raytrain_operator import k8s
from raytrain_operator.builders.disruption import build_pod_disruption_budget
from raytrain_operator.builders.rayjob import build_rayjob
from raytrain_operator.handlers import apply
from raytrain_operator.handlers.state import PassState
from raytrain_operator.status.machine import EnsureChildren
from raytrain_operator.status.triage import FailureClass
from trainer_runtime import drain

# ------------------------------------------------------------------------------------ builders


def test_the_budget_covers_head_and_workers_of_every_attempt_one_at_a_time() -> None:
    pdb = build_pod_disruption_budget(trainjob(), meta())
    assert pdb is not None
    assert pdb["apiVersion"] == "policy/v1" and pdb["metadata"]["name"] == "digits-ray"
    assert pdb["metadata"]["ownerReferences"][0]["controller"] is True
    spec = pdb["spec"]
    # Head and two workers (the factory's numWorkers): two stay, one may go.
    assert spec["minAvailable"] == 2 and "maxUnavailable" not in spec
    assert spec["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
    rj = build_rayjob(trainjob(), meta(), 2, suspend=False)
    cluster = rj["spec"]["rayClusterSpec"]
    pods = {
        "head": cluster["headGroupSpec"]["template"]["metadata"]["labels"],
        "worker": cluster["workerGroupSpecs"][0]["template"]["metadata"]["labels"],
        "submitter": rj["spec"]["submitterPodTemplate"]["metadata"]["labels"],
    }

    def selected(labels: dict[str, str]) -> bool:
        sel = spec["selector"]
        if any(labels.get(k) != v for k, v in sel["matchLabels"].items()):
            return False
        return all(labels.get(e["key"]) in e["values"] for e in sel["matchExpressions"])

    assert selected(pods["head"]) and selected(pods["worker"]) and not selected(pods["submitter"])
    assert "raytrain.dev/attempt" not in spec["selector"]["matchLabels"]
    assert spec["selector"]["matchLabels"] == {LABEL_TRAINJOB: "digits"}
    assert spec["selector"]["matchExpressions"][0]["key"] == LABEL_ROLE


def test_an_autoscaled_cluster_keeps_its_minimum_less_one() -> None:
    tj = trainjob(scaling={"minWorkers": 2, "maxWorkers": 4})
    pdb = build_pod_disruption_budget(tj, meta())
    assert pdb is not None and pdb["spec"]["minAvailable"] == 2


def test_the_budget_can_be_turned_off() -> None:
    tj = trainjob(disruption={"podDisruptionBudget": False})
    assert build_pod_disruption_budget(tj, meta()) is None


def _templates(rj: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    cluster = rj["spec"]["rayClusterSpec"]
    return cluster["headGroupSpec"]["template"], cluster["workerGroupSpecs"][0]["template"]


def test_workers_drain_their_ray_node_and_the_head_records_its_disruption() -> None:
    head, worker = _templates(build_rayjob(trainjob(), meta(), 0, suspend=False))
    (w,) = worker["spec"]["containers"]
    assert w["lifecycle"]["preStop"]["exec"]["command"] == ["python", "-m", "trainer_runtime.drain"]
    env = {e["name"]: e.get("value") for e in w["env"]}
    assert worker["spec"]["terminationGracePeriodSeconds"] == 120
    assert env["RAYTRAIN_DRAIN_SECONDS"] == "110"
    assert "RAYTRAIN_POD_NAME" in env
    (h,) = head["spec"]["containers"]
    assert h["lifecycle"]["preStop"]["exec"]["command"] == [
        "python", "-m", "trainer_runtime.drain", "--head",
    ]  # fmt: skip
    pod_name = {e["name"]: e for e in h["env"]}["RAYTRAIN_POD_NAME"]
    assert pod_name["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert "RAYTRAIN_DRAIN_SECONDS" not in {e["name"] for e in h["env"]}


def test_the_grace_period_comes_from_disruption_unless_the_pod_sets_its_own() -> None:
    tj = trainjob(disruption={"terminationGracePeriodSeconds": 300})
    head, worker = _templates(build_rayjob(tj, meta(), 0, suspend=False))
    assert head["spec"]["terminationGracePeriodSeconds"] == 300
    assert worker["spec"]["terminationGracePeriodSeconds"] == 300
    env = {e["name"]: e.get("value") for e in worker["spec"]["containers"][0]["env"]}
    assert env["RAYTRAIN_DRAIN_SECONDS"] == "290"
    tj = trainjob(
        disruption={"terminationGracePeriodSeconds": 300},
        workerTemplate={"terminationGracePeriodSeconds": 5},
    )
    _, worker = _templates(build_rayjob(tj, meta(), 0, suspend=False))
    assert worker["spec"]["terminationGracePeriodSeconds"] == 5
    env = {e["name"]: e.get("value") for e in worker["spec"]["containers"][0]["env"]}
    assert env["RAYTRAIN_DRAIN_SECONDS"] == "1"


def test_an_unset_disruption_leaves_the_spec_hash_of_earlier_operators() -> None:
    dumped = trainjob().spec.model_dump(mode="json", by_alias=True)
    assert "disruption" not in dumped


# ---------------------------------------------------------------------------- status machine


def evicted(reason: str = "EvictionByEvictionAPI") -> dict[str, Any]:
    return pod(
        phase="Failed",
        conditions=[
            {"type": "DisruptionTarget", "status": "True", "reason": reason, "message": "drain"}
        ],
    )


def test_an_evicted_attempt_is_retried_without_spending_the_backoff_limit() -> None:
    st: dict[str, Any] = {"attempt": 0, "restarts": 0}
    rj = rayjob(deployment="Failed", job_status="FAILED")
    p = run(trainjob(backoffLimit=0), st, rj, attempt_pods=[evicted()])
    assert p.phase == "Pending" and p.status["attempt"] == 1
    assert p.status["restarts"] == 0 and p.status["preemptions"] == 1
    reconciling = cond(p, "Reconciling")
    assert reconciling["reason"] == "Preempted"
    assert "preemption 1 of spec.disruption.maxPreemptions 10" in reconciling["message"]
    assert "EvictionByEvictionAPI" in reconciling["message"]


def test_a_lost_node_is_a_preemption_and_the_budget_runs_out() -> None:
    lost = pod(phase="Failed", reason="NodeLost", message="Node node-a is unresponsive")
    tj = trainjob(backoffLimit=1, disruption={"maxPreemptions": 1})
    st: dict[str, Any] = {"attempt": 0, "restarts": 0}
    p = run(tj, st, rayjob(deployment="Failed", job_status="FAILED"), attempt_pods=[lost])
    assert p.status["preemptions"] == 1 and p.status["restarts"] == 0
    st = status_after(p, st)
    p2 = run(tj, st, rayjob("digits-1", deployment="Failed"), attempt_pods=[lost])
    # The budget is spent: this one spends spec.backoffLimit.
    assert p2.status["restarts"] == 1 and "preemptions" not in p2.status
    assert cond(p2, "Reconciling")["reason"] == "Retrying"
    assert "maxPreemptions 1 spent" in cond(p2, "Reconciling")["message"]


def test_a_head_the_hook_saw_disrupted_makes_the_failure_a_preemption() -> None:
    record = {"attempt": 0, "pod": "digits-0-head-x", "reason": "PreemptionByScheduler"}
    st: dict[str, Any] = {"attempt": 0, "restarts": 0, "disrupted": record}
    rj = rayjob(deployment="Failed", job_status="FAILED")
    # The head pod is gone: no pod evidence, only the hook's record.
    p = run(trainjob(backoffLimit=0), st, rj, attempt_pods=[])
    assert p.status["preemptions"] == 1 and p.status["attempt"] == 1
    assert (
        "head pod digits-0-head-x was taken away (PreemptionByScheduler"
        in (cond(p, "Reconciling")["message"])
    )
    # A record of an earlier attempt says nothing about this one.
    st = {"attempt": 1, "restarts": 0, "disrupted": record}
    p = run(trainjob(backoffLimit=0), st, rayjob("digits-1", deployment="Failed"))
    assert p.phase == "Failed" and "preemptions" not in p.status


def test_a_head_the_node_took_away_makes_the_attempt_node_lost() -> None:
    record = {
        "attempt": 0,
        "pod": "digits-0-head-x",
        "reason": "DeletionByTaintManager",
        "message": "Taint manager: deleting due to NoExecute taint",
    }
    st: dict[str, Any] = {"attempt": 0, "restarts": 0, "disrupted": record}
    # The head and its driver are gone: KubeRay's words say nothing of why.
    rj = rayjob(deployment="Failed", job_status="FAILED")
    p = run(trainjob(backoffLimit=0), st, rj, attempt_pods=[])
    assert p.attempt_failure is not None
    assert p.attempt_failure.failure_class is FailureClass.NODE_LOST
    assert "head pod digits-0-head-x was deleted by Kubernetes (DeletionByTaintManager" in (
        p.attempt_failure.message
    )
    assert p.status["preemptions"] == 1 and p.status["restarts"] == 0
    # A scheduler's preemption of the head is a preemption, not a lost node.
    st["disrupted"] = {**record, "reason": "PreemptionByScheduler"}
    p = run(trainjob(backoffLimit=0), st, rj, attempt_pods=[])
    assert p.attempt_failure is not None
    assert p.attempt_failure.failure_class is FailureClass.UNKNOWN
    # What the attempt's own pods showed stays the class.
    st["disrupted"] = record
    killed = {"terminated": {"reason": "OOMKilled", "exitCode": 137}}
    oom = pod(phase="Failed", containers=[container(state=killed)])
    p = run(trainjob(backoffLimit=0), st, rj, attempt_pods=[oom])
    assert p.attempt_failure is not None
    assert p.attempt_failure.failure_class is FailureClass.OOM_KILLED


def test_a_plain_failure_is_no_preemption() -> None:
    st: dict[str, Any] = {"attempt": 0, "restarts": 0}
    deleted = pod(
        phase="Failed",
        conditions=[{"type": "DisruptionTarget", "status": "False", "reason": "x"}],
    )
    p = run(
        trainjob(backoffLimit=1),
        st,
        rayjob(deployment="Failed", job_status="FAILED"),
        attempt_pods=[deleted],
    )
    assert "preemptions" not in p.status and p.status["restarts"] == 1


# ------------------------------------------------------------------------------------ the hook


class FakeGcs:
    def __init__(self, nodes: dict[str, str], accept: bool = True) -> None:
        self.nodes = nodes
        self.accept = accept
        self.drained: list[tuple[str, str, int]] = []

    def node_id_for_ip(self, ip: str) -> str | None:
        return self.nodes.get(ip)

    def drain(self, node_id: str, message: str, deadline_ms: int) -> tuple[bool, str]:
        self.drained.append((node_id, message, deadline_ms))
        return self.accept, "" if self.accept else "the node is the head"


ENV = {
    "FQ_RAY_IP": "digits-0-head-svc.team-a.svc.cluster.local",
    "MY_POD_IP": "10.0.0.7",
    "MY_POD_NAME": "digits-0-abc-workers-worker-x",
    "RAYTRAIN_DRAIN_SECONDS": "110",
}


def test_the_hook_drains_its_node_with_a_deadline_and_waits_for_the_worker() -> None:
    gcs = FakeGcs({"10.0.0.7": "abc123"})
    addresses: list[str] = []
    clock = FakeClock(1000.0)
    busy_until = 1030.0

    def factory(address: str) -> FakeGcs:
        addresses.append(address)
        return gcs

    said = drain.run(
        ENV, factory, busy=lambda: clock.now < busy_until, clock=clock, sleep=clock.sleep
    )
    assert addresses == ["digits-0-head-svc.team-a.svc.cluster.local:6379"]
    (node, message, deadline_ms) = gcs.drained[0]
    assert node == "abc123" and deadline_ms == 1110 * 1000
    assert "digits-0-abc-workers-worker-x" in message
    assert clock.now == busy_until and "is gone after 30 s" in said


def test_the_hook_gives_up_at_the_deadline() -> None:
    gcs = FakeGcs({"10.0.0.7": "abc123"})
    clock = FakeClock(1000.0)
    said = drain.run(ENV, lambda _: gcs, busy=lambda: True, clock=clock, sleep=clock.sleep)
    assert clock.now == 1110.0 and "still running at the deadline" in said


def test_the_hook_returns_at_once_without_a_train_worker_or_when_refused() -> None:
    gcs = FakeGcs({"10.0.0.7": "abc123"}, accept=False)
    clock = FakeClock(1000.0)
    said = drain.run(ENV, lambda _: gcs, busy=lambda: False, clock=clock, sleep=clock.sleep)
    assert gcs.drained == [] and "nothing to drain" in said
    said = drain.run(ENV, lambda _: gcs, busy=lambda: True, clock=clock, sleep=clock.sleep)
    assert "refused" in said and clock.now == 1000.0


def test_the_hook_never_fails_the_delete() -> None:
    def broken(address: str) -> FakeGcs:
        raise ConnectionError("GCS unreachable")

    clock = FakeClock(1000.0)
    said = drain.run(ENV, broken, busy=lambda: True, clock=clock, sleep=clock.sleep)
    assert "ConnectionError" in said
    assert "not a KubeRay worker" in drain.run({}, broken, busy=lambda: True)


def test_train_workers_are_found_by_their_process_title(tmp_path: Path) -> None:
    (tmp_path / "1").mkdir()
    (tmp_path / "1" / "cmdline").write_bytes(b"/pause\0")
    (tmp_path / "self").mkdir()
    assert not drain.train_worker_running(tmp_path)
    (tmp_path / "42").mkdir()
    (tmp_path / "42" / "cmdline").write_bytes(b"ray::RayTrainWorker.run_train_fn\0")
    assert drain.train_worker_running(tmp_path)


def test_the_address_follows_kuberays_environment() -> None:
    assert drain.gcs_address({"RAY_ADDRESS": "head:6379"}) == "head:6379"
    assert drain.gcs_address({"RAY_IP": "head", "RAY_PORT": "6380"}) == "head:6380"
    assert drain.gcs_address({}) is None


class FakeKube:
    def __init__(self, pod: dict[str, Any]) -> None:
        self.pod = pod
        self.patches: list[dict[str, Any]] = []

    def read_pod(self, namespace: str, name: str) -> dict[str, Any]:
        assert (namespace, name) == ("team-a", "digits-0-head-x")
        return self.pod

    def patch_status(self, body: dict[str, Any]) -> None:
        self.patches.append(body)


HEAD_ENV = {
    "RAYTRAIN_TRAINJOB_NAMESPACE": "team-a",
    "RAYTRAIN_TRAINJOB_NAME": "digits",
    "RAYTRAIN_POD_NAME": "digits-0-head-x",
    "RAYTRAIN_ATTEMPT": "3",
}


def test_the_head_hook_records_an_eviction_and_not_a_plain_delete() -> None:
    kube = FakeKube(evicted())
    said = drain.record_head(HEAD_ENV, lambda ns, name: kube)
    assert kube.patches == [
        {
            "status": {
                "disrupted": {
                    "attempt": 3,
                    "pod": "digits-0-head-x",
                    "reason": "EvictionByEvictionAPI",
                    "message": "drain",
                }
            }
        }
    ]
    assert "recorded EvictionByEvictionAPI" in said
    kube = FakeKube(pod(phase="Running"))
    assert "nothing recorded" in drain.record_head(HEAD_ENV, lambda ns, name: kube)
    kube.pod["status"]["conditions"] = [
        {"type": "DisruptionTarget", "status": "False", "reason": "EvictionByEvictionAPI"}
    ]
    assert "nothing recorded" in drain.record_head(HEAD_ENV, lambda ns, name: kube)
    assert kube.patches == []
    assert "unset" in drain.record_head({}, lambda ns, name: kube)


def test_a_plain_delete_is_not_drained() -> None:
    gcs = FakeGcs({"10.0.0.7": "abc123"})
    clock = FakeClock(1000.0)
    said = drain.run(
        ENV, lambda _: gcs, busy=lambda: True, clock=clock, sleep=clock.sleep,
        disrupted=lambda: False,
    )  # fmt: skip
    assert gcs.drained == [] and "not disrupted" in said and clock.now == 1000.0
    # Unknown (the pod cannot be read): drained.
    drain.run(
        ENV, lambda _: gcs, busy=lambda: not gcs.drained, clock=clock, sleep=clock.sleep,
        disrupted=lambda: None,
    )  # fmt: skip
    assert len(gcs.drained) == 1


def test_the_worker_reads_its_own_pod_to_tell_a_disruption() -> None:
    env = {**HEAD_ENV}
    assert drain.pod_disrupted(env, lambda ns, name: FakeKube(evicted())) is True
    assert drain.pod_disrupted(env, lambda ns, name: FakeKube(pod())) is False

    def broken(namespace: str, name: str) -> FakeKube:
        raise PermissionError("forbidden")

    assert drain.pod_disrupted(env, broken) is None
    assert drain.pod_disrupted({}, broken) is None


# ------------------------------------------------------------------------------------ apply


@pytest.mark.usefixtures("no_fence")
def test_turning_the_budget_off_deletes_it_at_the_next_attempt(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    created: list[tuple[str, str]] = []
    deleted: list[tuple[str, str]] = []
    monkeypatch.setattr(
        k8s, "create", lambda body: created.append((body["kind"], body["metadata"]["name"]))
        or body,
    )  # fmt: skip
    monkeypatch.setattr(k8s, "delete", lambda kind, ns, name, uid: deleted.append((kind, name)))
    monkeypatch.setattr(k8s, "get", ours)
    log = logging.getLogger("test")
    apply.ensure_children(PassState(), trainjob(), meta(), EnsureChildren(0, False), None, log)
    assert ("PodDisruptionBudget", "digits-ray") in created and deleted == []
    created.clear()
    off = trainjob(disruption={"podDisruptionBudget": False})
    apply.ensure_children(PassState(), off, meta(), EnsureChildren(1, False), None, log)
    assert ("PodDisruptionBudget", "digits-ray") not in created
    assert deleted == [("PodDisruptionBudget", "digits-ray")]
    deleted.clear()
    monkeypatch.setattr(k8s, "list_names", lambda kind, ns, selector: [])
    apply.delete_children(meta())
    assert ("PodDisruptionBudget", "digits-ray") in deleted
