"""docs/sdk.md's examples run as written, in order, against the real API server.

The test plays the operator between blocks (the job runs, then succeeds, and an Event is posted)
by writing what the operator would write, and checks what the examples print.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from conftest import KubeCluster
from test_sdk import RUNNING, condition, crds, kubeconfig, set_status  # noqa: F401 - fixtures, used by name

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "sdk.md"
FENCE = re.compile(r"^```(?P<info>python[^\n]*)\n(?P<code>.*?)^```$", re.M | re.S)


def examples() -> list[tuple[int, str, str]]:
    """(line, info string, code) of every python block of the page."""
    text = DOC.read_text()
    return [
        (text.count("\n", 0, m.start()) + 2, m["info"].strip(), m["code"])
        for m in FENCE.finditer(text)
    ]


SUCCEEDED = {
    "phase": "Succeeded",
    "completionTime": "2026-11-23T10:30:00Z",
    "trainerStatus": {"progressPercentage": 100, "epoch": 8},
    "conditions": [
        condition("Created", True, "RayJobCreated"),
        condition("Running", False, "Finished"),
        condition("Succeeded", True, "TrainingSucceeded", "8 epochs"),
    ],
}


def test_the_page_has_the_blocks_it_says() -> None:
    infos = [info for _, info, _ in examples()]
    # a typo in a fence would silently drop an example from the run below
    assert set(infos) == {"python", "python notest"}
    assert infos.count("python notest") == 2 and infos.count("python") == 10


def test_every_example_runs_as_written(
    kube_cluster: KubeCluster,
    kubeconfig: Path,  # noqa: F811
    namespace: str,
    crds: None,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))  # its context's namespace is the test's
    monkeypatch.chdir(REPO)  # the page's paths are relative to the checkout
    scope: dict[str, Any] = {"__name__": "docs_sdk"}
    for line, info, code in examples():
        if info != "python":
            continue
        if 'client.get_job("digits")' in code:
            set_status(kube_cluster, namespace, "digits", RUNNING)
        if "wait_for_job_status(" in code:
            set_status(kube_cluster, namespace, "digits", SUCCEEDED)
        if "get_job_events(" in code:
            event = {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"name": "digits-succeeded"},
                "involvedObject": {"kind": "TrainJob", "name": "digits", "namespace": namespace},
                "reason": "TrainingSucceeded",
                "message": "8 epochs",
                "type": "Normal",
                "firstTimestamp": "2026-11-23T10:30:00Z",
                "lastTimestamp": "2026-11-23T10:30:00Z",
            }
            kube_cluster.kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(event))
        exec(compile(code, f"{DOC}:{line}", "exec"), scope)

    out = capsys.readouterr().out
    context = kube_cluster.kubectl(f"--kubeconfig={kubeconfig}", "config", "current-context")
    assert f"{context.stdout.strip()} {namespace}\n" in out
    assert "digits\n" in out  # train() of the file returned the name
    assert "Running 40 3 {'accuracy': '0.91', 'loss': '0.3'}" in out
    assert "attempt 1, restarts 1, cluster digits-1-abcde" in out
    assert "Running True Training epoch 3 of 8" in out
    assert "digits: Succeeded 100%" in out and "Succeeded 2026-11-23 10:30:00+00:00" in out
    latest, best = RUNNING["checkpoint"]["latestURI"], RUNNING["checkpoint"]["bestURI"]  # type: ignore[index]
    assert f"{latest}\n{best} 0.92\n{latest}\n{best}\n" in out
    assert "True\nFalse\n" in out  # suspended, then resumed
    assert "Normal TrainingSucceeded TrainJob digits\n    8 epochs" in out
    names = [j.name for j in scope["client"].list_jobs()]
    assert names == ["digits"]  # the others were deleted by the last example
    assert scope["job"].name == "digits-typed" and not scope["job"].suspended
