"""status.goodput, pass by pass on a fake clock: a GPU job whose first attempt fails after a
checkpoint and whose second resumes from it and succeeds."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from _factories import manifest, meta
from test_triage import pod

from raytrain_contract.api.v1alpha1 import TrainJob, TrainJobStatus
from raytrain_contract.timefmt import rfc3339
from raytrain_operator.builders.rayjob import build_rayjob
from raytrain_operator.status import goodput as g
from raytrain_operator.status import machine as m

T0 = datetime(2026, 11, 22, 8, 0, 0, tzinfo=timezone.utc)
LOST = pod(phase="Failed", reason="NodeLost", message="Node node-a is unresponsive")


@pytest.fixture(autouse=True)
def every_pass_writes(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """The accounting tests look at every pass: no refresh interval, unless a test is about it."""
    if "refresh" not in request.node.name:
        monkeypatch.setattr(g, "REFRESH_SECONDS", 0.0)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def ts(seconds: float) -> str:
    return rfc3339(at(seconds))


def job(**spec: Any) -> TrainJob:
    scaling = {"numWorkers": 2, "useGpu": True, "resourcesPerWorker": {"cpu": "1", "gpu": 1}}
    return TrainJob.model_validate(manifest(**{"scaling": scaling, "backoffLimit": 1, **spec}))


class Job:
    """The TrainJob's status as the passes leave it, and the RayJob of its attempt."""

    def __init__(self, trainjob: TrainJob) -> None:
        self.tj = trainjob
        self.status: dict[str, Any] = {}
        self.rj: dict[str, Any] | None = None

    def cluster(self, attempt: int, start: float, **status: Any) -> None:
        body = build_rayjob(self.tj, meta(), attempt, suspend=False)
        body["status"] = {
            "jobDeploymentStatus": "Running",
            "jobStatus": "RUNNING",
            "startTime": ts(start),
            **status,
        }
        self.rj = body

    def report(self, attempt: int, when: float, phase: str = "Running", **ckpt: Any) -> None:
        self.status["trainerStatus"] = {
            "phase": phase,
            "attempt": attempt,
            "lastUpdatedTime": ts(when),
            "message": "",
        }
        if ckpt:
            self.status["checkpoint"] = {**(self.status.get("checkpoint") or {}), **ckpt}

    def tick(self, now: float, **kw: Any) -> m.Plan:
        p = m.plan(
            m.Observation(
                meta=meta(), trainjob=self.tj, status=self.status, now=at(now), rayjob=self.rj, **kw
            )
        )
        for key, value in p.status.items():
            if value is None:
                self.status.pop(key, None)
            else:
                self.status[key] = value
        return p

    @property
    def goodput(self) -> dict[str, Any]:
        return dict(self.status.get("goodput") or {})


