"""Training loops for the runtime tests, imported as ``tests/runtime/loops.py:<name>``."""

from __future__ import annotations

from typing import Any

import ray.train


def raising_loop(config: dict[str, Any]) -> None:
    ray.train.report({"epoch": 0, "loss": 1.0})
    raise ValueError(f"label tensor has shape {config.get('shape', '(3, 7)')}, expected (64,)")


NOT_CALLABLE = 42
