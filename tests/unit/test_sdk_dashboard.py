"""The dashboard port-forward: which Service it targets, the kubectl it runs, the URL it gives and
what it says when there is nothing to forward to. A stand-in kubectl script plays kubectl."""

from __future__ import annotations

import argparse
import stat
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from raytrain import DashboardUnavailableError, TrainJobClient
from raytrain.cli import cluster


class _Custom:
    def __init__(self, status: dict[str, Any]) -> None:
        self.status = status

    def get_namespaced_custom_object(self, *args: Any) -> Any:
        return {"metadata": {"name": "digits", "namespace": "team-a"}, "status": self.status}


class _Core:
    def __init__(self, services: set[str]) -> None:
        self.services = services

    def read_namespaced_service(self, name: str, namespace: str) -> Any:
        if name not in self.services:
            raise ApiException(status=404, reason="Not Found")
        return SimpleNamespace()


RUNNING = {"phase": "Running", "attempt": 1, "rayClusterName": "digits-1-abcde"}


def _sdk(
    monkeypatch: pytest.MonkeyPatch, status: dict[str, Any], services: set[str]
) -> TrainJobClient:
    monkeypatch.setattr(client, "CustomObjectsApi", lambda api_client: _Custom(status))
    monkeypatch.setattr(client, "CoreV1Api", lambda api_client: _Core(services))
    return TrainJobClient("team-a", api_client=client.ApiClient(), context="kind-dev")


def _kubectl(tmp_path: Path, body: str) -> str:
    """A kubectl stand-in that records its arguments, then runs `body`."""
    path = tmp_path / "kubectl"
    path.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {tmp_path}/argv\n' + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


FORWARDING = (
    'echo "Forwarding from 127.0.0.1:43210 -> 8265"\necho "Forwarding from [::1]:43210 -> 8265"\n'
)


def test_the_target_is_the_current_clusters_head_service(monkeypatch: pytest.MonkeyPatch) -> None:
    sdk = _sdk(monkeypatch, RUNNING, {"digits-1-abcde-head-svc"})
    target = sdk.dashboard_target("digits")
    assert (target.namespace, target.service, target.port, target.attempt) == (
        "team-a", "digits-1-abcde-head-svc", 8265, 1,
    )  # fmt: skip


def test_no_cluster_or_no_service_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    sdk = _sdk(monkeypatch, {"phase": "Suspended"}, set())
    with pytest.raises(
        DashboardUnavailableError, match=r"has no Ray cluster now \(phase Suspended"
    ):
        sdk.dashboard_target("digits")
    sdk = _sdk(monkeypatch, RUNNING, set())
    with pytest.raises(
        DashboardUnavailableError, match=r"digits-1-abcde-head-svc .* does not exist"
    ):
        sdk.dashboard_target("digits")


def test_port_forward_runs_kubectl_and_gives_the_url(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    sdk = _sdk(monkeypatch, RUNNING, {"digits-1-abcde-head-svc"})
    kubectl = _kubectl(tmp_path, FORWARDING + "exec sleep 300\n")
    with sdk.port_forward_dashboard("digits", local_port=0, kubectl=kubectl) as forward:
        assert forward.url == "http://127.0.0.1:43210"
        assert forward.process.poll() is None
    assert forward.process.poll() is not None  # the with block stopped kubectl
    argv = (tmp_path / "argv").read_text().split("\n")[:-1]
    assert argv == [
        "--context=kind-dev", "port-forward", "-n", "team-a", "--address=127.0.0.1",
        "svc/digits-1-abcde-head-svc", ":8265",
    ]  # fmt: skip


def test_a_kubectl_that_fails_is_quoted(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    sdk = _sdk(monkeypatch, RUNNING, {"digits-1-abcde-head-svc"})
    kubectl = _kubectl(tmp_path, 'echo "error: unable to listen on port 8265" >&2\nexit 1\n')
    with pytest.raises(DashboardUnavailableError) as err:
        sdk.port_forward_dashboard("digits", kubectl=kubectl)
    text = str(err.value)
    assert "exited 1: error: unable to listen on port 8265" in text
    assert "kubectl port-forward -n team-a svc/digits-1-abcde-head-svc 8265:8265" in text
    with pytest.raises(DashboardUnavailableError, match="'/nonexistent/kubectl' is not on PATH"):
        sdk.port_forward_dashboard("digits", kubectl="/nonexistent/kubectl")


def test_session_prints_the_url_then_reports_the_end_of_kubectl(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sdk = _sdk(monkeypatch, RUNNING, {"digits-1-abcde-head-svc"})
    monkeypatch.setattr(cluster, "_client", lambda args: sdk)
    kubectl = _kubectl(tmp_path, FORWARDING + 'echo "lost connection to pod" >&2\nexit 1\n')
    args = argparse.Namespace(name="digits", port=8265, address="127.0.0.1", kubectl=kubectl)
    assert cluster.session(args) == 1
    out, err = capsys.readouterr()
    assert (
        "Ray dashboard of TrainJob digits (RayCluster digits-1-abcde, attempt 1): "
        "http://127.0.0.1:43210" in out
    )
    assert "kubectl port-forward exited 1: lost connection to pod" in " ".join(err.split())
    assert (tmp_path / "argv").read_text().endswith("\n8265:8265\n")
