"""The SDK and CLI install alone, as on a user's laptop: `pip install ./contract ./sdk` into a
fresh virtualenv brings neither kopf, nor Ray, nor torch, nor the operator, and `raytrain --help`
and `import raytrain` work there.

Packages come from the wheelhouse e2e/images/build.sh fills from constraints.txt when there is
one (the tests' network namespace has no network), else from PyPI; with neither, the test is
skipped. Both the wheelhouse and constraints.txt are resolved for CPython 3.11, the images'
Python: on any other Python (`make check`'s other versions) the packages come from PyPI,
unconstrained, as on a user's laptop. The three directories are copied first, so the in-place
builds leave the clone as it was. About 30 s, most of it pip.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("RAYTRAIN_CACHE", Path.home() / ".cache" / "raytrain"))
WHEELS = CACHE / "wheels"
#: What the SDK must never pull in (sdk/pyproject.toml; the import contract says the same).
HEAVY = {"kopf", "ray", "torch", "raytrain-operator"}


#: The Python the wheelhouse and constraints.txt are resolved for (the images').
PINNED = (3, 11)


def _index() -> list[str]:
    """pip's arguments for where the packages come from, and under which constraints."""
    pinned = sys.version_info[:2] == PINNED
    constraints = ["-c", str(ROOT / "constraints.txt")] if pinned else []
    if pinned and any(WHEELS.glob("*.whl")):
        return ["--no-index", "--find-links", str(WHEELS), *constraints]
    try:
        socket.create_connection(("pypi.org", 443), timeout=5).close()
    except OSError:
        pytest.skip(
            "no PyPI, and no wheelhouse for this Python (e2e/images/build.sh fills "
            "~/.cache/raytrain/wheels for CPython 3.11)"
        )
    return constraints


def test_the_sdk_installs_alone_without_kopf_ray_or_torch(tmp_path: Path) -> None:
    index = _index()
    source = tmp_path / "src"
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "build")
    for part in ("contract", "raytrain_contract", "sdk"):
        shutil.copytree(ROOT / part, source / part, ignore=ignore)
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    # Only what this test names: no pip configuration or PIP_* variables of the machine.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1")
    install = subprocess.run(
        [python, "-m", "pip", "install", "--quiet", *index, source / "contract", source / "sdk"],
        capture_output=True, text=True, env=env, timeout=600, check=False,
    )  # fmt: skip
    assert install.returncode == 0, install.stdout + install.stderr

    listed = subprocess.run(
        [python, "-m", "pip", "list", "--format=json"],
        capture_output=True, text=True, env=env, timeout=120, check=True,
    )  # fmt: skip
    installed = {p["name"].lower().replace("_", "-") for p in json.loads(listed.stdout)}
    assert {"raytrain", "raytrain-contract", "kubernetes"} <= installed
    assert not installed & HEAVY, f"the SDK pulled in {sorted(installed & HEAVY)}"

    cli = subprocess.run(
        [env_dir / "bin" / "raytrain", "--help"],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip
    assert cli.returncode == 0, cli.stderr
    assert cli.stdout.startswith("usage: raytrain ")
    sdk = subprocess.run(
        [python, "-c", "import raytrain, raytrain.cli.cluster; print(raytrain.TrainJobClient)"],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip
    assert sdk.returncode == 0, sdk.stderr
