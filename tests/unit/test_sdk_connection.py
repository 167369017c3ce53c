"""Which cluster, context and default namespace a TrainJobClient uses, and what it says when
there is none: read from real kubeconfig files, without a cluster."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import config

from raytrain import ClusterUnreachableError, ConfigError, TrainJobClient, _connection


def _kubeconfig(path: Path, current: str = "dev") -> Path:
    cluster = {"server": "https://127.0.0.1:6443", "insecure-skip-tls-verify": True}
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {"name": "c1", "cluster": cluster},
                    {"name": "c2", "cluster": {**cluster, "server": "https://10.0.0.2:6443"}},
                ],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [
                    {
                        "name": "dev",
                        "context": {"cluster": "c1", "user": "u", "namespace": "team-a"},
                    },
                    {"name": "prod", "context": {"cluster": "c2", "user": "u", "namespace": "ml"}},
                    {"name": "bare", "context": {"cluster": "c1", "user": "u"}},
                ],
                "current-context": current,
            }
        )
    )
    return path


@pytest.fixture(autouse=True)
def _no_ambient_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))


def test_the_current_context_gives_the_namespace(tmp_path: Path) -> None:
    with TrainJobClient(kubeconfig=str(_kubeconfig(tmp_path / "kc"))) as sdk:
        assert (sdk.context, sdk.namespace) == ("dev", "team-a")
        assert repr(sdk) == "TrainJobClient(namespace='team-a', context='dev')"


def test_an_explicit_context_gives_its_own_namespace_and_server(tmp_path: Path) -> None:
    # the namespace comes from the context in use, not from the file's current context
    sdk = TrainJobClient(kubeconfig=str(_kubeconfig(tmp_path / "kc")), context="prod")
    assert (sdk.context, sdk.namespace) == ("prod", "ml")
    assert sdk._api_client.configuration.host == "https://10.0.0.2:6443"
    assert TrainJobClient(kubeconfig=str(tmp_path / "kc"), context="bare").namespace == "default"
    assert TrainJobClient("other", kubeconfig=str(tmp_path / "kc")).namespace == "other"


def test_kubeconfig_env_is_read_when_called_not_when_imported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(_kubeconfig(tmp_path / "kc", current="prod")))
    assert TrainJobClient().namespace == "ml"


def test_an_unknown_context_lists_the_known_ones(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        TrainJobClient(kubeconfig=str(_kubeconfig(tmp_path / "kc")), context="staging")
    text = str(err.value)
    assert "context 'staging' is not in kubeconfig" in text and str(tmp_path / "kc") in text
    assert "its contexts are dev, prod, bare" in text


def test_a_missing_kubeconfig_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=f"kubeconfig {tmp_path / 'nope'} does not exist"):
        TrainJobClient(kubeconfig=str(tmp_path / "nope"))


def test_no_configuration_at_all_says_what_to_set(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        TrainJobClient()
    text = str(err.value)
    assert f"no kubeconfig at {tmp_path / 'absent'}" in text and "not running in a pod" in text
    assert "set KUBECONFIG" in text and "raytrain run FILE --local" in text


def test_a_kubeconfig_without_current_context_asks_for_one(tmp_path: Path) -> None:
    path = _kubeconfig(tmp_path / "kc", current="")
    with pytest.raises(ConfigError, match="dev, prod, bare"):
        TrainJobClient(kubeconfig=str(path))


def test_in_a_pod_the_service_account_and_its_namespace_are_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    (tmp_path / "namespace").write_text("ml-jobs\n")
    monkeypatch.setattr(_connection, "SERVICE_ACCOUNT_NAMESPACE", tmp_path / "namespace")

    def load_incluster_config(client_configuration: Any) -> None:
        client_configuration.host = "https://10.96.0.1:443"

    monkeypatch.setattr(config, "load_incluster_config", load_incluster_config)
    sdk = TrainJobClient()
    assert (sdk.context, sdk.namespace) == (None, "ml-jobs")
    assert sdk._conn.where == "in-cluster (https://10.96.0.1:443)"


def test_an_api_server_that_does_not_answer_is_named(tmp_path: Path) -> None:
    path = _kubeconfig(tmp_path / "kc")
    text = path.read_text().replace("https://127.0.0.1:6443", "https://127.0.0.1:1")
    path.write_text(text)
    with pytest.raises(ClusterUnreachableError) as err:
        TrainJobClient(kubeconfig=str(path)).list_jobs()
    message = str(err.value)
    assert message.startswith("listing TrainJobs in namespace 'team-a': the Kubernetes API")
    assert "context dev (https://127.0.0.1:1)" in message
