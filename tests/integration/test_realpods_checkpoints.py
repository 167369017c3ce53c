"""Checkpoints verified before a retry trusts them, on real pods with checkpoints in MinIO.

A running digits job loses its head pod; while the retry's cluster starts, the latest checkpoint
of Ray Train's snapshot is damaged in the bucket as storage damages it: a file truncated, then
(second fault) a file deleted. Each retry resumes from the checkpoint before the damaged one,
the TrainJob's status names the damaged one and what was wrong, the job ends Succeeded, and
every damaged checkpoint is still in the bucket. Then a head pod killed after Ray Train
registered a checkpoint and before the runtime wrote its manifest (the window held open by the
runtime's test setting): the retry passes over the checkpoint without a manifest.

`make test-faults` runs both; `make test` leaves both out to stay within CI's time (the first,
marker `realpods_damaged_checkpoints`, takes about 8.5 minutes: two drivers start again; the
second, marker `realpods_manifest_window`, waits 30 s before every manifest and takes
about 4.5 minutes).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from _wait import wait_for
from realpods import condition, trainjob_on_real_node, wait_condition
from test_realpods import (
    DIGITS,
    START_TIMEOUT,
    TRAIN_TIMEOUT,
    RealWorld,
    _end,
    _ray_pods,
    _start_epoch,
    _trainjob,
    real_world,
)

from raytrain_contract import checkpoints as ck
from raytrain_contract.pods import run_name

__all__ = ["real_world"]  # the module-scoped fixture, shared with test_realpods.py

pytestmark = [pytest.mark.realnode, pytest.mark.timeout(2400)]

EPOCHS = 400


class RunBucket:
    """A run's directory in the test's MinIO."""

    def __init__(self, world: RealWorld, run: str) -> None:
        self.s3 = world.minio.client()
        self.bucket = "raytrain"
        self.prefix = f"checkpoints/{run}"

    def get(self, rel: str) -> bytes:
        obj = self.s3.get_object(Bucket=self.bucket, Key=f"{self.prefix}/{rel}")
        return obj["Body"].read()  # type: ignore[no-any-return]

    def exists(self, rel: str) -> bool:
        listed = self.s3.list_objects_v2(Bucket=self.bucket, Prefix=f"{self.prefix}/{rel}")
        return bool(listed.get("KeyCount"))

    def latest(self) -> str:
        """The latest checkpoint Ray Train's snapshot names."""
        snapshot = json.loads(self.get("checkpoint_manager_snapshot.json"))
        return str(snapshot["latest_checkpoint_result"]["checkpoint_dir_name"])

    def newest_with_manifest(self) -> str:
        """The newest checkpoint of Ray Train's snapshot that has its manifest. (A head killed
        right after Ray Train registered a checkpoint leaves the latest without one.)"""
        snapshot = json.loads(self.get("checkpoint_manager_snapshot.json"))
        entries = zip(snapshot["checkpoint_results"], snapshot["checkpoint_report_indices"],
                      strict=True)  # fmt: skip
        for result, _ in sorted(entries, key=lambda e: e[1], reverse=True):
            name = str(result["checkpoint_dir_name"])
            if self.exists(f"{name}/.raytrain/manifest.json"):
                return name
        raise AssertionError(f"no checkpoint of {snapshot} has a manifest")

    def manifest(self, name: str) -> ck.Manifest:
        return ck.Manifest.model_validate_json(self.get(f"{name}/.raytrain/manifest.json"))

    def largest(self, name: str) -> str:
        return max(self.manifest(name).files, key=lambda f: f.size).path

    def dirs(self) -> set[str]:
        pages = self.s3.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=f"{self.prefix}/checkpoint_"
        )
        keys = [o["Key"][len(self.prefix) + 1 :] for p in pages for o in p.get("Contents", [])]
        return {k.split("/", 1)[0] for k in keys if "/" in k}


def _head(world: RealWorld, namespace: str, name: str) -> dict[str, Any]:
    cluster_name = _trainjob(world, namespace, name)["status"]["rayClusterName"]
    (head,) = [
        p
        for p in _ray_pods(world, namespace, cluster_name)
        if p["metadata"]["labels"].get("ray.io/node-type") == "head"
    ]
    return head


