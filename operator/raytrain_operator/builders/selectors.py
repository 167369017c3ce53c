"""Label selectors on namespaces (metav1.LabelSelector: matchLabels, matchExpressions): read
from the operator's settings (`parse_selector`), matched against a namespace's labels
(`selects`), and said back to a user (`describe`, `label_command`). handlers/namespaces.py
uses them to choose the namespaces whose TrainJobs the operator manages.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

#: The operators of matchExpressions (metav1.LabelSelectorOperator).
OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
SELECTOR_ENV = "RAYTRAIN_NAMESPACE_SELECTOR"


def parse_selector(text: str, source: str = SELECTOR_ENV) -> dict[str, Any] | None:
    """A LabelSelector from JSON; None for none (empty text, or `{}`: every namespace).

    Checked at start-up: a typo stops the operator with a message naming the value, instead of
    a selector that matches nothing."""
    if not text.strip():
        return None
    try:
        selector = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{source}: not JSON ({exc}); give a LabelSelector object") from exc
    if not isinstance(selector, dict):
        raise ValueError(f"{source}: {selector!r} is not a LabelSelector object")
    unknown = sorted(set(selector) - {"matchLabels", "matchExpressions"})
    if unknown:
        raise ValueError(
            f"{source}: unknown key {', '.join(unknown)}; a LabelSelector has matchLabels and "
            "matchExpressions"
        )
    labels = selector.get("matchLabels") or {}
    if not isinstance(labels, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in labels.items()
    ):
        raise ValueError(f"{source}.matchLabels: {labels!r}; give a map of label to string value")
    for i, expr in enumerate(selector.get("matchExpressions") or []):
        where = f"{source}.matchExpressions[{i}]"
        if not isinstance(expr, dict) or not isinstance(expr.get("key"), str):
            raise ValueError(f"{where}: {expr!r}; give key, operator and (for In/NotIn) values")
        if expr.get("operator") not in OPERATORS:
            raise ValueError(
                f"{where}.operator: {expr.get('operator')!r}; one of {', '.join(OPERATORS)}"
            )
        values = expr.get("values") or []
        if expr["operator"] in ("In", "NotIn") and not values:
            raise ValueError(f"{where}.values: {expr['operator']} needs at least one value")
    if not labels and not selector.get("matchExpressions"):
        return None
    return selector


def selects(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """Whether a namespace with `labels` matches `selector` (None matches every namespace)."""
    if selector is None:
        return True
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def describe(selector: Mapping[str, Any]) -> str:
    """The selector as `kubectl get -l` writes one: `raytrain.dev/enabled=true`."""
    parts = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        parts.append(
            {
                "In": f"{key} in ({','.join(values)})",
                "NotIn": f"{key} notin ({','.join(values)})",
                "Exists": key,
                "DoesNotExist": f"!{key}",
            }[op]
        )
    return ",".join(parts)


def label_command(selector: Mapping[str, Any], namespace: str) -> str | None:
    """The `kubectl label` that opts a namespace in, when matchLabels alone decide."""
    labels = selector.get("matchLabels") or {}
    if not labels or selector.get("matchExpressions"):
        return None
    pairs = " ".join(f"{k}={v}" for k, v in sorted(labels.items()))
    return f"kubectl label namespace {namespace} {pairs}"
