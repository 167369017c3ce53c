"""The contract model itself: the documented example, errors that name the key, unknown keys.

These run without Ray or torch: the model is a small package both sides import.
"""

from __future__ import annotations

import copy
import json
import logging
import re
from pathlib import Path
from typing import Any

import pytest

from raytrain_contract import (
    CONTRACT_VERSION,
    DEFAULT_REPORT_MIN_INTERVAL_SECONDS,
    DEFAULT_TORCH_TIMEOUT_SECONDS,
    Contract,
    ContractError,
    PvcStorage,
    Scaling,
    TorchSettings,
    TrainJobRef,
    dump_contract,
    load_contract,
    read_contract,
    unknown_keys,
)
from raytrain_contract import v1 as contract_v1
from raytrain_contract.timefmt import parse_rfc3339, rfc3339

DOC = Path(__file__).resolve().parents[2] / "docs" / "runtime-contract.md"


def documented_example() -> dict[str, Any]:
    """The JSON example of docs/runtime-contract.md, so the page cannot drift from the model."""
    blocks = re.findall(r"```json\n(.*?)```", DOC.read_text(), flags=re.S)
    assert blocks, f"{DOC} has no ```json block"
    parsed: dict[str, Any] = json.loads(blocks[0])
    return parsed


def test_the_documented_example_parses_and_renders_back_unchanged() -> None:
    doc = documented_example()
    c = load_contract(doc)
    assert c.run_name == "digits-5f0c2a7e91b3"
    assert c.scaling.num_workers == 2 and not c.scaling.elastic
    assert c.storage.type == "s3" and c.storage.endpoint == "http://127.0.0.1:9000"
    assert c.checkpoint.num_to_keep == 2 and c.checkpoint.score_order == "max"
    assert c.datasets["train"].format == "parquet" and c.datasets["train"].split
    assert c.report.min_interval_seconds == 5.0
    assert c.torch.backend == "gloo" and c.failure.max_failures == 1
    assert json.dumps(dump_contract(c), sort_keys=True) == json.dumps(doc, sort_keys=True)


def test_read_contract_from_file(tmp_path: Path) -> None:
    p = tmp_path / "contract.json"
    p.write_text(json.dumps(documented_example()))
    assert read_contract(p).train_job.name == "digits"
    p.write_text("{not json")
    with pytest.raises(ContractError, match=r"contract.json is not valid JSON"):
        read_contract(p)
    with pytest.raises(ContractError, match=r"cannot read the runtime contract at .*missing"):
        read_contract(tmp_path / "missing")


def test_another_major_version_is_refused_naming_both() -> None:
    doc = {**documented_example(), "contractVersion": 7}
    with pytest.raises(ContractError, match=r"reads version 1, the document is version 7"):
        load_contract(doc)


@pytest.mark.parametrize(
    ("mutate", "match"),
    [
        (lambda d: d.pop("runName"), r"runName: missing key"),
        (lambda d: d["scaling"].update(numWorkers=None), r"numWorkers or both minWorkers"),
        (
            lambda d: d["scaling"].update(numWorkers=2, minWorkers=1, maxWorkers=2),
            r"are exclusive",
        ),
        (
            lambda d: d["scaling"].update(numWorkers=None, minWorkers=3, maxWorkers=2),
            r"minWorkers=3 must be <= maxWorkers=2",
        ),
        (lambda d: d["scaling"].update(placementStrategy="AROUND"), r"placementStrategy.*AROUND"),
        (lambda d: d["storage"].update(path="bucket/prefix"), r"storage.path.*'bucket/prefix'"),
        (lambda d: d.update(storage={"type": "pvc", "path": "rel"}), r"storage.path.*'rel'"),
        (lambda d: d.update(storage={"type": "ftp", "path": "/x"}), r"storage.type.*'ftp'"),
        (lambda d: d["checkpoint"].update(scoreOrder="up"), r"checkpoint.scoreOrder.*'up'"),
        (lambda d: d["checkpoint"].update(numToKeep=0), r"checkpoint.numToKeep.*0"),
        (lambda d: d.update(entrypoint="no_colon"), r"entrypoint.*'no_colon'"),
        (lambda d: d["datasets"]["train"].update(format="xls"), r"datasets.train.format.*'xls'"),
        (lambda d: d["torch"].update(timeoutSeconds=0), r"torch.timeoutSeconds.*0"),
        (lambda d: d["report"].update(minIntervalSeconds=-1), r"report.minIntervalSeconds.*-1"),
        (lambda d: d.update(attempt=-1), r"attempt.*-1"),
    ],
)
def test_bad_documents_name_the_key_and_value(mutate: Any, match: str) -> None:
    doc = copy.deepcopy(documented_example())
    mutate(doc)
    with pytest.raises(ContractError, match=match):
        load_contract(doc)


