"""kopf handlers: thin I/O shells around the pure builders and the status state machine.

Importing this package registers every handler (`kopf run -m raytrain_operator.handlers`).
"""

from __future__ import annotations

from typing import Any

import kopf

from raytrain_operator import k8s
from raytrain_operator.handlers import legacy, rayjobs, trainjobs, wake
from raytrain_operator.settings import CONFIG, configure_kopf

__all__ = ["legacy", "rayjobs", "trainjobs", "wake"]


@kopf.on.startup(id="configure")
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    configure_kopf(settings, CONFIG)


@kopf.on.login(id="credentials")
def login(settings: kopf.OperatorSettings, **_: Any) -> kopf.ConnectionInfo | None:
    """The credentials raytrain_operator.k8s uses too: in a pod, the service account with the
    API server's address from the environment the kubelet sets (kopf's own service-account
    login names it by its DNS name, which needs cluster DNS); else the kubeconfig."""
    info: kopf.ConnectionInfo | None = k8s.in_cluster_info()
    if info is None:
        info = kopf.login_with_kubeconfig(settings=settings)
    return info
