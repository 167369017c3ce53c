"""Child names are deterministic, and a TrainJob's name is checked where the CRD checks it.

What KubeRay makes of the longest name is tests/integration/test_names_server.py's.
"""

from __future__ import annotations

import pytest

from raytrain_contract.api.v1alpha1 import MAX_NAME_LENGTH
from raytrain_contract.pods import run_name
from raytrain_operator.builders import names


def test_child_names_are_deterministic() -> None:
    assert names.rayjob_name("digits", 0) == "digits-0"
    assert names.rayjob_name("digits", 3) == "digits-3"
    assert names.contract_configmap_name("digits") == "digits-contract"
    assert names.runtime_account_name("digits") == "digits-runtime"


def test_run_name_uses_first_12_hex_of_uid_without_dashes() -> None:
    uid = "5F0C2A7E-91b3-4c1d-8e2f-0123456789ab"
    assert run_name("digits", uid) == "digits-5f0c2a7e91b3"


def test_run_name_differs_for_a_recreated_trainjob_of_the_same_name() -> None:
    first = run_name("digits", "11111111-2222-3333-4444-555555555555")
    second = run_name("digits", "aaaaaaaa-2222-3333-4444-555555555555")
    assert first != second


def test_the_longest_name_is_taken_and_one_more_is_refused_with_the_fix() -> None:
    """The operator's check draws the line where the CRD does (MAX_NAME_LENGTH). That KubeRay
    runs the longest name at the last attempt is tests/integration/test_names_server.py's."""
    assert names.name_problems("a" * MAX_NAME_LENGTH) == []
    problems = names.name_problems("a" * (MAX_NAME_LENGTH + 1))
    assert problems
    assert "metadata.name" in problems[0] and "shorter" in problems[0]


@pytest.mark.parametrize("bad", ["Digits", "digits_1", "-digits", "digits-", "1digits", "9"])
def test_a_name_that_is_not_a_dns_label_is_refused(bad: str) -> None:
    assert any("DNS label" in p for p in names.name_problems(bad))
