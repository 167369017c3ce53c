"""The runtime's reporter against a real API server: merge patches on the status subresource.

The TrainJob is created directly with kubectl (no operator runs here). The reporter's clock is a
fake one so the throttle is exercised without waiting; the patches are real HTTP requests.
"""

from __future__ import annotations

from typing import Any

import pytest
from _clock import FakeClock

from trainer_runtime.kube import KubernetesTransport
from trainer_runtime.reporter import Reporter

pytestmark = pytest.mark.integration

TRAINJOB = """
apiVersion: raytrain.dev/v1alpha1
kind: TrainJob
metadata:
  name: digits
spec:
  image: raytrain/trainer-runtime:0.1.0
  entrypoint: examples.digits.train:train_loop_per_worker
  config: {epochs: 10, lr: 0.05}
  scaling: {numWorkers: 2, useGpu: false}
  storage:
    s3: {uri: "s3://raytrain/checkpoints", region: us-east-1}
"""


def status(cluster: Any, namespace: str) -> dict[str, Any]:
    obj = cluster.get_json("trainjobs.raytrain.dev", "digits", "-n", namespace)
    return dict(obj.get("status") or {})


def test_reports_reach_the_status_throttled_with_the_final_outcome(
    kube_cluster: Any, namespace: str
) -> None:
    kube_cluster.apply(TRAINJOB, namespace=namespace)
    clock = FakeClock(2_000_000_000.0)
    transport = KubernetesTransport(namespace, "digits", kubeconfig=str(kube_cluster.kubeconfig))
    reporter = Reporter(transport, epochs=10, min_interval=5.0, clock=clock,
                        score_attribute="accuracy", score_order="max")  # fmt: skip
    reporter.start()
    for epoch in range(10):
        clock.now += 2.0
        uri = f"s3://raytrain/checkpoints/digits-run/checkpoint_{epoch:06d}"
        reporter.on_report(
            {"epoch": epoch, "loss": 1.0 / (epoch + 1), "accuracy": 0.5 + epoch / 20}, uri
        )
        if epoch == 4:
            mid = status(kube_cluster, namespace)["trainerStatus"]
            assert mid["phase"] == "Running" and 0 < mid["progressPercentage"] < 100
    assert reporter.reports == 10
    # 20 s of reports every 2 s, one patch per 5 s at most: at +0 (start), +6, +12 and +18.
    assert reporter.patches_sent == 4 and reporter.patches_failed == 0
    reporter.finish("Succeeded", "finished: accuracy=0.95")
    assert reporter.patches_sent == 5

    st = status(kube_cluster, namespace)
    ts = st["trainerStatus"]
    assert ts["phase"] == "Succeeded" and ts["message"] == "finished: accuracy=0.95"
    assert (ts["epoch"], ts["step"], ts["progressPercentage"]) == (9, 10, 100)
    assert {m["name"]: m["value"] for m in ts["metrics"]}["accuracy"] == "0.95"
    assert st["checkpoint"]["count"] == 10
    assert st["checkpoint"]["latestURI"].endswith("checkpoint_000009")
    assert st["checkpoint"]["bestURI"].endswith("checkpoint_000009")


def test_checkpoint_request_annotation_round_trip(kube_cluster: Any, namespace: str) -> None:
    kube_cluster.apply(TRAINJOB, namespace=namespace)
    clock = FakeClock(2_000_000_000.0)
    transport = KubernetesTransport(namespace, "digits", kubeconfig=str(kube_cluster.kubeconfig))
    reporter = Reporter(transport, epochs=10, min_interval=0, clock=clock)
    reporter.start()
    clock.now += 1
    reporter.on_report({"epoch": 0}, "s3://raytrain/checkpoints/run/checkpoint_000000")
    kube_cluster.kubectl("annotate", "trainjobs.raytrain.dev", "digits", "-n", namespace,
                         "raytrain.dev/checkpoint-requested=2033-05-18T03:33:22Z")  # fmt: skip
    clock.now += 1
    reporter.on_report({"epoch": 1})
    assert status(kube_cluster, namespace)["trainerStatus"]["checkpointing"] is True
    clock.now += 1
    reporter.on_report({"epoch": 2}, "s3://raytrain/checkpoints/run/checkpoint_000002")
    st = status(kube_cluster, namespace)
    assert st["trainerStatus"]["checkpointing"] is False
    assert st["checkpoint"]["latestURI"].endswith("checkpoint_000002")
    reporter.finish("Failed", "training failed: worker 1: ValueError: bad shape")
    ts = status(kube_cluster, namespace)["trainerStatus"]
    assert ts["phase"] == "Failed" and "ValueError: bad shape" in ts["message"]