def test_a_failed_attempt_and_its_resume() -> None:
    j = Job(job())
    j.cluster(0, start=0)
    j.tick(10)
    assert j.goodput["allocatedSeconds"] == 10.0
    assert j.goodput["productiveSeconds"] == 0.0  # no report yet: nothing seen to be kept
    assert j.goodput["clusters"][0]["gpus"] == 2.0  # two workers of one GPU, a GPU-less head
    j.report(0, 60)
    j.tick(61)
    j.report(0, 100, count=1, latestURI="s3://b/c0", lastTime=ts(100))
    j.tick(101)
    j.report(0, 160)
    p = j.tick(161)
    assert p.phase == "Running"
    assert j.goodput["productiveSeconds"] == 100.0  # 60 -> 160, the attempt still runs
    assert j.goodput["allocatedSeconds"] == 161.0

    # attempt 0 fails at 170 (a node went away); KubeRay ends its RayJob at 175
    j.report(0, 170, phase="Failed")
    assert j.rj is not None
    j.rj["status"].update(jobDeploymentStatus="Failed", jobStatus="FAILED", endTime=ts(175))
    p = j.tick(180, attempt_pods=[LOST])
    assert p.status["attempt"] == 1 and p.phase == "Pending"
    entry = j.goodput["clusters"][0]
    assert (entry["outcome"], entry["end"], entry["lastCheckpoint"]) == (
        "Retried",
        ts(175),
        ts(100),
    )
    assert j.goodput["productiveSeconds"] == 40.0  # 60 -> the checkpoint at 100
    assert j.goodput["lostToRecomputeSeconds"] == 70.0  # the checkpoint at 100 -> 170
    assert j.goodput["lostToRestartSeconds"] == 5.0  # 175 -> this pass, no report since

    # between the attempts: no cluster, the restart loss runs on, nothing is allocated
    j.rj = None
    j.tick(200, older_rayjobs={"digits-0": True})
    assert j.goodput["lostToRestartSeconds"] == 25.0
    assert j.goodput["allocatedSeconds"] == 175.0

    # attempt 1 starts at 220, reports at 280 (the checkpoint time is still attempt 0's)
    j.cluster(1, start=220)
    j.tick(230)
    j.report(1, 280)
    j.tick(281)
    assert j.goodput["lostToRestartSeconds"] == 105.0  # 175 -> 280: fixed from now on
    assert "lastCheckpoint" not in j.goodput["clusters"][1]  # attempt 0's is not this one's
    j.report(1, 340, count=2, latestURI="s3://b/c1", lastTime=ts(340))
    j.tick(341)
    j.report(1, 400, phase="Succeeded")
    j.rj["status"].update(jobDeploymentStatus="Complete", jobStatus="SUCCEEDED", endTime=ts(405))
    p = j.tick(410)
    assert p.phase == "Succeeded"
    got = {k: v for k, v in j.goodput.items() if k not in ("clusters", "earlier")}
    assert got == {
        "asOf": ts(410),
        "allocatedSeconds": 360.0,  # 0 -> 175 and 220 -> 405
        "productiveSeconds": 160.0,  # 60 -> 100 kept of attempt 0, 280 -> 400 of attempt 1
        "lostSeconds": 175.0,
        "lostToRestartSeconds": 105.0,
        "lostToRecomputeSeconds": 70.0,
        "allocatedGPUSeconds": 720.0,
        "productiveGPUSeconds": 320.0,
        # 70 s recomputed on 2 GPUs; of the restart gap 175 -> 280, GPUs held from 220
        "lostGPUSeconds": 260.0,
    }
    assert [c["outcome"] for c in j.goodput["clusters"]] == ["Retried", "Succeeded"]
    TrainJobStatus.model_validate(j.status)  # the status schema holds what the machine wrote

    # a finished job's numbers stay as they are
    j.tick(900)
    assert j.goodput["allocatedSeconds"] == 360.0


def test_the_same_pass_twice_counts_nothing_twice() -> None:
    j = Job(job())
    j.cluster(0, start=0)
    j.report(0, 30)
    j.tick(40)
    first = j.goodput
    j.tick(40)
    assert j.goodput == first


def test_a_runtime_without_checkpoint_times_leaves_kept_and_lost_unknown() -> None:
    j = Job(job())
    j.cluster(0, start=0)
    j.report(0, 60)
    j.tick(61)
    j.report(0, 100, count=1, latestURI="s3://b/c0")  # no lastTime
    j.tick(101)
    assert j.goodput["productiveSeconds"] == 40.0  # a running cluster's reports are kept so far
    j.report(0, 170, phase="Failed")
    assert j.rj is not None
    j.rj["status"].update(jobDeploymentStatus="Failed", jobStatus="FAILED", endTime=ts(175))
    j.tick(180, attempt_pods=[LOST])
    assert j.goodput["allocatedSeconds"] == 175.0
    for key in ("productiveSeconds", "lostSeconds", "lostToRecomputeSeconds", "lostGPUSeconds"):
        assert j.goodput[key] is None, key  # unknown: absent from the status after the patch
    assert j.goodput["lostToRestartSeconds"] == 5.0


