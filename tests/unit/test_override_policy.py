"""Pod overrides an administrator may forbid: serviceAccountName and envFrom.

With OperatorConfig.allow_service_account_name / allow_env_from off (chart values
podOverrides.*), a TrainJob that uses one stalls in preflight, before anything is created, with
a message that names the field, the value and the fix.
"""

from __future__ import annotations

from typing import Any

import pytest
from _factories import BASE, meta, trainjob

from raytrain_contract.api.v1alpha1 import TrainJob
from raytrain_operator.handlers import preflight
from raytrain_operator.handlers.preflight import override_problem
from raytrain_operator.settings import OperatorConfig

CLOSED = OperatorConfig(allow_service_account_name=False, allow_env_from=False)
ENV_FROM = [{"secretRef": {"name": "team-b-db"}}, {"configMapRef": {"name": "settings"}}]


def test_defaults_allow_both(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAYTRAIN_ALLOW_SERVICE_ACCOUNT_NAME", raising=False)
    monkeypatch.delenv("RAYTRAIN_ALLOW_ENV_FROM", raising=False)
    config = OperatorConfig()
    assert config.allow_service_account_name and config.allow_env_from
    job = trainjob(head={"serviceAccountName": "admin", "envFrom": ENV_FROM})
    assert override_problem(job, config) is None


@pytest.mark.parametrize(
    ("value", "expected"),
    [("false", False), ("FALSE", False), ("0", False), ("true", True), ("", True)],
)
def test_settings_read_the_environment(
    monkeypatch: pytest.MonkeyPatch, value: str, expected: bool
) -> None:
    monkeypatch.setenv("RAYTRAIN_ALLOW_SERVICE_ACCOUNT_NAME", value)
    monkeypatch.setenv("RAYTRAIN_ALLOW_ENV_FROM", value)
    config = OperatorConfig()
    assert config.allow_service_account_name is expected
    assert config.allow_env_from is expected


def test_a_bad_setting_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAYTRAIN_ALLOW_ENV_FROM", "maybe")
    with pytest.raises(
        ValueError, match="RAYTRAIN_ALLOW_ENV_FROM='maybe': set it to true or false"
    ):
        OperatorConfig()


@pytest.mark.parametrize(
    ("key", "path"), [("head", "spec.head"), ("workerTemplate", "spec.workerTemplate")]
)
def test_service_account_override_is_refused(key: str, path: str) -> None:
    problem = override_problem(trainjob(**{key: {"serviceAccountName": "ci-deployer"}}), CLOSED)
    assert problem is not None
    reason, message = problem
    assert reason == "OverrideForbidden"
    assert message.startswith(f"{path}.serviceAccountName: 'ci-deployer' is not allowed here")
    assert "podOverrides.allowServiceAccountName is false" in message
    assert f"Remove {path}.serviceAccountName" in message
    assert "ask the cluster administrator" in message


def test_storage_service_account_is_refused_with_the_alternative() -> None:
    doc: dict[str, Any] = {**BASE["spec"]["storage"]["s3"]}
    del doc["credentialsSecret"]
    doc["serviceAccountName"] = "s3-irsa"
    problem = override_problem(trainjob(storage={"s3": doc}), CLOSED)
    assert problem is not None
    assert problem[1].startswith("spec.storage.s3.serviceAccountName: 's3-irsa' is not allowed")
    assert "use spec.storage.s3.credentialsSecret instead" in problem[1]


@pytest.mark.parametrize(
    ("key", "path"), [("head", "spec.head"), ("workerTemplate", "spec.workerTemplate")]
)
def test_env_from_is_refused(key: str, path: str) -> None:
    problem = override_problem(trainjob(**{key: {"envFrom": ENV_FROM}}), CLOSED)
    assert problem is not None
    reason, message = problem
    assert reason == "OverrideForbidden"
    assert message.startswith(
        f"{path}.envFrom: [secretRef 'team-b-db', configMapRef 'settings'] is not allowed here"
    )
    assert "podOverrides.allowEnvFrom is false" in message
    assert f"Remove {path}.envFrom and set the variables the job needs in {path}.env" in message


def test_each_option_forbids_its_field_alone() -> None:
    job = trainjob(head={"serviceAccountName": "ci-deployer", "envFrom": ENV_FROM})
    only_sa = OperatorConfig(allow_service_account_name=False, allow_env_from=True)
    only_env = OperatorConfig(allow_service_account_name=True, allow_env_from=False)
    sa = override_problem(job, only_sa)
    env = override_problem(job, only_env)
    assert sa is not None and "serviceAccountName" in sa[1]
    assert env is not None and env[1].startswith("spec.head.envFrom")
    assert override_problem(trainjob(head={"env": [{"name": "A", "value": "1"}]}), CLOSED) is None


def test_preflight_stalls_before_any_api_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """check() answers from the spec alone: no Secret, claim or account is read."""

    def no_api(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("preflight called the API for a forbidden override")

    monkeypatch.setattr(preflight, "secret_key_names", no_api)
    monkeypatch.setattr(preflight.k8s, "service_account_exists", no_api)
    monkeypatch.setattr(preflight.k8s, "pvc_access_modes", no_api)
    config = OperatorConfig()
    config.allow_env_from = False
    job: TrainJob = trainjob(workerTemplate={"envFrom": ENV_FROM})
    problem = preflight.check(job, meta(), config)
    assert problem is not None
    assert problem[0] == "OverrideForbidden"
    assert problem[1].startswith("spec.workerTemplate.envFrom")
