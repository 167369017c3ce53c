"""Checkpoint manifests on real Ray Train runs (CPU, 2 workers) with checkpoints in MinIO.

One run, then three more drivers of the same run (cluster-level retries), each after damaging
the latest checkpoint the way storage or a dead pod does: a truncated file, a file corrupted at
the same size (only its CRC32C tells), a manifest that was never written. Each retry resumes
from the newest checkpoint that passes, says which it passed over and why, and deletes nothing.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from raytrain_contract import checkpoints as ck
from raytrain_contract import load_contract
from trainer_runtime.local import run_local
from trainer_runtime.reporter import RecordingTransport
from trainer_runtime.trainer import EXIT_BAD_INPUT

pytestmark = [pytest.mark.runtime, pytest.mark.usefixtures("ray_local")]


def s3_storage(server: Any, prefix: str) -> dict[str, Any]:
    return {"type": "s3", "path": f"s3://{server.bucket}/{prefix}", "endpoint": server.endpoint,
            "region": "us-east-1"}  # fmt: skip


def start_epochs(sink: RecordingTransport) -> list[int]:
    out = []
    for p in sink.patches:
        for m in p["status"]["trainerStatus"].get("metrics", []):
            if m["name"] == "start_epoch":
                out.append(int(float(m["value"])))
    return out


def checkpoint_status(sink: RecordingTransport) -> dict[str, Any]:
    """status.checkpoint as the patches leave it (a merge of every patch, in order)."""
    merged: dict[str, Any] = {}
    for p in sink.patches:
        for k, v in (p["status"].get("checkpoint") or {}).items():
            merged[k] = v
    return merged


def run(doc: dict[str, Any], attempt: int, epochs: int) -> tuple[int, RecordingTransport]:
    sink = RecordingTransport()
    again = {**doc, "attempt": attempt, "config": {**doc["config"], "epochs": epochs}}
    code = run_local(load_contract(again), display=False, transport=sink, min_interval=0)
    return code, sink


class Bucket:
    def __init__(self, server: Any, run_prefix: str) -> None:
        self.s3 = server.client()
        self.bucket = server.bucket
        self.run_prefix = run_prefix

    def dirs(self) -> list[str]:
        """The run's checkpoint directories, newest first."""
        keys = self.keys("")
        names = {k.split("/", 1)[0] for k in keys if k.startswith("checkpoint_") and "/" in k}
        return sorted(names, reverse=True)

    def keys(self, under: str) -> list[str]:
        prefix = f"{self.run_prefix}/{under}"
        pages = self.s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket,
                                                                   Prefix=prefix)  # fmt: skip
        return [o["Key"][len(self.run_prefix) + 1 :] for p in pages for o in p.get("Contents", [])]

    def get(self, rel: str) -> bytes:
        body = self.s3.get_object(Bucket=self.bucket, Key=f"{self.run_prefix}/{rel}")["Body"]
        return body.read()  # type: ignore[no-any-return]

    def put(self, rel: str, data: bytes) -> None:
        self.s3.put_object(Bucket=self.bucket, Key=f"{self.run_prefix}/{rel}", Body=data)

    def delete(self, rel: str) -> None:
        self.s3.delete_object(Bucket=self.bucket, Key=f"{self.run_prefix}/{rel}")

    def manifest(self, name: str) -> ck.Manifest:
        return ck.Manifest.model_validate_json(self.get(f"{name}/.raytrain/manifest.json"))

    def data_file(self, name: str) -> str:
        """The largest file of a checkpoint (the model's state)."""
        entry = max(self.manifest(name).files, key=lambda f: f.size)
        return f"{name}/{entry.path}"


