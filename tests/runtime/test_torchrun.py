"""`raytrain run examples/digits.yaml --local --torchrun`: two processes under torchrun, no Ray.

The digits loop runs unchanged in Ray Train's local mode: torchrun starts the processes, Ray
Train sets up gloo from torchrun's environment, ``prepare_data_loader`` shards the data.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.runtime

REPO = Path(__file__).resolve().parents[2]
DIGITS = REPO / "examples" / "digits.yaml"


def test_torchrun_trains_the_digits_example_to_the_end_in_two_processes(tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "raytrain.cli", "run", str(DIGITS), "--local",
            "--torchrun", "--epochs", "3", "--storage-path", str(tmp_path / "store")]  # fmt: skip
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)  # fmt: skip
    try:
        output, _ = proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        pytest.fail(f"raytrain run --torchrun did not end in 300 s:\n{output[-3000:]}")
    assert proc.returncode == 0, output[-3000:]
    assert "torchrun: 2 processes" in output
    # Each process reports its own world rank and the shared world size.
    ranks = set(re.findall(r"rank (\d) of 2 done", output))
    assert ranks == {"0", "1"}, output[-3000:]
    finished = re.search(r"run \S+ finished: (.*)", output)
    assert finished, output[-3000:]
    metrics = dict(kv.split("=") for kv in finished.group(1).split(", "))
    assert metrics["epoch"] == "2"
    assert float(metrics["accuracy"]) >= 0.8, metrics
