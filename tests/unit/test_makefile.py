"""`make install`, which `make demo` and `make test` run first: it installs once, again only when
pyproject.toml, constraints.txt or the interpreter changes, and pins with constraints.txt when
that file exists. The examples' framework packages (examples/requirements-frameworks.txt) are a
second install with its own stamp: a change to that file installs them alone again. Run on a copy
of the Makefile with a stand-in `python` that records pip calls.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make")

#: Records `python -m pip ...` instead of installing, and answers the Makefile's question for
#: sys.prefix and sys.version (which key the stamp) from the file `interpreter` beside it.
FAKE_PYTHON = """#!/usr/bin/env bash
here="$(dirname "$0")"
if [ "$1" = "-m" ] && [ "$2" = "pip" ]; then
  echo "$*" >> "$here/pip-calls"
  exit 0
fi
if [ "$1" = "-c" ]; then
  cat "$here/interpreter"
  exit 0
fi
echo "unexpected: python $*" >&2
exit 1
"""


FRAMEWORKS = "examples/requirements-frameworks.txt"
PROJECT = "-m pip install -e .[dev,runtime]"
EXAMPLES = f"-m pip install -r {FRAMEWORKS}"


@pytest.fixture
def clone(tmp_path: Path) -> Path:
    shutil.copy(ROOT / "Makefile", tmp_path / "Makefile")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    (tmp_path / "examples").mkdir()
    shutil.copy(ROOT / FRAMEWORKS, tmp_path / FRAMEWORKS)
    fake = tmp_path / "python"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(0o755)
    (tmp_path / "interpreter").write_text("/venvs/a 3.11.7\n")
    return tmp_path


def install(clone: Path) -> list[str]:
    """Run `make install` in the copy; the pip calls made so far."""
    proc = subprocess.run(
        ["make", "-s", "install", f"PYTHON={clone / 'python'}"],
        cwd=clone,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    calls = clone / "pip-calls"
    return calls.read_text().splitlines() if calls.exists() else []


def test_installs_once_then_costs_nothing(clone: Path) -> None:
    assert install(clone) == [PROJECT, EXAMPLES]
    assert install(clone) == [PROJECT, EXAMPLES]
    stamps = sorted(p.name.split("-")[0] for p in (clone / ".make").iterdir())
    assert stamps == ["frameworks", "install"]


def test_a_changed_frameworks_file_installs_only_the_frameworks_again(clone: Path) -> None:
    install(clone)
    with (clone / FRAMEWORKS).open("a") as f:
        f.write("# a change\n")
    assert install(clone)[2:] == [EXAMPLES]
    assert len(list((clone / ".make").iterdir())) == 2


def test_a_changed_pyproject_installs_again_and_keeps_one_stamp(clone: Path) -> None:
    install(clone)
    with (clone / "pyproject.toml").open("a") as f:
        f.write("\n# a change\n")
    assert install(clone)[2:] == [PROJECT, EXAMPLES]
    assert len(list((clone / ".make").iterdir())) == 2


def test_constraints_pin_the_install_and_key_the_stamp(clone: Path) -> None:
    install(clone)
    (clone / "constraints.txt").write_text("kopf==1.45.2\n")
    calls = install(clone)
    assert calls[2:] == [f"{PROJECT} -c constraints.txt", f"{EXAMPLES} -c constraints.txt"]
    (clone / "constraints.txt").write_text("kopf==1.45.1\n")
    assert len(install(clone)) == 6


def test_another_interpreter_gets_its_own_install(clone: Path) -> None:
    install(clone)
    (clone / "interpreter").write_text("/venvs/b 3.11.7\n")
    assert len(install(clone)) == 4
