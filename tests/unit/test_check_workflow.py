"""The pull-request check (.github/workflows/check.yml) runs `make check` on every Python that
pyproject.toml's classifiers claim, and pyproject's requires-python floor is the oldest of them:
the claim, the matrix and the floor cannot drift apart."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import yaml

if sys.version_info >= (3, 11):
    import tomllib
else:  # pytest itself depends on tomli before 3.11
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / ".github" / "workflows" / "check.yml"


def _workflow() -> dict[Any, Any]:
    data = yaml.safe_load(WORKFLOW.read_text())
    assert isinstance(data, dict), WORKFLOW
    return data


def _claimed() -> list[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    prefix = "Programming Language :: Python :: "
    return [
        c.removeprefix(prefix)
        for c in project["classifiers"]
        if c.startswith(prefix) and re.fullmatch(r"3\.\d+", c.removeprefix(prefix))
    ]


def test_runs_on_pull_requests_and_pushes_to_main() -> None:
    # YAML 1.1 reads the key `on` as True.
    triggers = _workflow()[True]
    assert "pull_request" in triggers
    assert triggers["push"]["branches"] == ["main"]


def test_the_matrix_is_the_pythons_the_classifiers_claim() -> None:
    job = _workflow()["jobs"]["check"]
    matrix = [str(v) for v in job["strategy"]["matrix"]["python-version"]]
    assert matrix == _claimed(), "check.yml's matrix and pyproject.toml's classifiers differ"
    setup = [s for s in job["steps"] if str(s.get("uses", "")).startswith("actions/setup-python")]
    assert setup and setup[0]["with"]["python-version"] == "${{ matrix.python-version }}"
    assert any("make check" in str(s.get("run", "")) for s in job["steps"])


def test_requires_python_is_the_oldest_claimed() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    oldest = min(_claimed(), key=lambda v: tuple(map(int, v.split("."))))
    assert project["requires-python"] == f">={oldest}"
