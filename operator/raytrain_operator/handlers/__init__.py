"""kopf handlers: thin shells that queue work on the engine (handlers/engine.py).

Nothing is registered by importing this package: `register(registry)` registers every handler
on a kopf registry (`__main__` does it on a registry of its own, and hands the engine to the
handlers through kopf's memo).

Layers, from the top (pyproject.toml's import-linter contracts hold them): the kopf shells
(trainjobs, events, rayjobs, legacy) > engine > reconcile > apply, preflight, templates >
queue, state, peering.
"""

from __future__ import annotations

from typing import Any

import kopf

from raytrain_operator import k8s
from raytrain_operator.handlers import events, legacy, rayjobs, trainjobs
from raytrain_operator.handlers.events import engine_of
from raytrain_operator.settings import configure_kopf


def register(registry: kopf.OperatorRegistry, *, select_namespaces: bool = False) -> None:
    """Every handler of the operator, on `registry`; `select_namespaces`: the operator has a
    namespace selector, so kopf watches namespaces for their labels (handlers/namespaces.py)."""
    kopf.on.startup(id="configure", registry=registry)(configure)
    kopf.on.login(id="credentials", registry=registry)(login)
    kopf.on.startup(id="engine", registry=registry)(start_engine)
    kopf.on.cleanup(id="engine", registry=registry)(stop_engine)
    trainjobs.register(registry)
    events.register(registry, select_namespaces=select_namespaces)
    rayjobs.register(registry)
    legacy.register(registry)


def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    configure_kopf(settings, engine_of(memo).config)


async def start_engine(
    memo: kopf.Memo,
    rayjobs: kopf.Index[Any, Any] | None = None,
    rayclusters: kopf.Index[Any, Any] | None = None,
    **_: Any,
) -> None:
    engine_of(memo).start((rayjobs, rayclusters))


def stop_engine(memo: kopf.Memo, **_: Any) -> None:
    """Before the process ends (SIGTERM, the pod's termination): no pass and no write after."""
    engine_of(memo).stop()


def login(settings: kopf.OperatorSettings, **_: Any) -> kopf.ConnectionInfo | None:
    """The credentials raytrain_operator.k8s uses too: in a pod, the service account with the
    API server's address from the environment the kubelet sets (kopf's own service-account
    login names it by its DNS name, which needs cluster DNS); else the kubeconfig."""
    info: kopf.ConnectionInfo | None = k8s.in_cluster_info()
    if info is None:
        info = kopf.login_with_kubeconfig(settings=settings)
    return info
