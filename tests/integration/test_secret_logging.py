"""No log level prints a Secret's values: the preflight against a real Secret, everything at DEBUG.

The operator's `--verbose` (the chart's `verbose: true`) puts the root logger at DEBUG. Here
every logger is at DEBUG (kopf's, urllib3's, http.client's and any the kubernetes client would
use), kopf is configured as `--verbose` configures it, and every log record and everything
written to stdout and stderr is searched for the Secret's values, raw and base64-encoded. The
operator's requests go through raytrain_operator.k8s, built here from the test cluster's
kubeconfig. The Stalled message for a missing key names that key and no other key of the
Secret.
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Iterator
from typing import Any

import kopf
import pytest

from raytrain_contract.api.v1alpha1 import TrainJob
from raytrain_contract.meta import Meta
from raytrain_operator.handlers import preflight

pytestmark = pytest.mark.integration

VALUES = {
    "AWS_ACCESS_KEY_ID": "AKIAPLANTEDSENTINEL7",
    "AWS_SECRET_ACCESS_KEY": "wJalrPlantedSentinelSecretValue/K7MDENG",
    "OTHER_PRIVATE_KEY_NAME": "another-planted-sentinel-value",
}


def _forms(value: str) -> list[str]:
    encoded = base64.b64encode(value.encode()).decode()
    return [value, encoded, encoded.rstrip("=")]


class _Everything(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{record.name} {record.getMessage()} {record.args!r}")


@pytest.fixture
def debug_everything(operator_client: None) -> Iterator[_Everything]:
    kopf.configure(debug=True, verbose=True)
    handler = _Everything()
    root = logging.getLogger()
    root.addHandler(handler)
    levels = {}
    for name in [None, *logging.root.manager.loggerDict]:
        logger = logging.getLogger(name)
        levels[name] = logger.level
        logger.setLevel(logging.DEBUG)
    for name in ("kubernetes", "kubernetes.client.rest", "urllib3", "http.client"):
        logging.getLogger(name).setLevel(logging.DEBUG)
        logging.getLogger(name).disabled = False
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)


def _trainjob(**secret: Any) -> TrainJob:
    return TrainJob.model_validate(
        {
            "metadata": {"name": "leak"},
            "spec": {
                "image": "i",
                "entrypoint": "m:f",
                "scaling": {"numWorkers": 1},
                "storage": {
                    "s3": {"uri": "s3://bucket/x", "credentialsSecret": {"name": "s3", **secret}}
                },
            },
        }
    )


def test_preflight_logs_no_secret_value_at_any_level(
    kube_cluster: Any,
    namespace: str,
    debug_everything: _Everything,
    capfd: pytest.CaptureFixture[str],
) -> None:
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s3"}}
    kube_cluster.kubectl(
        "create", "-n", namespace, "-f", "-", input=json.dumps({**secret, "stringData": VALUES})
    )
    meta = Meta(name="leak", namespace=namespace, uid="u")

    assert preflight.check(_trainjob(), meta) is None
    reason, message = preflight.check(_trainjob(sessionTokenKey="token"), meta) or ("", "")
    assert preflight.check(_trainjob(), Meta(name="leak", namespace=namespace, uid="u")) is None

    logged = "\n".join(debug_everything.lines)
    out, err = capfd.readouterr()
    # The run was verbose: the client logged its requests, so a leak would have had a channel.
    assert "/secrets/s3" in logged, logged[-2000:]
    for name, value in VALUES.items():
        for form in _forms(value):
            assert form not in logged, f"log records carry {name}'s value"
            assert form not in out and form not in err, f"stdout/stderr carry {name}'s value"

    assert reason == "CredentialsIncomplete"
    assert "'token'" in message and "sessionTokenKey" in message
    for other in VALUES:
        assert other not in message, f"the Stalled message lists the Secret's key {other}"


def test_a_missing_secret_is_reported_by_name(
    kube_cluster: Any, namespace: str, debug_everything: _Everything
) -> None:
    problem = preflight.check(_trainjob(), Meta(name="leak", namespace=namespace, uid="u"))
    assert problem is not None and problem[0] == "CredentialsNotFound"
    assert "spec.storage.s3.credentialsSecret.name" in problem[1] and "'s3'" in problem[1]
