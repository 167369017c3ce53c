"""What a TrainJob may not set on its children: the label and annotation keys that the
operator, KubeRay and the NetworkPolicies go by, the environment variables the runtime reads,
and credentials in the S3 endpoint's URL."""

from __future__ import annotations

from typing import Any

import pytest
from _factories import manifest, meta, trainjob

from raytrain_contract.api.v1alpha1 import RESERVED_ENV_NAMES, RESERVED_KEY_PREFIXES, TrainJob
from raytrain_contract.api.v1alpha1.pod_schema import ENV
from raytrain_contract.api.v1alpha1.pods import PodOverrides
from raytrain_contract.api.v1alpha1.storage import S3Storage
from raytrain_contract.meta import LABEL_ATTEMPT, LABEL_MANAGED_BY, LABEL_ROLE, LABEL_TRAINJOB
from raytrain_operator.builders.children import ChildContext, build_children
from raytrain_operator.builders.errors import SpecError
from raytrain_operator.builders.network import DEFAULT_INGRESS, build_network_policy
from raytrain_operator.builders.rayjob import build_rayjob

KUBERAY = {"app.kubernetes.io/name": "kuberay-operator"}
#: The reserved keys the operator itself puts on a pod.
OURS = {LABEL_TRAINJOB, LABEL_ATTEMPT, LABEL_ROLE, LABEL_MANAGED_BY}


