"""Which namespaces the operator manages TrainJobs in: those whose labels match its namespace
selector (OperatorConfig.namespace_selector; the chart's `namespaceSelector`, by default the
label `raytrain.dev/enabled: "true"`, so that a cluster administrator opts each namespace in).

The selector is a Kubernetes LabelSelector (matchLabels, matchExpressions), the same object the
chart gives the operator's admission policy, which refuses the operator's writes to children
in other namespaces. The engine asks `NamespaceSelection.selects` before each pass; the labels
come from kopf's watch of namespaces (`namespace_changed`), or from one read of a namespace not
seen yet. A namespace that gains the label gets a pass for each of its TrainJobs; one that loses
it too, so that each says it is no longer managed (handlers/engine.py). Without a selector no
namespace is watched and every one is selected.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

from raytrain_operator.builders.selectors import describe, label_command, selects


class NamespaceSelection:
    """The labels of the namespaces seen, and whether each is selected."""

    def __init__(
        self,
        selector: Mapping[str, Any] | None,
        read: Callable[[str], Mapping[str, str] | None] | None = None,
    ) -> None:
        self.selector = dict(selector) if selector else None
        #: Reads one namespace's labels (None: it does not exist or may not be read).
        self._read = read
        self._labels: dict[str, dict[str, str]] = {}
        self._lock = threading.Lock()

    def selects(self, namespace: str) -> bool:
        if self.selector is None:
            return True
        with self._lock:
            labels = self._labels.get(namespace)
        if labels is None:
            read = self._read(namespace) if self._read is not None else None
            labels = dict(read or {})
            with self._lock:
                labels = self._labels.setdefault(namespace, labels)
        return selects(self.selector, labels)

    def saw(self, namespace: str, labels: Mapping[str, str] | None) -> bool | None:
        """Record a namespace's labels (None: it is gone); whether it is selected now, when
        that changed, else None. A namespace seen for the first time changed nothing: its
        TrainJobs' own events (the watch's first listing among them) bring their passes."""
        if self.selector is None:
            return None
        with self._lock:
            before = self._labels.get(namespace)
            if labels is None:
                self._labels.pop(namespace, None)
                return None
            self._labels[namespace] = dict(labels)
        now = selects(self.selector, labels)
        if before is None or selects(self.selector, before) == now:
            return None
        return now

    def refusal(self, namespace: str) -> str:
        """Why a TrainJob of `namespace` is not managed, and the fix."""
        assert self.selector is not None
        command = label_command(self.selector, namespace)
        how = f" ({command})" if command else ""
        return (
            f"namespace {namespace!r} does not match this operator's namespaceSelector "
            f"({describe(self.selector)}), so it manages no TrainJob there: nothing is created, "
            "changed or deleted for this job, and children it made earlier keep running "
            "unmanaged. A cluster administrator opts the namespace in by labelling it"
            f"{how}, or widens the chart value namespaceSelector"
        )
