"""A hung rank and a slow rank, made for real: two gloo workers on a local Ray (CPU), the
runtime as the pods run it, and the operator's state machine fed the status the runtime wrote.

- One rank sleeps before an all_reduce the other has entered: the controller's hang watch
  fires at the contract's hangTimeoutSeconds, every rank's stacks are read (sys._current_frames:
  no ptrace), stacks.txt is stored beside driver.log, trainerStatus.hang groups the ranks, and
  the operator's condition message names the odd rank out first. The rank then wakes up, the
  next report clears the hang and the run succeeds.
- One rank sleeps a little before each all_reduce: it is named the straggler within a few
  reports; with equal ranks none is named over 60 reports.

The storage is a local directory (the PVC shape), so no S3 server is started; Ray is started
once for the module (or the session's, when another module started it first).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from raytrain_contract import load_contract
from raytrain_contract.api.v1alpha1 import TrainJob
from raytrain_contract.meta import Meta
from raytrain_contract.timefmt import parse_rfc3339
from raytrain_operator.status import machine
from raytrain_operator.status.conditions import find
from trainer_runtime.local import run_local
from trainer_runtime.reporter import RecordingTransport

pytestmark = [pytest.mark.runtime]

REPO = Path(__file__).resolve().parents[2]
LOOPS = "tests/runtime/loops.py"


@pytest.fixture(scope="module", autouse=True)
def ray_cpu() -> Iterator[None]:
    import ray

    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    os.chdir(REPO)
    if ray.is_initialized():  # the session's (tests/runtime/conftest.py): reused, kept
        yield
        return
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


META = Meta(name="digits", namespace="team-a", uid="u-1", generation=1)
#: The RayJob of attempt 0 as KubeRay shows it while its Ray job runs.
RAYJOB = {
    "metadata": {"name": "digits-0", "ownerReferences": [{"uid": "u-1"}], "annotations": {}},
    "spec": {"suspend": False},
    "status": {
        "jobDeploymentStatus": "Running",
        "jobStatus": "RUNNING",
        "startTime": "2000-01-01T00:00:00Z",
    },
}
NOW_UNKNOWN = datetime(2000, 1, 1, tzinfo=timezone.utc)


def trainjob(failure: dict[str, Any]) -> TrainJob:
    """The TrainJob the operator would have for these runs."""
    return TrainJob.model_validate(
        {
            "metadata": {"name": "digits", "namespace": "team-a", "uid": "u-1", "generation": 1},
            "spec": {
                "image": "raytrain/trainer-runtime:0.1.0",
                "entrypoint": "tests/runtime/loops.py:hang_loop",
                "scaling": {"numWorkers": 2},
                "storage": {"pvc": {"claimName": "shared"}},
                "failure": failure,
                "backoffLimit": 2,
            },
        }
    )


def trainer_statuses(sink: RecordingTransport) -> list[dict[str, Any]]:
    return [dict(p["status"]["trainerStatus"]) for p in sink.patches]


def test_a_rank_that_never_reaches_the_all_reduce_is_found_dumped_and_named(
    make_doc: Any, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    doc = make_doc(
        entrypoint=f"{LOOPS}:hang_loop",
        config={"steps": 6, "hang_rank": 1, "hang_at": 3, "hang_seconds": 40},
        storage={"type": "pvc", "path": str(store)},
    )
    doc["failure"]["hangTimeoutSeconds"] = 8
    sink = RecordingTransport()
    assert run_local(load_contract(doc), display=False, transport=sink, min_interval=0) == 0

    statuses = trainer_statuses(sink)
    hung = [s for s in statuses if s.get("hang")]
    assert hung, json.dumps(statuses[-3:], indent=1)
    report = hung[0]
    found = report["hang"]
    # For this stall: taken once no report came for the timeout, after step 3's predecessor.
    assert found["since"] == report["lastProgressTime"]
    taken, since = parse_rfc3339(found["time"]), parse_rfc3339(found["since"])
    assert taken is not None and since is not None
    assert 8 <= (taken - since).total_seconds() < 40, found
    assert found["workers"] == 2 and found["timeoutSeconds"] == 8
    groups = found["groups"]
    assert [g["ranks"] for g in groups] == [[1], [0]], groups
    assert groups[0]["waiting"] is False and "in hang_loop (time.sleep(" in groups[0]["where"]
    assert groups[0]["where"].startswith("at runtime/loops.py:")
    assert groups[1]["waiting"] is True
    assert groups[1]["where"].startswith("in torch.distributed all_reduce, called at runtime/loops")
    assert [s["rank"] for s in found["suspects"]] == [1]

    # Every rank's stacks, stored beside the driver's log.
    attempt = store / doc["runName"] / "attempt-0"
    assert found["stacks"] == str(attempt / "stacks.txt")
    text = (attempt / "stacks.txt").read_text()
    assert "Where the ranks were: rank 1 at runtime/loops.py:" in text
    assert "Not waiting on the others (the likely cause): rank 1." in text
    for rank in (0, 1):
        section = text.split(f"=== rank {rank}: ", 1)[1].split("\n=== rank ", 1)[0]
        assert "[the training loop]" in section and "in hang_loop" in section, section[:2000]
    assert "dist.all_reduce(tensor)" in text and "time.sleep(float(" in text
    print("\n--- stacks.txt (head) ---\n" + "\n".join(text.splitlines()[:8]))

    # The rank woke up: the next report cleared the hang, and the run went on to the end.
    after = statuses[statuses.index(report) + 1 :]
    assert any("hang" in s and s["hang"] is None for s in after), after[:3]
    assert statuses[-1]["phase"] == "Succeeded"

    # What the operator makes of that report: the attempt is hung, the odd rank out first.
    plan = machine.plan(
        machine.Observation(
            meta=META,
            trainjob=trainjob({"hangTimeoutSeconds": 8}),
            status={"attempt": 0, "restarts": 0, "trainerStatus": report},
            now=taken,
            rayjob=RAYJOB,
        )
    )
    assert plan.attempt_failure is not None and plan.attempt_failure.reason == "Hung"
    message = (find(plan.status["conditions"], "Reconciling") or {}).get("message", "")
    assert message.startswith("attempt 0 failed (Hung: no training report for "), message
    assert "Where the ranks were: rank 1 at runtime/loops.py:" in message
    assert "; rank 0 in torch.distributed all_reduce, called at runtime/loops.py:" in message
    assert "likely cause: rank 1" in message
    assert "raytrain logs digits --attempt 0 --stacks" in message
    print(f"\n--- the operator's message ---\n{message}")


def test_a_rank_slower_before_each_all_reduce_is_named_the_straggler(
    make_doc: Any, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    doc = make_doc(
        entrypoint=f"{LOOPS}:steps_loop",
        config={"steps": 20, "slow_rank": 1, "slow_seconds": 0.4},
        storage={"type": "pvc", "path": str(store)},
    )
    sink = RecordingTransport()
    assert run_local(load_contract(doc), display=False, transport=sink, min_interval=0) == 0
    steps = [s["stepTime"] for s in trainer_statuses(sink) if s.get("stepTime")]
    named = [s for s in steps if s["straggler"]]
    assert named, steps[-3:]
    first = named[0]
    assert first["slowest"]["rank"] == 1 and first["skewPercent"] >= 20, first
    # Within a few reports: the window, and the ranks' samples come in batches.
    reports = [
        s.get("step") for s in trainer_statuses(sink) if (s.get("stepTime") or {}).get("straggler")
    ]
    assert reports and reports[0] <= 14, reports
    print(f"\nrank 1 named the straggler at report {reports[0]}: {first}")
    # What the operator makes of it: the Straggling condition.
    named_status = next(
        s for s in trainer_statuses(sink) if (s.get("stepTime") or {}).get("straggler")
    )
    plan = machine.plan(
        machine.Observation(
            meta=META,
            trainjob=trainjob({}),
            status={"attempt": 0, "restarts": 0, "trainerStatus": named_status},
            now=parse_rfc3339(named_status["lastUpdatedTime"]) or NOW_UNKNOWN,
            rayjob=RAYJOB,
        )
    )
    slow = find(plan.status["conditions"], "Straggling") or {}
    assert slow.get("status") == "True", plan.status["conditions"]
    assert str(slow.get("message", "")).startswith("rank 1 (pod "), slow
    print(f"--- the operator's Straggling condition ---\n{slow.get('message')}")
    lines = (store / doc["runName"] / "attempt-0" / "steps.jsonl").read_text().splitlines()
    rounds = [json.loads(line) for line in lines]
    assert len(rounds) >= 15 and all(r["busy"]["1"] > r["busy"]["0"] for r in rounds[2:])


def test_equal_ranks_are_never_named_over_sixty_reports(make_doc: Any, tmp_path: Path) -> None:
    doc = make_doc(
        entrypoint=f"{LOOPS}:steps_loop",
        config={"steps": 62},
        storage={"type": "pvc", "path": str(tmp_path / "store")},
    )
    sink = RecordingTransport()
    assert run_local(load_contract(doc), display=False, transport=sink, min_interval=0) == 0
    steps = [s["stepTime"] for s in trainer_statuses(sink) if s.get("stepTime")]
    assert steps and max(s["reports"] for s in steps) == 5
    assert not [s for s in steps if s["straggler"]], [s for s in steps if s["straggler"]][:2]
    skews = sorted(s["skewPercent"] for s in steps)
    median, top = skews[len(skews) // 2], skews[-1]
    print(f"\nthe slowest rank's skew over {len(steps)} reports: median {median}%, max {top}%")
