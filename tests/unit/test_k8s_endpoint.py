"""raytrain_operator.k8s's credentials: the pod's service account, read again as it rotates."""

from __future__ import annotations

from pathlib import Path

import pytest

from raytrain_operator import k8s


def _service_account(tmp_path: Path, token: str) -> Path:
    (tmp_path / "token").write_text(token + "\n")
    (tmp_path / "namespace").write_text("raytrain-system\n")
    return tmp_path


def test_in_a_pod_the_server_comes_from_the_kubelets_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(k8s.client, "SERVICE_ACCOUNT_DIR", str(_service_account(tmp_path, "t1")))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    info = k8s.in_cluster_info()
    assert info is not None
    assert (info.server, info.token, info.default_namespace) == (
        "https://10.96.0.1:443",
        "t1",
        "raytrain-system",
    )
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "fd00::1")
    assert (k8s.in_cluster_info() or info).server == "https://[fd00::1]:443"
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST")
    assert k8s.in_cluster_info() is None  # not in a pod: the kubeconfig serves


def test_a_rotated_token_is_read_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sa = _service_account(tmp_path, "first")
    clock = [1000.0]
    monkeypatch.setattr(k8s.client.time, "monotonic", lambda: clock[0])
    ep = k8s.Endpoint(server="https://10.96.0.1:443", token_file=str(sa / "token"))
    assert ep.authorization() == "Bearer first"
    (sa / "token").write_text("second")
    clock[0] += k8s.TOKEN_REREAD_SECONDS / 2
    assert ep.authorization() == "Bearer first"
    clock[0] += k8s.TOKEN_REREAD_SECONDS
    assert ep.authorization() == "Bearer second"


def test_an_error_status_carries_the_api_servers_message() -> None:
    exc = k8s.ApiException(422, "Unprocessable Entity", '{"kind":"Status","message":"bad label"}')
    assert k8s.api_message(exc) == "bad label"
    assert k8s.api_message(k8s.ApiException(500, "Internal Server Error", "<html>")) == (
        "Internal Server Error"
    )
