"""A training folder as a user keeps it, for the tests that submit code with `--code`."""

from __future__ import annotations

import textwrap
from pathlib import Path


def user_project(root: Path, answer: int = 41) -> Path:
    """A package, a helper module, data the loop opens by a relative path and a file
    .gitignore leaves out. The loop resumes from its checkpoint and sleeps config["sleep"]
    seconds an epoch (0 when unset)."""
    (root / "mytrain").mkdir(parents=True, exist_ok=True)
    (root / "mytrain" / "__init__.py").write_text("")
    (root / "mytrain" / "helper.py").write_text(f"def answer() -> int:\n    return {answer}\n")
    (root / "mytrain" / "loop.py").write_text(
        textwrap.dedent(
            """
            import pathlib
            import tempfile
            import time

            import ray.train

            from mytrain.helper import answer


            def train(config):
                offset = int(pathlib.Path("data/offset.txt").read_text())
                start = 0
                checkpoint = ray.train.get_checkpoint()
                if checkpoint:
                    with checkpoint.as_directory() as d:
                        start = int(pathlib.Path(d, "epoch").read_text()) + 1
                rank = ray.train.get_context().get_world_rank()
                for epoch in range(start, config["epochs"]):
                    time.sleep(config.get("sleep", 0))
                    metrics = {"answer": answer() + offset, "epoch": epoch}
                    if rank == 0:
                        with tempfile.TemporaryDirectory() as d:
                            pathlib.Path(d, "epoch").write_text(str(epoch))
                            ray.train.report(metrics, ray.train.Checkpoint.from_directory(d))
                    else:
                        ray.train.report(metrics)
            """
        )
    )
    (root / "data").mkdir(exist_ok=True)
    (root / "data" / "offset.txt").write_text("1")
    (root / "data" / "weights.bin").write_bytes(b"\0" * 4096)
    (root / ".gitignore").write_text("*.bin\n")
    return root
