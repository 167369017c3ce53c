"""Ray's token authentication on every cluster we create (where the image's Ray has it)."""

from __future__ import annotations

import pytest
from _factories import meta, trainjob

from raytrain_operator.builders.rayjob import build_rayjob, ray_token_auth


def test_every_cluster_asks_kuberay_for_token_authentication() -> None:
    rj = build_rayjob(trainjob(), meta(), 0, suspend=False)
    assert rj["spec"]["rayClusterSpec"]["authOptions"] == {"mode": "token"}


def test_an_image_with_a_ray_older_than_token_auth_gets_none() -> None:
    # KubeRay refuses authOptions for a rayVersion below 2.52: the job would never start.
    rj = build_rayjob(trainjob(rayVersion="2.47.1"), meta(), 0, suspend=False)
    assert "authOptions" not in rj["spec"]["rayClusterSpec"]


@pytest.mark.parametrize(
    ("version", "expected"),
    [("2.52.0", True), ("2.52", True), ("2.60.0", True), ("3.0.0", True), ("10.1", True),
     ("2.52.0rc1", True), ("2.51.9", False), ("2.9.3", False), ("1.13.0", False)],
)  # fmt: skip
def test_token_auth_from_the_ray_version(version: str, expected: bool) -> None:
    assert ray_token_auth(version) is expected