def _kill_head(world: RealWorld, namespace: str, name: str) -> None:
    """Delete the head pod and wait until it is gone: Ray Train's controller died with it, so
    the snapshot in the bucket is the one the retry reads."""
    pod = _head(world, namespace, name)["metadata"]["name"]
    world.cluster.kubectl("delete", "pod", pod, "-n", namespace, "--wait=true",
                          "--grace-period=1", "--timeout=120s", timeout=180)  # fmt: skip


def _wait_report(world: RealWorld, namespace: str, name: str, ok: Any, what: str) -> dict[str, Any]:
    return wait_for(  # type: ignore[no-any-return]
        lambda: t if ok(t := _trainjob(world, namespace, name)) else None,
        timeout=START_TIMEOUT + TRAIN_TIMEOUT,
        what=what,
        interval=1.0,
    )


def _apply(world: RealWorld, namespace: str, name: str) -> None:
    for doc in trainjob_on_real_node(DIGITS, name=name, epochs=EPOCHS):
        if doc.get("kind") == "TrainJob":
            doc["spec"]["backoffLimit"] = 3
            # Room to fall back past a damaged checkpoint and one the kill left unfinished.
            doc["spec"]["checkpoint"]["numToKeep"] = 4
        world.cluster.apply(doc, namespace=namespace)


