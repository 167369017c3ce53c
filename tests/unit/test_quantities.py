"""Quantities: every form the API server accepts parses to what kubernetes' own parser says;
everything else is refused with the field, the value and the fix, never a decimal error."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from _factories import manifest
from hypothesis import given
from hypothesis import strategies as st
from kubernetes.utils.quantity import parse_quantity

from raytrain_operator.builders import quantities
from raytrain_operator.handlers.reconcile import parse as parse_trainjob

SUFFIXES = ["", "n", "u", "m", "k", "M", "G", "T", "P", "Ki", "Mi", "Gi", "Ti", "Pi"]


@pytest.mark.parametrize(
    "text",
    ["1", "500m", "2Gi", "1G", "1.5", "1e3", "1E3", "0.25", ".5", "+2", "100n", "3u", "7Ki"],
)
def test_agrees_with_kubernetes_parse_quantity(text: str) -> None:
    assert quantities.parse(text) == parse_quantity(text)


@given(
    whole=st.integers(min_value=0, max_value=10**6),
    frac=st.one_of(st.none(), st.integers(min_value=0, max_value=999)),
    suffix=st.sampled_from(SUFFIXES),
)
def test_agrees_with_kubernetes_on_generated_quantities(
    whole: int, frac: int | None, suffix: str
) -> None:
    text = f"{whole}{'' if frac is None else f'.{frac:03d}'}{suffix}"
    if parse_quantity(text) > quantities.MAXIMUM:
        with pytest.raises(ValueError, match="larger than any Kubernetes quantity"):
            quantities.parse(text)
    else:
        assert quantities.parse(text) == parse_quantity(text)


@pytest.mark.parametrize(
    ("bad", "complaint"),
    [
        ("1e1000000", "larger than any Kubernetes quantity"),
        ("1e400", "larger than any Kubernetes quantity"),
        ("1e19", "larger than any Kubernetes quantity"),
        ("9" * 400, "larger than any Kubernetes quantity"),
        (10**40, "larger than any Kubernetes quantity"),
        ("1e-1000000", "too small to request"),
        ("-1", "must not be negative"),
        ("-500m", "must not be negative"),
        (-1, "must not be negative"),
        (-0.5, "must not be negative"),
        # kubernetes' parser takes these; the API server does not
        ("1K", "is not a quantity"),
        ("1_000", "is not a quantity"),
        ("NaN", "is not a quantity"),
        (float("inf"), "is not a quantity"),
        ("1ki", "is not a quantity"),
        ("", "is not a quantity"),
        ("abc", "is not a quantity"),
        (True, "is not a quantity"),
    ],
)
def test_refused_with_field_value_and_fix(bad: Any, complaint: str) -> None:
    with pytest.raises(ValueError) as exc:
        quantities.parse(bad, "spec.scaling.resourcesPerWorker.cpu")
    message = str(exc.value)
    assert message.startswith(f"spec.scaling.resourcesPerWorker.cpu: {bad!r} ")
    assert complaint in message
    assert "write e.g. 2, 500m or 8Gi" in message


def test_the_largest_quantity_still_converts() -> None:
    largest = quantities.parse(str(2**63 - 1))
    assert largest == quantities.MAXIMUM
    assert quantities.cpu_string(largest * 64) == str((2**63 - 1) * 64)
    assert quantities.memory_string(largest) == str(2**63 - 1)


@pytest.mark.parametrize("cpu", ["1e1000000", "1e400", "-1"])
def test_a_trainjob_with_such_a_cpu_is_a_spec_problem_not_a_crash(cpu: str) -> None:
    doc = manifest(scaling={"numWorkers": 2, "resourcesPerWorker": {"cpu": cpu}})
    trainjob, problem = parse_trainjob(doc)
    assert problem is not None, trainjob
    assert "cpu" in problem and repr(cpu) in problem


def test_values_are_exact_decimals() -> None:
    assert quantities.parse("100m") * 3 == Decimal("0.3")
