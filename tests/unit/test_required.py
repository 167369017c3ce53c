"""The "required run" policy of tests/_required.py: who is required, and the session check
that fails a required run with an unlisted skip (run on tiny test files in a child pytest)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from _required import ALLOWED_SKIPS, RequiredSkips, required

TESTS = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, False),
        ({"CI": ""}, False),
        ({"CI": "0"}, False),
        ({"CI": "false"}, False),
        ({"CI": "False"}, False),
        ({"CI": "no"}, False),
        ({"CI": "1"}, True),
        ({"CI": "true"}, True),
        ({"CI": "TRUE"}, True),
        ({"CI": "yes"}, True),
        ({"RAYTRAIN_REQUIRE_ALL": "1"}, True),
        ({"RAYTRAIN_REQUIRE_ALL": "0"}, False),
        ({"CI": "false", "RAYTRAIN_REQUIRE_ALL": "1"}, True),
    ],
)
def test_who_is_required(env: dict[str, str], expected: bool) -> None:
    assert required(env) is expected


def test_every_allowed_skip_says_why() -> None:
    RequiredSkips(ALLOWED_SKIPS)  # raises on an entry without a reason
    with pytest.raises(ValueError, match=r"ALLOWED_SKIPS: \['tests/x.py::t'\] have no"):
        RequiredSkips({"tests/x.py::t": "  "})


SAMPLE = """
import pytest

def test_runs():
    assert True

def test_needs_a_tool():
    pytest.skip("the tool is not installed")

@pytest.mark.xfail(strict=True, reason="a known defect")
def test_known_defect():
    assert False
"""

SAMPLE_MODULE_SKIP = """
import pytest
pytest.importorskip("a_module_that_does_not_exist_anywhere")

def test_never_collected():
    assert True
"""


def _run(
    tmp_path: Path, source: str, env: dict[str, str], allowed: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_sample.py").write_text(textwrap.dedent(source))
    (tmp_path / "conftest.py").write_text(
        "from _required import RequiredSkips\n\n"
        "def pytest_configure(config):\n"
        f"    config.pluginmanager.register(RequiredSkips({allowed or {}!r}), 'required')\n"
    )
    base = {k: v for k, v in os.environ.items() if k not in ("CI", "RAYTRAIN_REQUIRE_ALL")}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", str(tmp_path)],
        cwd=tmp_path,
        env={**base, "PYTHONPATH": str(TESTS), **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_required_run_with_an_unlisted_skip_fails(tmp_path: Path) -> None:
    proc = _run(tmp_path, SAMPLE, {"CI": "1"})
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "skips not allowed in a required run" in out
    assert "test_sample.py::test_needs_a_tool: the tool is not installed" in out
    # The xfail ran and failed as expected: it is not a skip.
    assert "test_known_defect" not in out.split("skips not allowed")[1]


def test_a_module_level_skip_fails_a_required_run(tmp_path: Path) -> None:
    proc = _run(tmp_path, SAMPLE_MODULE_SKIP, {"RAYTRAIN_REQUIRE_ALL": "1"})
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "test_sample.py: could not import 'a_module_that_does_not_exist_anywhere'" in out


def test_an_allowed_skip_passes_a_required_run(tmp_path: Path) -> None:
    allowed = {"test_sample.py::test_needs_a_*": "the tool exists only on GPU machines"}
    proc = _run(tmp_path, SAMPLE, {"CI": "true"}, allowed)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "skips not allowed" not in proc.stdout


def test_a_run_that_is_not_required_may_skip(tmp_path: Path) -> None:
    proc = _run(tmp_path, SAMPLE, {"CI": "false"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 passed, 1 skipped, 1 xfailed" in proc.stdout
    assert "skips not allowed" not in proc.stdout


def test_a_failing_run_keeps_its_own_exit_status(tmp_path: Path) -> None:
    proc = _run(tmp_path, SAMPLE + "\ndef test_broken():\n    assert False\n", {"CI": "1"})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "1 failed" in proc.stdout