def test_a_suspend_is_no_loss() -> None:
    j = Job(job(backoffLimit=0))
    j.cluster(0, start=0)
    j.report(0, 50, count=1, latestURI="s3://b/c0", lastTime=ts(50))
    j.tick(60)
    assert j.rj is not None
    j.rj["spec"]["suspend"] = True
    j.rj["status"].update(jobDeploymentStatus="Suspended")
    j.tick(100)
    entry = j.goodput["clusters"][0]
    assert entry["outcome"] == "Suspended" and entry["end"] == ts(60)  # last seen up
    held = j.goodput
    p = j.tick(150)
    assert p.status["goodput"] == held  # nothing moves while suspended: nothing to write
    assert "earlier" not in held and "lostToRecomputeSeconds" in held
    j.cluster(0, start=500)  # resumed: KubeRay starts a new cluster of the same RayJob
    j.report(0, 560)
    j.tick(600)
    assert [c["outcome"] for c in j.goodput["clusters"]] == ["Suspended", "Running"]
    assert j.goodput["allocatedSeconds"] == 160.0  # 0 -> 60 and 500 -> 600
    assert j.goodput["lostSeconds"] == 0.0 and j.goodput["productiveSeconds"] == 0.0


def test_rayjob_gpus_counts_every_group_times_its_replicas() -> None:
    rj = {
        "spec": {
            "rayClusterSpec": {
                "headGroupSpec": {"template": {"spec": {"containers": [{"resources": {}}]}}},
                "workerGroupSpecs": [
                    {
                        "replicas": 3,
                        "template": {
                            "spec": {
                                "containers": [
                                    {"resources": {"limits": {"nvidia.com/gpu": "2", "cpu": "4"}}}
                                ]
                            }
                        },
                    }
                ],
            }
        }
    }
    assert g.rayjob_gpus(rj) == 6.0


@pytest.mark.parametrize("count", [g.MAX_CLUSTERS + 3])
def test_a_long_ledger_is_folded_without_changing_the_totals(count: int) -> None:
    ledger = []
    for i in range(count):
        base = i * 100
        ledger.append(
            {
                "attempt": i,
                "start": ts(base),
                "end": ts(base + 50),
                "outcome": "Retried" if i < count - 1 else "Succeeded",
                "gpus": 1.0,
                "firstReport": ts(base + 10),
                "lastReport": ts(base + 40),
                "lastCheckpoint": ts(base + 30),
            }
        )
    whole = g.totals(ledger, at(count * 100), False, {})
    folded = g.account({"goodput": {"clusters": ledger}}, None, None, at(count * 100), False)
    assert len(folded["clusters"]) == g.MAX_CLUSTERS
    assert folded["allocatedSeconds"] == whole.allocated
    assert folded["productiveSeconds"] == whole.productive
    assert folded["lostToRestartSeconds"] == whole.lost_restart
    assert folded["lostToRecomputeSeconds"] == whole.lost_recompute
    assert folded["lostGPUSeconds"] == whole.lost_gpu


def test_a_running_job_is_refreshed_only_every_few_minutes_when_only_the_clock_moves() -> None:
    j = Job(job())
    j.cluster(0, start=0)
    j.report(0, when=5)
    writes = []
    previous = None
    for t in range(10, 610, 10):  # a pass every 10 s for 10 minutes, no new report
        j.tick(t)
        if j.goodput != previous:
            writes.append(t)
        previous = j.goodput
    assert writes == [10, 310], writes  # was one per pass (60)
    assert j.goodput["asOf"] == ts(310) and j.goodput["allocatedSeconds"] == 310.0

    # Anything but the clock (a new report, the end) is written at once.
    j.report(0, when=612)
    j.tick(615)
    assert j.goodput["asOf"] == ts(615)
    assert j.goodput["clusters"][0]["lastReport"] == ts(612)
