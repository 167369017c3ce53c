"""Objects handled by releases before 0.2 carry kopf's finalizer under the API's prefix
(`raytrain.dev/finalizer`); kopf now uses `kopf.raytrain.dev/finalizer` and would never remove
the old one, so such a TrainJob could not be deleted. This drops it as soon as the TrainJob is
seen (the initial listing at start-up covers every existing object), deleting or not: the
current finalizer protects it from then on, and the children are garbage-collected through
their ownerReferences either way.
"""

from __future__ import annotations

from typing import Any

import kopf

from raytrain_contract.api.v1alpha1 import GROUP, PLURAL, VERSION
from raytrain_operator import k8s
from raytrain_operator.settings import LEGACY_FINALIZER


def _carries_legacy_finalizer(meta: kopf.Meta, **_: Any) -> bool:
    return LEGACY_FINALIZER in (meta.get("finalizers") or [])


def drop_legacy_finalizer(
    type: str | None,
    namespace: str | None,
    name: str,
    meta: kopf.Meta,
    logger: kopf.Logger,
    **_: Any,
) -> None:
    if type == "DELETED" or namespace is None:
        return
    finalizers = [str(f) for f in meta.get("finalizers") or []]
    if k8s.remove_trainjob_finalizer(namespace, name, finalizers, LEGACY_FINALIZER):
        logger.info(f"Removed the pre-0.2 finalizer {LEGACY_FINALIZER}.")
    # Otherwise the object changed meanwhile (or is gone): its next event brings us back.


def register(registry: kopf.OperatorRegistry) -> None:
    kopf.on.event(
        GROUP,
        VERSION,
        PLURAL,
        id="legacy-finalizer",
        when=_carries_legacy_finalizer,
        registry=registry,
    )(drop_legacy_finalizer)
