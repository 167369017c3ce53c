"""Forward and backward compatibility with the released 0.1.0 trainer runtime and operator.

Users build their images FROM trainer-runtime:0.1.0, so an operator upgrade must keep working with
that image's parser, and a runtime upgrade must read what a 0.1.0 operator rendered:

- forward: documents the current operator renders for every example go through the 0.1.0
  runtime's own parser, read from git at the release commit (it refused unknown keys);
- backward: the documents the 0.1.0 operator rendered (tests/contract/released/0.1.0, written by
  that release's `render_contract` for the examples) parse with the current model and render back
  byte-for-byte.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest
import yaml

from raytrain_contract import dump_contract, load_contract
from raytrain_contract.api import templates
from raytrain_contract.api.v1alpha1 import TrainJob
from raytrain_contract.meta import Meta
from raytrain_operator.builders.contract import render_contract

REPO = Path(__file__).resolve().parents[2]
RELEASED = Path(__file__).resolve().parent / "released" / "0.1.0"
# The commit the 0.1.0 images were built from.
RELEASE_0_1_0 = "6deaf50d93c220d59f8a8e12981d2da026fcdf39"
UID = "5f0c2a7e-91b3-4c1d-8e2f-0123456789ab"


def runtime_0_1_0_parser() -> types.ModuleType:
    """trainer_runtime/contract.py as released in 0.1.0, loaded from git history."""
    try:
        source = subprocess.run(
            ["git", "show", f"{RELEASE_0_1_0}:trainer_runtime/contract.py"],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.fail(
            f"the 0.1.0 runtime's parser is read from git commit {RELEASE_0_1_0[:12]}, which "
            f"this checkout lacks ({exc}); in a shallow clone run `git fetch --unshallow`"
        )
    module = types.ModuleType("trainer_runtime_contract_0_1_0")
    # Its dataclasses resolve their string annotations through sys.modules[__name__].
    sys.modules[module.__name__] = module
    exec(compile(source, "trainer_runtime/contract.py@0.1.0", "exec"), module.__dict__)
    return module


def _trainjobs() -> list[dict[str, Any]]:
    docs = []
    for path in sorted((REPO / "examples").glob("*.yaml")):
        found = [d for d in yaml.safe_load_all(path.read_text()) if d]
        docs += [templates.expand(d, found) for d in found if d.get("kind") == "TrainJob"]
    # One more that fills every optional section, so each one crosses the boundary.
    (digits,) = [d for d in docs if d["metadata"]["name"] == "digits"]
    full = copy.deepcopy(digits)
    full["metadata"]["name"] = "digits-tune-datasets"
    full["spec"]["datasets"] = {
        "train": {"uri": "s3://raytrain/data/", "format": "csv", "split": False}
    }
    full["spec"]["tune"] = {
        "paramSpace": {"lr": {"loguniform": [0.001, 0.1]}},
        "numSamples": 4,
        "metric": "accuracy",
        "mode": "max",
        "maxConcurrentTrials": 2,
        "scheduler": {"type": "ASHA", "maxT": 8, "gracePeriod": 2, "reductionFactor": 3},
    }
    return [*docs, full]


@pytest.fixture(scope="module")
def old_parser() -> types.ModuleType:
    return runtime_0_1_0_parser()


@pytest.mark.parametrize("trainjob", _trainjobs(), ids=lambda d: d["metadata"]["name"])
def test_current_operator_documents_parse_in_the_0_1_0_runtime(
    trainjob: dict[str, Any], old_parser: types.ModuleType
) -> None:
    meta = Meta(name=trainjob["metadata"]["name"], namespace="team-a", uid=UID)
    document = render_contract(TrainJob.model_validate(trainjob), meta, 3)
    old = old_parser.load_contract(json.loads(json.dumps(document)))
    new = load_contract(document)
    assert old.run_name == new.run_name and old.attempt == new.attempt == 3
    assert old.entrypoint == new.entrypoint and old.config == new.config
    assert old.scaling.resources_per_worker == new.scaling.resources_per_worker
    assert old.storage.type == new.storage.type and old.storage.path == new.storage.path
    assert old.torch.timeout_seconds == new.torch.timeout_seconds
    assert old.report.min_interval_seconds == new.report.min_interval_seconds
    assert (old.tune is None) == (new.tune is None)
    assert set(old.datasets) == set(new.datasets)


def test_the_0_1_0_parser_is_the_strict_one_this_test_relies_on(
    old_parser: types.ModuleType,
) -> None:
    # If the loaded parser accepted unknown keys, the test above could not catch a new key.
    doc = json.loads((RELEASED / "digits.json").read_text())
    doc["scaling"]["newKey"] = 1
    with pytest.raises(old_parser.ContractError, match="unknown key"):
        old_parser.load_contract(doc)


@pytest.mark.parametrize("path", sorted(RELEASED.glob("*.json")), ids=lambda p: p.stem)
def test_0_1_0_operator_documents_parse_and_render_back_unchanged(path: Path) -> None:
    document = json.loads(path.read_text())
    # Compared as text: 2147483648 == 2147483648.0 in Python, but not on the wire.
    again = dump_contract(load_contract(document))
    assert json.dumps(again, sort_keys=True) == json.dumps(document, sort_keys=True)


def test_every_released_document_is_covered() -> None:
    # The 0.1.0 documents are frozen: each still has its example (so the forward test above
    # renders it with today's operator); an example added since has no 0.1.0 document.
    names = {d["metadata"]["name"] for d in _trainjobs()}
    released = {p.stem for p in RELEASED.glob("*.json")}
    assert released <= names, released - names
