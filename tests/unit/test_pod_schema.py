"""The generated core/v1 shapes are what scripts/gen_pod_schema.py writes from the installed
kubernetes client, and our hand-written pod schemas refuse to drift from them."""

from __future__ import annotations

import importlib.util
import pathlib
import sys
from types import ModuleType
from typing import Any

import pytest

from raytrain_contract.api.v1alpha1 import core_v1, pod_schema

pytest.importorskip("kubernetes", reason="the kubernetes client is in the operator's install")

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _generator() -> ModuleType:
    path = ROOT / "scripts" / "gen_pod_schema.py"
    spec = importlib.util.spec_from_file_location("gen_pod_schema", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_committed_core_v1_matches_the_generator() -> None:
    generator = _generator()
    committed = pathlib.Path(core_v1.__file__).read_text()
    assert committed == generator.render(), (
        "raytrain_contract/api/v1alpha1/core_v1.py differs from what the kubernetes client "
        "installed now gives: run `python scripts/gen_pod_schema.py` and review the diff"
    )


def test_the_generator_reads_required_fields_from_the_client() -> None:
    generator = _generator()
    assert generator.shape("V1VolumeMount")["required"] == ["mountPath", "name"]
    assert "required" not in generator.shape("V1Toleration")


def test_a_field_the_shape_lacks_is_refused() -> None:
    with pytest.raises(ValueError, match="no field 'mountPaths'"):
        pod_schema.narrow(core_v1.VOLUME_MOUNT, {"mountPaths": {}})


def test_a_field_kubernetes_requires_cannot_be_left_optional() -> None:
    fields: dict[str, Any] = {"name": {}, "mountPath": {}}
    with pytest.raises(ValueError, match="Kubernetes requires"):
        pod_schema.narrow(core_v1.VOLUME_MOUNT, fields, required=["name"])
