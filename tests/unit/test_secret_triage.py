"""A Secret the operator does not read: by default its account has no `get secrets`
(chart value rbac.readSecrets), so preflight does not look, and a credentials Secret that is
missing, or lacks a key, is named from the pods' own failure: the kubelet leaves each container
waiting in CreateContainerConfigError with its own words (status/triage/pods.py,
config_problem). The job stalls with the field to fix; once the Secret is right the kubelet
starts the containers and the job goes on, nothing deleted."""

from __future__ import annotations

from typing import Any

import pytest
from _factories import meta, trainjob

from raytrain_operator import k8s
from raytrain_operator.handlers import preflight
from raytrain_operator.settings import OperatorConfig
from raytrain_operator.status.triage import config_problem

NS = "team-a"
#: The kubelet's words (pkg/kubelet/kubelet_pods.go, makeEnvironmentVariables; the secret
#: manager's NotFound), as the container's waiting state carries them.
MISSING = 'secret "digits-s3" not found'
NO_KEY = f"couldn't find key AWS_SECRET_ACCESS_KEY in Secret {NS}/digits-s3"


def waiting(message: str, name: str = "digits-0-abc-head-x") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"ray.io/node-type": "head"}},
        "spec": {"nodeName": "node-a"},
        "status": {
            "phase": "Pending",
            "containerStatuses": [
                {
                    "name": "ray-head",
                    "image": "raytrain/trainer-runtime:0.1.0",
                    "state": {
                        "waiting": {"reason": "CreateContainerConfigError", "message": message}
                    },
                }
            ],
        },
    }


def credentials() -> Any:
    return trainjob().spec.storage.s3.credentials_secret  # type: ignore[union-attr]


def test_a_missing_credentials_secret_names_the_field_and_the_fix() -> None:
    found = config_problem([waiting(MISSING)], NS, credentials())
    assert found is not None
    reason, message = found
    assert reason == "CredentialsNotFound"
    assert message.startswith(
        "spec.storage.s3.credentialsSecret.name: Secret 'digits-s3' does not exist in "
        "namespace 'team-a'; create it with the keys AWS_ACCESS_KEY_ID and "
        "AWS_SECRET_ACCESS_KEY"
    ), message
    assert "pod digits-0-abc-head-x" in message and "CreateContainerConfigError" in message


def test_a_missing_key_names_the_key_field() -> None:
    found = config_problem([waiting(NO_KEY)], NS, credentials())
    assert found is not None
    reason, message = found
    assert reason == "CredentialsIncomplete"
    assert message.startswith(
        "spec.storage.s3.credentialsSecret.secretAccessKeyKey: Secret 'digits-s3' has no key "
        "'AWS_SECRET_ACCESS_KEY'"
    ), message


@pytest.mark.parametrize(
    "words",
    [
        'secret "team-db" not found',
        'configmap "settings" not found',
        f"couldn't find key url in ConfigMap {NS}/settings",
        f"couldn't find key password in Secret {NS}/team-db",
    ],
)
def test_another_reference_is_named_with_the_kubelets_words(words: str) -> None:
    found = config_problem([waiting(words)], NS, credentials())
    assert found is not None
    reason, message = found
    assert reason == "ConfigNotFound"
    assert words in message and "spec.head or spec.workerTemplate" in message, message
    assert "pod digits-0-abc-head-x" in message


def test_nothing_for_a_pod_that_only_waits_to_start() -> None:
    pod = waiting(MISSING)
    pod["status"]["containerStatuses"][0]["state"] = {"waiting": {"reason": "ContainerCreating"}}
    assert config_problem([pod], NS, credentials()) is None
    assert config_problem([], NS, None) is None


def test_preflight_does_not_read_secrets_it_was_not_granted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """rbac.readSecrets off (the chart's default): no request for the Secret at all."""

    def no_read(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("preflight read a Secret it was not granted")

    monkeypatch.setattr(k8s, "secret_keys", no_read)
    monkeypatch.setenv("RAYTRAIN_READ_SECRETS", "false")
    config = OperatorConfig()
    assert config.read_secrets is False
    assert preflight.check(trainjob(), meta(), config) is None


def test_preflight_skips_a_secret_it_may_not_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """Granted by the setting but refused by the API server (403): the check is skipped, not
    failed; the pods' failure names a missing Secret instead."""

    def forbidden(namespace: str, name: str) -> Any:
        return k8s.UNREADABLE

    monkeypatch.setattr(k8s, "secret_keys", forbidden)
    assert preflight.check(trainjob(), meta(), OperatorConfig(read_secrets=True)) is None
    monkeypatch.setattr(k8s, "secret_keys", lambda namespace, name: None)
    problem = preflight.check(trainjob(), meta(), OperatorConfig(read_secrets=True))
    assert problem is not None and problem[0] == "CredentialsNotFound"
