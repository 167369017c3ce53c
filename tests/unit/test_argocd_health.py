"""The Argo CD health check for TrainJob, run as Lua on sample TrainJobs.

Argo CD runs health checks in gopher-lua, a Lua 5.1 implementation, with the object as the
global `obj`; lupa's Lua 5.1 runtime is the closest stand-in we can run here.
"""

from __future__ import annotations

import pathlib
from typing import Any

import pytest
import yaml

from raytrain_contract.api.v1alpha1 import TrainJob

lupa = pytest.importorskip("lupa", reason="pip install lupa (in the dev extra)")

ROOT = pathlib.Path(__file__).resolve().parents[2]
ARGOCD = ROOT / "gitops" / "argocd"
HEALTH_LUA = (ARGOCD / "health.lua").read_text()
CASES = yaml.safe_load((ARGOCD / "health_test.yaml").read_text())["tests"]


def lua_runtime() -> Any:
    try:
        from lupa import lua51

        return lua51.LuaRuntime()
    except ImportError:
        return lupa.LuaRuntime()


def health(obj: dict[str, Any]) -> dict[str, str]:
    lua = lua_runtime()
    lua.globals().obj = lua.table_from(obj, recursive=True)
    result = lua.execute(HEALTH_LUA)
    return {str(k): str(v) for k, v in result.items()}


def load(path: str) -> dict[str, Any]:
    obj: dict[str, Any] = yaml.safe_load((ARGOCD / path).read_text())
    return obj


@pytest.mark.parametrize("case", CASES, ids=[c["inputPath"] for c in CASES])
def test_health_of_sample(case: dict[str, Any]) -> None:
    assert health(load(case["inputPath"])) == case["healthStatus"]


@pytest.mark.parametrize("case", CASES, ids=[c["inputPath"] for c in CASES])
def test_samples_are_valid_trainjobs(case: dict[str, Any]) -> None:
    """The samples follow the API models, so the check reads the fields the operator writes."""
    TrainJob.model_validate(load(case["inputPath"]))


def test_every_health_status_is_covered() -> None:
    statuses = {c["healthStatus"]["status"] for c in CASES}
    assert statuses == {"Progressing", "Healthy", "Degraded", "Suspended"}


def test_progress_given_as_float_prints_as_integer() -> None:
    """gopher-lua holds every number as a float; the message must not say `40.0%`."""
    obj = load("testdata/running.yaml")
    obj["status"]["trainerStatus"]["progressPercentage"] = 40.0
    obj["status"]["trainerStatus"]["estimatedRemainingSeconds"] = 61.7
    assert health(obj)["message"] == "Running: 40% done, about 61s left"


def test_stale_generation_wins_over_a_terminal_condition() -> None:
    obj = load("testdata/failed.yaml")
    obj["metadata"]["generation"] = 2
    assert health(obj) == {
        "status": "Progressing",
        "message": "Waiting for the raytrain operator to observe generation 2",
    }


def test_false_conditions_do_not_count() -> None:
    obj = load("testdata/succeeded.yaml")
    for condition in obj["status"]["conditions"]:
        if condition["type"] == "Succeeded":
            condition["status"] = "False"
    assert health(obj)["status"] == "Progressing"


def test_values_snippet_carries_the_same_lua() -> None:
    snippet = yaml.safe_load((ARGOCD / "values-snippet.yaml").read_text())
    assert snippet["configs"]["cm"]["resource.customizations.health.raytrain.dev_TrainJob"] == (
        HEALTH_LUA
    )