@pytest.mark.realpods_faults
@pytest.mark.realpods_damaged_checkpoints
def test_a_retry_passes_over_a_truncated_then_a_deleted_latest_file_and_keeps_both(
    real_world: RealWorld, namespace: str
) -> None:
    name = "damaged"
    _apply(real_world, namespace, name)
    tj = _wait_report(real_world, namespace, name,
                      lambda t: (t.get("status", {}).get("checkpoint", {}).get("count", 0) >= 3),
                      "3 checkpoints")  # fmt: skip
    bucket = RunBucket(real_world, _run_name(tj))
    uri = f"s3://raytrain/{bucket.prefix}"

    damaged = []
    for n, damage in ((1, "truncate"), (2, "delete")):
        before = _trainjob(real_world, namespace, name)
        ended = condition(before, "Succeeded")
        assert not (ended and ended["status"] == "True"), "training ended before the fault"
        previous_start = _start_epoch(before)
        _kill_head(real_world, namespace, name)
        latest = bucket.newest_with_manifest()
        epoch = bucket.manifest(latest).epoch
        victim = f"{latest}/{bucket.largest(latest)}"
        key = f"{bucket.prefix}/{victim}"
        if damage == "truncate":
            body = bucket.get(victim)
            bucket.s3.put_object(Bucket="raytrain", Key=key, Body=body[: len(body) // 2])
        else:
            bucket.s3.delete_object(Bucket="raytrain", Key=key)
        damaged.append(latest)

        # The next driver (KubeRay resubmits it to the new head, or the operator retries with a
        # new RayJob: either way it starts from storage) checks the run before it trains...
        def rejected(t: dict[str, Any], u: str = f"{uri}/{latest}") -> dict[str, Any] | None:
            entries = t["status"].get("checkpoint", {}).get("rejected") or []
            return next((e for e in entries if e["uri"] == u), None)

        tj = _wait_report(real_world, namespace, name, rejected,
                          f"the next driver's check to pass over {latest}")  # fmt: skip
        status = tj["status"]["checkpoint"]
        entry = rejected(tj)
        assert entry is not None
        assert entry["problem"] == ("size" if damage == "truncate" else "missing")
        assert bucket.largest(latest) in entry["reason"]
        assert status["resumedFrom"] != f"{uri}/{latest}"
        assert status["latestURI"] != f"{uri}/{latest}"
        # The newest checkpoint before the damaged one that Ray Train kept (numToKeep ranks
        # them by accuracy here, so it may be more than one epoch back).
        resumed_epoch = bucket.manifest(status["resumedFrom"].rsplit("/", 1)[-1]).epoch
        assert resumed_epoch is not None and resumed_epoch < epoch
        # ...and trains on from that checkpoint: not from the damaged one (that would start at
        # its epoch + 1), not from scratch.
        tj = _wait_report(
            real_world, namespace, name,
            lambda t, p=previous_start: _start_epoch(t) not in (0, p),
            "a report of the resumed run",
        )  # fmt: skip
        assert _start_epoch(tj) == resumed_epoch + 1, (epoch, resumed_epoch, _start_epoch(tj))
        if n == 1:
            count = tj["status"]["checkpoint"]["count"]
            _wait_report(real_world, namespace, name,
                         lambda t, c=count: t["status"].get("checkpoint", {}).get("count", 0)
                         >= c + 2,
                         "2 more checkpoints")  # fmt: skip

    done = wait_condition(real_world.cluster, namespace, name, "Succeeded",
                          START_TIMEOUT + TRAIN_TIMEOUT)  # fmt: skip
    assert done["status"]["trainerStatus"]["epoch"] == EPOCHS - 1
    problems = {r["uri"].rsplit("/", 1)[-1]: r["problem"]
                for r in done["status"]["checkpoint"]["rejected"]}  # fmt: skip
    assert (problems[damaged[0]], problems[damaged[1]]) == ("size", "missing"), problems
    # Any other entry is a checkpoint the kill itself left without its manifest.
    assert set(problems.values()) <= {"size", "missing", "no-manifest"}, problems
    # Kept: both damaged checkpoints are in the bucket, each marked with why.
    for d in damaged:
        assert d in bucket.dirs()
        assert bucket.exists(f"{d}/.raytrain/rejected.json")
    events = real_world.cluster.kubectl(
        "get", "events", "-n", namespace, "--field-selector",
        f"involvedObject.name={name},reason=CheckpointRejected", "-o", "json",
    )  # fmt: skip
    messages = [e["message"] for e in json.loads(events.stdout)["items"]]
    assert any(damaged[0] in m for m in messages), messages
    _end(real_world, namespace, name)


def _run_name(tj: dict[str, Any]) -> str:
    return str(
        tj["status"].get("runName") or run_name(tj["metadata"]["name"], tj["metadata"]["uid"])
    )


@pytest.mark.realpods_faults
@pytest.mark.realpods_manifest_window
def test_a_head_killed_before_the_manifest_leaves_a_checkpoint_the_retry_passes_over(
    real_world: RealWorld, namespace: str
) -> None:
    name = "unfinished"
    delay = {"name": "RAYTRAIN_TEST_MANIFEST_DELAY_S", "value": "30"}
    docs = trainjob_on_real_node(DIGITS, name=name, epochs=6)
    for doc in docs:
        if doc.get("kind") == "TrainJob":
            doc["spec"]["backoffLimit"] = 2
            doc["spec"]["head"]["env"] = [delay]
        real_world.cluster.apply(doc, namespace=namespace)
    tj = wait_for(
        lambda: t if (t := _trainjob(real_world, namespace, name)).get("status", {}).get(
            "checkpoint", {}).get("count", 0) >= 1 else None,
        timeout=START_TIMEOUT + TRAIN_TIMEOUT, what="the first checkpoint", interval=1.0,
    )  # fmt: skip
    bucket = RunBucket(real_world, _run_name(tj))
    first = tj["status"]["checkpoint"]["latestURI"].rsplit("/", 1)[-1]
    # Read now: numToKeep retires this checkpoint once the resumed run has saved two more.
    first_epoch = bucket.manifest(first).epoch
    assert first_epoch is not None

    def in_the_window() -> str | None:
        latest = bucket.latest()
        if latest == first:
            return None
        has_part = bucket.exists(f"{latest}/.raytrain/part-0.json")
        has_manifest = bucket.exists(f"{latest}/.raytrain/manifest.json")
        return latest if has_part and not has_manifest else None

    # Ray Train registered the second checkpoint (its snapshot names it), every file and the
    # rank's part are stored, the manifest is not yet written: kill the head now.
    unfinished = wait_for(in_the_window, timeout=TRAIN_TIMEOUT, what="a checkpoint registered "
                          "and waiting for its manifest", interval=0.5)  # fmt: skip
    _kill_head(real_world, namespace, name)
    assert not bucket.exists(f"{unfinished}/.raytrain/manifest.json")
    tj = _wait_report(
        real_world, namespace, name,
        lambda t: t["status"].get("checkpoint", {}).get("rejected") and _start_epoch(t) > 0,
        "the next driver's first report",
    )  # fmt: skip
    entry = tj["status"]["checkpoint"]["rejected"][-1]
    assert entry["uri"].endswith(f"/{unfinished}") and entry["problem"] == "no-manifest"
    assert tj["status"]["checkpoint"]["resumedFrom"].endswith(f"/{first}")
    assert _start_epoch(tj) == first_epoch + 1
    assert unfinished in bucket.dirs()
    _end(real_world, namespace, name)