def templates(rj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    cluster = rj["spec"]["rayClusterSpec"]
    return {
        "head": cluster["headGroupSpec"]["template"],
        "worker": cluster["workerGroupSpecs"][0]["template"],
        "submitter": rj["spec"]["submitterPodTemplate"],
    }


def admitted_by_peer_rules(policy: dict[str, Any], labels: dict[str, str]) -> bool:
    """Whether a pod of another namespace with `labels` passes a rule of the policy."""
    for rule in policy["spec"]["ingress"]:
        for peer in rule["from"]:
            if "namespaceSelector" not in peer:
                continue  # the job's own namespace only
            wanted = peer.get("podSelector", {}).get("matchLabels", {})
            if all(labels.get(k) == v for k, v in wanted.items()):
                return True
    return False


# ------------------------------------------------------------------------ labels, annotations


def test_a_job_labelled_as_kuberay_gets_no_way_into_other_jobs_dashboards() -> None:
    """The TrainJob's own labels are the user's (their tooling may name their app); the
    reserved ones stay on the TrainJob and reach no child."""
    victim = build_network_policy(meta(name="victim", namespace="team-b"), DEFAULT_INGRESS)
    labels = {**KUBERAY, "ray.io/node-type": "head", "raytrain.dev/role": "x", "team": "vision"}
    rj = build_rayjob(trainjob(), meta(labels=labels, annotations=labels), 0, suspend=False)
    for role, template in templates(rj).items():
        pod_labels = template["metadata"]["labels"]
        assert not admitted_by_peer_rules(victim, pod_labels), role
        assert pod_labels["team"] == "vision", role
        assert "ray.io/node-type" not in pod_labels, role
        annotations = template["metadata"].get("annotations", {})
        assert not any(k.startswith(RESERVED_KEY_PREFIXES) for k in annotations), role
    children = build_children(ChildContext(trainjob(), meta(labels=labels), 0))
    for kind, body in children.items():
        assert body is not None
        kept = body["metadata"]["labels"]
        assert kept.get("app.kubernetes.io/name") != "kuberay-operator", kind
        assert kept[LABEL_TRAINJOB] == "digits", kind


def test_reserved_keys_of_pod_overrides_never_reach_the_pods() -> None:
    """The CRD refuses them; one stored before that (or from a template) is dropped."""
    overrides = {
        "labels": {**KUBERAY, "ray.io/cluster": "other", "team": "vision"},
        "annotations": {"ray.io/ft-enabled": "true", "raytrain.dev/x": "y", "owner": "alice"},
    }
    rj = build_rayjob(trainjob(head=overrides, workerTemplate=overrides), meta(), 0, suspend=False)
    for role in ("head", "worker"):
        metadata = templates(rj)[role]["metadata"]
        assert metadata["labels"]["team"] == "vision" and metadata["annotations"]["owner"]
        reserved = [
            k
            for k in [*metadata["labels"], *metadata["annotations"]]
            if k.startswith(RESERVED_KEY_PREFIXES)
        ]
        assert set(reserved) <= OURS, (role, reserved)
        assert metadata["labels"].get("app.kubernetes.io/name") != "kuberay-operator"
        assert "ray.io/cluster" not in metadata["labels"]
        assert "ray.io/ft-enabled" not in metadata["annotations"]
        assert "raytrain.dev/x" not in metadata["annotations"]


@pytest.mark.parametrize("field", ["labels", "annotations"])
def test_the_crd_refuses_reserved_keys_in_pod_overrides_naming_the_key(field: str) -> None:
    rules = PodOverrides.model_json_schema(by_alias=True)["properties"][field][
        "x-kubernetes-validations"
    ]
    reserved = [r for r in rules if "app.kubernetes.io/" in r["rule"]]
    assert len(reserved) == 1, rules
    (rule,) = reserved
    for prefix in RESERVED_KEY_PREFIXES:
        assert f"k.startsWith('{prefix}')" in rule["rule"]
    assert f"spec.*.{field}" in rule["message"] and "NetworkPolicies" in rule["message"]
    assert "self.filter(" in rule["messageExpression"]


# ---------------------------------------------------------------------------------------- env


def test_the_runtimes_own_variables_are_all_reserved() -> None:
    """Every RAYTRAIN_ variable the builders set in any pod is one the CRD refuses."""
    host = {"hostNetwork": True}
    tj = trainjob(head=host, workerTemplate=host)
    rj = build_rayjob(tj, meta(), 3, suspend=False)
    set_by_builders = {
        e["name"]
        for template in templates(rj).values()
        for c in template["spec"]["containers"]
        for e in c.get("env", [])
        if e["name"].startswith("RAYTRAIN_")
    }
    assert {"RAYTRAIN_ATTEMPT", "RAYTRAIN_POD_IP", "RAYTRAIN_POD_NAME"} <= set_by_builders
    assert set_by_builders <= set(RESERVED_ENV_NAMES)


def test_a_users_raytrain_attempt_does_not_replace_the_operators() -> None:
    env = [
        {"name": "RAYTRAIN_ATTEMPT", "value": "99"},
        {"name": "RAYTRAIN_POD_NAME", "value": "other"},
        {"name": "RAYTRAIN_TRAINJOB_NAME", "value": "other"},
        {"name": "MY_VAR", "value": "1"},
    ]
    rj = build_rayjob(
        trainjob(head={"env": env}, workerTemplate={"env": env}), meta(), 2, suspend=False
    )
    for role in ("head", "worker"):
        got = templates(rj)[role]["spec"]["containers"][0]["env"]
        by_name: dict[str, list[dict[str, Any]]] = {}
        for e in got:
            by_name.setdefault(e["name"], []).append(e)
        assert by_name["RAYTRAIN_ATTEMPT"] == [{"name": "RAYTRAIN_ATTEMPT", "value": "2"}], role
        assert len(by_name["RAYTRAIN_POD_NAME"]) == 1, role
        assert "valueFrom" in by_name["RAYTRAIN_POD_NAME"][0], role
        assert by_name["RAYTRAIN_TRAINJOB_NAME"] == [
            {"name": "RAYTRAIN_TRAINJOB_NAME", "value": "digits"}
        ], role
        assert by_name["MY_VAR"] == [{"name": "MY_VAR", "value": "1"}], role


def test_the_crd_refuses_the_runtimes_variables_naming_the_variable() -> None:
    rules = ENV["items"]["x-kubernetes-validations"]
    reserved = [r for r in rules if "RAYTRAIN_ATTEMPT" in r["rule"]]
    assert len(reserved) == 1, rules
    (rule,) = reserved
    for name in RESERVED_ENV_NAMES:
        assert f"'{name}'" in rule["rule"]
    assert "self.name" in rule["messageExpression"]
    assert "spec.*.env" in rule["message"] and "remove" in rule["message"]


# ------------------------------------------------------------------------------- S3 endpoint


CREDENTIAL_ENDPOINTS = [
    "https://AKIAEXAMPLE:s3cr3t@minio.storage:9000",
    "http://user@minio.storage",
    "https://:pw@host/",
]


@pytest.mark.parametrize("endpoint", CREDENTIAL_ENDPOINTS)
def test_credentials_in_the_endpoint_stall_the_job_and_are_not_copied(endpoint: str) -> None:
    s3 = {**manifest()["spec"]["storage"]["s3"], "endpoint": endpoint}
    tj = TrainJob.model_validate(manifest(storage={"s3": s3}))
    with pytest.raises(SpecError) as raised:
        build_children(ChildContext(tj, meta(), 0))
    message = str(raised.value)
    assert "spec.storage.s3.endpoint" in message and "credentialsSecret" in message
    assert "s3cr3t" not in message and "AKIAEXAMPLE" not in message and "pw" not in message


def test_the_crd_refuses_credentials_in_the_endpoint() -> None:
    schema = S3Storage.model_json_schema(by_alias=True)["properties"]["endpoint"]
    rules = schema["x-kubernetes-validations"]
    refusing = [r for r in rules if "@" in r["rule"]]
    assert len(refusing) == 1, rules
    assert "credentialsSecret" in refusing[0]["message"]
    assert "spec.storage.s3.endpoint" in refusing[0]["message"]


def test_an_endpoint_without_credentials_is_built() -> None:
    build_children(ChildContext(trainjob(), meta(), 0))