def test_a_damaged_latest_checkpoint_is_passed_over_named_and_kept(
    s3_env: Any, make_doc: Any
) -> None:
    prefix = f"runs-{uuid.uuid4().hex[:8]}"
    # numToKeep 2: Ray Train's retention runs, and must not delete what a resume rejected.
    doc = make_doc(config={"epochs": 3, "lr": 0.1, "seed": 0},
                   storage=s3_storage(s3_env, prefix), num_to_keep=2)  # fmt: skip
    uri_base = f"s3://{s3_env.bucket}/{prefix}/{doc['runName']}"
    bucket = Bucket(s3_env, f"{prefix}/{doc['runName']}")

    code, sink = run(doc, 0, 3)
    assert code == 0
    # Every checkpoint has a manifest naming its files, sizes and CRC32C, and who wrote it.
    dirs = bucket.dirs()
    assert len(dirs) == 2, dirs
    for epoch, name in zip((2, 1), dirs, strict=True):
        m = bucket.manifest(name)
        assert (m.run, m.checkpoint, m.attempt, m.epoch) == (doc["runName"], name, 0, epoch)
        held = {k[len(name) + 1 :] for k in bucket.keys(name + "/")}
        files = {h for h in held if h and not h.startswith(".raytrain/")}  # "" is the dir itself
        assert {f.path for f in m.files} == files
        for f in m.files:
            data = bucket.get(f"{name}/{f.path}")
            assert len(data) == f.size
            assert f.crc32c == f"{__import__('google_crc32c').value(data):08x}"
    assert checkpoint_status(sink)["latestURI"] == f"{uri_base}/{dirs[0]}"

    # 1. The latest (epoch 2) loses the end of its model file: the sizes show it.
    truncated = bucket.data_file(dirs[0])
    bucket.put(truncated, bucket.get(truncated)[:100])
    code, sink = run(doc, 1, 4)
    assert code == 0
    assert start_epochs(sink)[0] == 2, "did not resume from epoch 1's checkpoint"
    status = checkpoint_status(sink)
    assert status["resumedFrom"] == f"{uri_base}/{dirs[1]}"
    (rejected,) = status["rejected"]
    assert rejected["uri"] == f"{uri_base}/{dirs[0]}"
    assert rejected["problem"] == "size" and rejected["attempt"] == 1
    assert truncated.split("/", 1)[1] in rejected["reason"]
    assert "100 bytes" in rejected["reason"]
    # Kept, and marked; Ray Train's snapshot no longer names it, and its original is kept.
    assert dirs[0] in bucket.dirs()
    mark = json.loads(bucket.get(f"{dirs[0]}/.raytrain/rejected.json"))
    assert mark["problem"] == "size" and mark["attempt"] == 1
    assert "checkpoint_manager_snapshot.json.before-attempt-1" in bucket.keys("")

    # 2. The new latest (epoch 3) is corrupted at the same size: only the checksums show it,
    # checked by the workers on the copy they resume from.
    dirs = bucket.dirs()
    flipped = bucket.data_file(dirs[0])
    data = bytearray(bucket.get(flipped))
    data[len(data) // 2] ^= 0xFF
    bucket.put(flipped, bytes(data))
    code, sink = run(doc, 2, 5)
    assert code == 0
    assert start_epochs(sink)[0] == 3, "did not resume from epoch 2's new checkpoint"
    status = checkpoint_status(sink)
    assert status["resumedFrom"] == f"{uri_base}/{dirs[1]}"
    assert status["rejected"][-1]["problem"] == "checksum"
    assert status["rejected"][-1]["uri"] == f"{uri_base}/{dirs[0]}"
    assert "CRC32C" in status["rejected"][-1]["reason"]
    # Still in Ray Train's list this attempt, so its retention tried to delete it: kept.
    assert dirs[0] in bucket.dirs()

    # 3. The latest (epoch 4) has no manifest: as if the pod died before writing it.
    dirs = bucket.dirs()
    bucket.delete(f"{dirs[0]}/.raytrain/manifest.json")
    code, sink = run(doc, 3, 6)
    assert code == 0
    status = checkpoint_status(sink)
    assert status["rejected"][-1]["problem"] == "no-manifest", status["rejected"]
    assert status["rejected"][-1]["uri"] == f"{uri_base}/{dirs[0]}"
    assert status["resumedFrom"] == f"{uri_base}/{dirs[1]}"
    assert start_epochs(sink)[0] == 4, "did not resume from epoch 3's checkpoint"
    # Every rejected checkpoint is still there (numToKeep retired the good ones in between).
    rejected_dirs = {d for d in bucket.dirs() if bucket.keys(f"{d}/.raytrain/rejected.json")}
    assert len(rejected_dirs) == 3 and dirs[0] in rejected_dirs, rejected_dirs


def test_a_run_with_no_checkpoint_that_passes_fails_naming_them_and_keeps_them(
    s3_env: Any, make_doc: Any
) -> None:
    prefix = f"runs-{uuid.uuid4().hex[:8]}"
    doc = make_doc(config={"epochs": 2, "lr": 0.1, "seed": 0},
                   storage=s3_storage(s3_env, prefix), num_to_keep=None)  # fmt: skip
    bucket = Bucket(s3_env, f"{prefix}/{doc['runName']}")
    code, _ = run(doc, 0, 2)
    assert code == 0
    dirs = bucket.dirs()
    for name in dirs:
        bucket.delete(bucket.data_file(name))
    code, sink = run(doc, 1, 4)
    assert code == EXIT_BAD_INPUT
    final = sink.patches[-1]["status"]["trainerStatus"]
    assert final["phase"] == "Failed"
    for name in dirs:
        assert name in final["message"]
    assert "is missing" in final["message"] and "Nothing was deleted" in final["message"]
    assert "spec.resumeFrom" in final["message"]
    assert start_epochs(sink) == [], "it trained from scratch"
    assert bucket.dirs() == dirs
