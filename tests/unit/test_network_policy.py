"""The per-job NetworkPolicy: what it selects, whom it admits, how the operator is told the
peers, and when it is created and removed."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from _factories import meta, ours, trainjob
from test_apply_children import FakeServer, server  # noqa: F401  (fixture)

from raytrain_contract.meta import LABEL_ATTEMPT, LABEL_TRAINJOB
from raytrain_operator import k8s, settings
from raytrain_operator.builders.network import (
    DEFAULT_INGRESS,
    build_network_policy,
    parse_ingress,
)
from raytrain_operator.builders.rayjob import build_rayjob
from raytrain_operator.handlers import apply
from raytrain_operator.handlers.state import PassState
from raytrain_operator.status.machine import EnsureChildren

LOG = logging.getLogger("test")


def matches(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """A LabelSelector with matchLabels only (what the policy uses)."""
    assert set(selector) == {"matchLabels"}
    return all(labels.get(k) == v for k, v in selector["matchLabels"].items())


def pod_labels(attempt: int) -> dict[str, dict[str, str]]:
    rj = build_rayjob(trainjob(), meta(), attempt, suspend=False)
    cluster = rj["spec"]["rayClusterSpec"]
    return {
        "head": cluster["headGroupSpec"]["template"]["metadata"]["labels"],
        "worker": cluster["workerGroupSpecs"][0]["template"]["metadata"]["labels"],
        "submitter": rj["spec"]["submitterPodTemplate"]["metadata"]["labels"],
    }


def test_the_policy_covers_every_pod_of_every_attempt_and_admits_them_to_each_other() -> None:
    policy = build_network_policy(meta(), DEFAULT_INGRESS)
    assert policy["apiVersion"] == "networking.k8s.io/v1"
    assert policy["metadata"]["name"] == "digits-ray"
    assert policy["metadata"]["ownerReferences"][0]["controller"] is True
    spec = policy["spec"]
    # Ingress only: the pods still reach the API server, DNS and S3.
    assert spec["policyTypes"] == ["Ingress"]
    own = spec["ingress"][0]
    assert set(own) == {"from"}  # every port: Ray's raylet, object manager and worker ports
    for attempt in (0, 3):
        for role, labels in pod_labels(attempt).items():
            assert labels[LABEL_ATTEMPT] == str(attempt)
            assert matches(spec["podSelector"], labels), role
            assert matches(own["from"][0]["podSelector"], labels), role
    # Neither the policy nor its first rule reaches beyond the namespace or another job.
    assert "namespaceSelector" not in own["from"][0]
    other = pod_labels(0)["head"] | {LABEL_TRAINJOB: "other"}
    assert not matches(spec["podSelector"], other)
    assert not matches(own["from"][0]["podSelector"], other)


def test_the_configured_peers_follow_the_jobs_own_rule() -> None:
    prometheus = {
        "from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "mon"}}}],
        "ports": [{"protocol": "TCP", "port": 8080}],
    }
    spec = build_network_policy(meta(), [*DEFAULT_INGRESS, prometheus])["spec"]
    assert spec["ingress"][1:] == [*DEFAULT_INGRESS, prometheus]
    kuberay = spec["ingress"][1]
    assert kuberay["ports"] == [{"protocol": "TCP", "port": 8265}]
    assert kuberay["from"][0]["podSelector"] == {
        "matchLabels": {"app.kubernetes.io/name": "kuberay-operator"}
    }


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        ("{not json", "not JSON"),
        ('{"from": []}', "dict given; give a JSON list"),
        ("[1]", "X[0]: 1 is not an object"),
        ('[{"from": [{"podSelector": {}}], "port": []}]', "X[0]: unknown key port"),
        ('[{"ports": [{"port": 80}]}]', "X[0].from: None; name the peers"),
        ('[{"from": []}]', "X[0].from: []; name the peers"),
        ('[{"from": [{}]}]', "X[0].from[0]: {}"),
        ('[{"from": [{"pods": {}}]}]', "X[0].from[0]"),
        ('[{"from": [{"podSelector": {}}], "ports": 80}]', "X[0].ports: 80"),
    ],
)
def test_bad_peer_settings_are_refused_with_the_place_named(text: str, complaint: str) -> None:
    with pytest.raises(ValueError, match=r"^X") as err:
        parse_ingress(text, "X")
    assert complaint in str(err.value)


def test_the_operator_reads_its_peers_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("RAYTRAIN_NETWORK_POLICY_INGRESS", raising=False)
    monkeypatch.delenv("RAYTRAIN_NETWORK_POLICY", raising=False)
    config = settings.OperatorConfig()
    assert config.network_policy is True
    assert config.network_policy_ingress == DEFAULT_INGRESS
    rules = [{"from": [{"ipBlock": {"cidr": "10.0.0.0/8"}}]}]
    monkeypatch.setenv("RAYTRAIN_NETWORK_POLICY_INGRESS", json.dumps(rules))
    monkeypatch.setenv("RAYTRAIN_NETWORK_POLICY", "false")
    config = settings.OperatorConfig()
    assert config.network_policy is False
    assert config.network_policy_ingress == rules
    monkeypatch.setenv("RAYTRAIN_NETWORK_POLICY_INGRESS", '[{"ports": []}]')
    with pytest.raises(ValueError, match=r"^RAYTRAIN_NETWORK_POLICY_INGRESS\[0\]\.from"):
        settings.OperatorConfig()


@pytest.mark.usefixtures("no_fence")
def test_each_attempt_applies_the_policy_and_turning_it_off_removes_it(
    server: FakeServer,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    deleted: list[tuple[str, str]] = []
    monkeypatch.setattr(k8s, "delete", lambda kind, ns, name, uid: deleted.append((kind, name)))
    state = PassState()
    apply.ensure_children(state, trainjob(), meta(), EnsureChildren(0, False), None, LOG)
    assert server.objects[("NetworkPolicy", "digits-ray")] == build_network_policy(
        meta(), state.config.network_policy_ingress
    )
    # Created before the RayJob, so no pod of the job ever runs unfenced.
    creates = [name for verb, kind, name in server.calls if verb == "create"]
    kinds = [kind for verb, kind, _ in server.calls if verb == "create"]
    assert kinds.index("NetworkPolicy") < kinds.index("RayJob"), creates
    assert ("NetworkPolicy", "digits-ray") not in deleted

    state.config.network_policy = False
    apply.ensure_children(state, trainjob(), meta(), EnsureChildren(1, False), None, LOG)
    assert ("NetworkPolicy", "digits-ray") in deleted


def test_the_children_delete_takes_the_policy_too(monkeypatch: pytest.MonkeyPatch) -> None:
    deleted: list[tuple[str, str]] = []
    monkeypatch.setattr(k8s, "delete", lambda kind, ns, name, uid: deleted.append((kind, name)))
    monkeypatch.setattr(k8s, "get", ours)
    monkeypatch.setattr(k8s, "list_names", lambda kind, ns, selector: [])
    apply.delete_children(meta())
    assert ("NetworkPolicy", "digits-ray") in deleted