def test_unknown_keys_at_any_depth_are_ignored_with_one_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    doc = copy.deepcopy(documented_example())
    doc["newTopLevel"] = {"anything": 1}
    doc["scaling"]["newScalingKey"] = True
    doc["datasets"]["train"]["newDatasetKey"] = "x"
    doc["storage"]["newStorageKey"] = 1
    doc["tune"] = {"paramSpace": {}, "metric": "loss", "scheduler": {"newSchedKey": 2}}
    with caplog.at_level(logging.WARNING, logger="raytrain_contract"):
        c = load_contract(doc)
    assert c.scaling.num_workers == 2 and c.tune is not None
    assert c.tune.scheduler is not None and c.tune.scheduler.type == "ASHA"
    (record,) = caplog.records
    for path in (
        "newTopLevel",
        "scaling.newScalingKey",
        "datasets.train.newDatasetKey",
        "storage.newStorageKey",
        "tune.scheduler.newSchedKey",
    ):
        assert path in record.getMessage()
    # Values that are free-form objects are not searched for "unknown" keys.
    assert "config" not in record.getMessage() and "paramSpace" not in record.getMessage()


def test_a_known_document_warns_about_nothing() -> None:
    assert unknown_keys(documented_example()) == []


def test_defaults_are_written_once() -> None:
    c = Contract(
        train_job=TrainJobRef(namespace="ns", name="n", uid="u"),
        run_name="n-u",
        entrypoint="m:f",
        scaling=Scaling(num_workers=1),
        torch=TorchSettings(backend="gloo"),
        storage=PvcStorage(path="/mnt/x"),
    )
    doc = dump_contract(c)
    assert doc["contractVersion"] == CONTRACT_VERSION
    assert doc["torch"]["timeoutSeconds"] == DEFAULT_TORCH_TIMEOUT_SECONDS == 1800
    assert doc["report"] == {
        "enabled": True,
        "minIntervalSeconds": DEFAULT_REPORT_MIN_INTERVAL_SECONDS,
    }
    assert load_contract(doc) == c


def test_a_key_added_after_0_1_0_is_left_out_while_it_holds_its_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Pretend acceleratorType were new: 0.1.0 runtimes refuse keys they do not know, so the
    # operator must not write it for jobs that leave it unset.
    monkeypatch.setitem(contract_v1._ADDED_SINCE_0_1_0, Scaling, frozenset({"accelerator_type"}))
    base = load_contract(documented_example())
    assert "acceleratorType" not in dump_contract(base)["scaling"]
    used = base.model_copy(update={"scaling": Scaling(num_workers=2, accelerator_type="A100")})
    assert dump_contract(used)["scaling"]["acceleratorType"] == "A100"


def test_rfc3339_round_trips_datetimes_and_epoch_seconds() -> None:
    text = rfc3339(1_700_000_000.0)
    assert text == "2023-11-14T22:13:20Z"
    parsed = parse_rfc3339(text)
    assert parsed is not None and parsed.timestamp() == 1_700_000_000.0
    assert rfc3339(parsed) == text
    assert parse_rfc3339("2023-11-14T22:13:20") == parsed  # naive means UTC
    assert parse_rfc3339("yesterday") is None and parse_rfc3339(None) is None
