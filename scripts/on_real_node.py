"""A manifest's TrainJobs placed on the local cluster's real node (`make up`, `make demo`).

    python scripts/on_real_node.py examples/digits.yaml | kubectl apply -f -

prints the file's objects with, in each TrainJob, what running on `realnode` takes
(docs/real-node.md): the node's toleration and nodeSelector for the head and the workers, and
CPU scaled down to a quarter of a CPU per pod, so that the head, two workers, KubeRay's
submitter and the operator fit the node's CPUs (as many as the machine has; 2 here). Nothing
else changes: memory stays what the file asks, and the head keeps the operator's default memory
when the file gives it none. Other objects (the Secret) are printed as they are.
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path
from typing import Any

import yaml

NODE = "realnode"
NODE_TAINT_KEY = "raytrain.dev/real-node"  # e2e/realnode/node.sh
CPU = "250m"
TOLERATION = {"key": NODE_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}


def default_head_resources() -> dict[str, Any]:
    """The head's resources when a job sets none (the operator's default)."""
    from raytrain_operator.builders.pods import DEFAULT_HEAD_RESOURCES

    return copy.deepcopy(DEFAULT_HEAD_RESOURCES)


def _place(overrides: dict[str, Any]) -> None:
    tolerations = overrides.setdefault("tolerations", [])
    if TOLERATION not in tolerations:
        tolerations.append(dict(TOLERATION))
    overrides.setdefault("nodeSelector", {})["kubernetes.io/hostname"] = NODE


def _scale_cpu(resources: dict[str, Any], cpu: str) -> None:
    for kind in ("requests", "limits"):
        if kind == "requests" or "cpu" in resources.get(kind, {}):
            resources.setdefault(kind, {})["cpu"] = cpu


def on_real_node(
    docs: list[dict[str, Any]], *, epochs: int | None = None, cpu: str = CPU
) -> list[dict[str, Any]]:
    """``docs`` with each TrainJob's pods placed on the real node, CPU scaled to ``cpu``."""
    out = copy.deepcopy(docs)
    for doc in out:
        if doc.get("kind") != "TrainJob":
            continue
        spec = doc.setdefault("spec", {})
        if epochs is not None:
            spec.setdefault("config", {})["epochs"] = epochs
        scaling = spec.setdefault("scaling", {})
        scaling.setdefault("resourcesPerWorker", {})["cpu"] = cpu
        head = spec.setdefault("head", {})
        head["resources"] = head.get("resources") or default_head_resources()
        _scale_cpu(head["resources"], cpu)
        _place(head)
        _place(spec.setdefault("workerTemplate", {}))
    return out


def load(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("file", type=Path, help="a manifest, e.g. examples/digits.yaml")
    parser.add_argument("--epochs", type=int, help="set the loop's config.epochs")
    args = parser.parse_args(argv)
    yaml.safe_dump_all(on_real_node(load(args.file), epochs=args.epochs), sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
