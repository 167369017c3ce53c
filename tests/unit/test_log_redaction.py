"""The Kubernetes client's DEBUG record of a Secret body never reaches a handler."""

from __future__ import annotations

import logging

import pytest

from raytrain_operator.settings import CLIENT_BODY_LOGGER, install_log_filters

SECRET_BODY = b'{"kind":"Secret","apiVersion":"v1","data":{"k":"c2VudGluZWw="}}'
LIST_BODY = b'{"kind": "SecretList", "items": [{"data": {"k": "c2VudGluZWw="}}]}'


@pytest.mark.parametrize("body", [SECRET_BODY, LIST_BODY], ids=["secret", "list"])
def test_secret_bodies_are_dropped(body: bytes, caplog: pytest.LogCaptureFixture) -> None:
    install_log_filters()
    install_log_filters()  # idempotent: one filter, however often the operator starts
    logger = logging.getLogger(CLIENT_BODY_LOGGER)
    assert len(logger.filters) == 1
    with caplog.at_level(logging.DEBUG, logger=CLIENT_BODY_LOGGER):
        logger.debug("response body: %s", body)
        logger.debug("response body: %s", b'{"kind":"ConfigMap","data":{"a":"b"}}')
    text = caplog.text
    assert "c2VudGluZWw=" not in text
    assert "ConfigMap" in text  # other bodies stay: they are what --verbose is for
