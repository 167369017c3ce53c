"""A pass that cannot reach the API server is retried in seconds, not after kopf's 60 s.

Seen with the API server restarted under a running operator: the resync timer's pass hit a
refused connection and kopf logged "will try again in 60 seconds", so the job waited a minute
after the server was back.
"""

from __future__ import annotations

import logging
import socket
from typing import Any

import kopf
import pytest
from _passes import passed

from raytrain_operator import k8s
from raytrain_operator.handlers import reconcile as reconcile_module


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _body() -> kopf.Body:
    return kopf.Body({"metadata": {"name": "j", "namespace": "ns", "uid": "u-1"}, "spec": {}})


def test_a_refused_connection_is_a_temporary_error_retried_in_seconds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = f"http://127.0.0.1:{_closed_port()}"
    monkeypatch.setattr(k8s.client, "endpoint", lambda: k8s.Endpoint(server=server))
    monkeypatch.setattr(reconcile_module, "_pass", lambda *a: k8s.get_trainjob("ns", "j"))
    with pytest.raises(kopf.TemporaryError) as caught:
        passed(kopf.Patch(), "resync", _body(), logging.getLogger("t"))
    assert caught.value.delay == reconcile_module.API_RETRY_SECONDS <= 5
    assert "ConnectionRefusedError" in str(caught.value)


@pytest.mark.parametrize(
    ("exc", "transient"),
    [
        (k8s.ApiException(503, "Service Unavailable"), True),
        (k8s.ApiException(429, "Too Many Requests"), True),
        (k8s.ApiException(500, "Internal Server Error"), True),
        (k8s.ApiException(422, "Unprocessable Entity"), False),
        (k8s.ApiException(403, "Forbidden"), False),
        (k8s.ApiException(404, "Not Found"), False),
        (ConnectionResetError(104, "Connection reset by peer"), True),
        (TimeoutError("timed out"), True),
        (FileNotFoundError("/var/run/secrets/token"), False),
        (ValueError("a bug"), False),
    ],
)
def test_only_errors_of_an_unavailable_api_server_are_retried_soon(
    exc: BaseException, transient: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fail(*_: Any) -> None:
        raise exc

    monkeypatch.setattr(reconcile_module, "_pass", fail)
    expected: type[BaseException] = kopf.TemporaryError if transient else type(exc)
    with pytest.raises(expected):
        passed(kopf.Patch(), "resync", _body(), logging.getLogger("t"))
