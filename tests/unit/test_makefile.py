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
#: The distributions in dependency order: the contract, the SDK and CLI, the operator and runtime.
PROJECT = "-m pip install -e ./contract -e ./sdk -e .[dev,runtime]"
PYPROJECTS = ["pyproject.toml", "contract/pyproject.toml", "sdk/pyproject.toml"]
EXAMPLES = f"-m pip install -r {FRAMEWORKS}"


@pytest.fixture
def clone(tmp_path: Path) -> Path:
    shutil.copy(ROOT / "Makefile", tmp_path / "Makefile")
    for pyproject in PYPROJECTS:
        (tmp_path / pyproject).parent.mkdir(exist_ok=True)
        shutil.copy(ROOT / pyproject, tmp_path / pyproject)
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


@pytest.mark.parametrize("pyproject", PYPROJECTS)
def test_a_changed_pyproject_installs_again_and_keeps_one_stamp(
    clone: Path, pyproject: str
) -> None:
    install(clone)
    with (clone / pyproject).open("a") as f:
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


#: A stand-in for each build script of `make prereqs`: it logs its start and end, with its
#: arguments, and takes a moment, so that the log shows what ran beside what.
FAKE_BUILD = """#!/usr/bin/env bash
name="$(basename "$(dirname "$0")")/$(basename "$0")${*:+ $*}"
echo "start $name" >> "$BUILD_LOG"
sleep 0.4
echo "end $name" >> "$BUILD_LOG"
"""

BUILD_SCRIPTS = [
    "e2e/controlplane/build.sh",
    "e2e/realnode/build.sh",
    "e2e/images/build.sh",
    "e2e/minio/build.sh",
    "e2e/kueue/build.sh",
]


def test_prereqs_build_two_at_a_time_the_images_beside_the_go_compiles(clone: Path) -> None:
    for script in BUILD_SCRIPTS:
        (clone / script).parent.mkdir(parents=True, exist_ok=True)
        (clone / script).write_text(FAKE_BUILD)
    log = clone / "build-log"
    proc = subprocess.run(
        ["make", "-s", "prereqs", f"PYTHON={clone / 'python'}"],
        cwd=clone,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"PATH": "/usr/bin:/bin", "BUILD_LOG": str(log)},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    events = log.read_text().splitlines()
    at = {event: i for i, event in enumerate(events)}
    # Each script ran once, the real node's twice: its Debian packages, then its whole build.
    assert len(events) == len(at) == 2 * (len(BUILD_SCRIPTS) + 1), events
    # The Debian packages come first: buildah, runc and iptables are what the builds use.
    assert events[:2] == ["start realnode/build.sh debs", "end realnode/build.sh debs"], events
    # The images start while the control plane compiles.
    assert at["start images/build.sh"] < at["end controlplane/build.sh"], events
    assert at["start controlplane/build.sh"] < at["end images/build.sh"], events
    # The real node after the control plane; never more than two builds at once.
    assert at["end controlplane/build.sh"] < at["start realnode/build.sh"], events
    running = 0
    for event in events:
        running += 1 if event.startswith("start ") else -1
        assert running <= 2, events


def _run_with_fake_builds(clone: Path, target: str) -> list[str]:
    """`make TARGET` in the copy, every build script and the network namespace's runner
    replaced by a stand-in that logs; the log of starts and ends."""
    for script in [*BUILD_SCRIPTS, "scripts/demo.sh", "e2e/netns/run.sh"]:
        (clone / script).parent.mkdir(parents=True, exist_ok=True)
        (clone / script).write_text(FAKE_BUILD)
    (clone / "scripts" / "demo_realnode.py").write_text("")
    log = clone / "build-log"
    proc = subprocess.run(
        ["make", "-s", target, f"PYTHON={clone / 'python'}"],
        cwd=clone,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"PATH": "/usr/bin:/bin", "BUILD_LOG": str(log)},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return log.read_text().replace(str(clone / "python"), "python").splitlines()


#: What `make demo` and `make up` build: the control plane, the real node, MinIO and the
#: operator and trainer-runtime images; not Kueue, nor the frameworks image (build.sh --only).
DEMO_BUILDS = [
    "realnode/build.sh debs",
    "controlplane/build.sh",
    "realnode/build.sh",
    "images/build.sh --only operator,trainer-runtime",
    "minio/build.sh",
]


@pytest.mark.parametrize(
    ("target", "last"),
    [
        ("demo", "scripts/demo.sh"),
        # The demo's world, left running, inside a network namespace of its own.
        ("up", "netns/run.sh python scripts/demo_realnode.py up"),
    ],
)
def test_demo_and_up_build_only_what_they_use_then_start(
    clone: Path, target: str, last: str
) -> None:
    events = _run_with_fake_builds(clone, target)
    started = [e.removeprefix("start ") for e in events if e.startswith("start ")]
    assert sorted(started) == sorted([*DEMO_BUILDS, last]), events
    # It starts once every build is over.
    assert events[-2:] == [f"start {last}", f"end {last}"], events
    # The project is installed too: the demo and make up run its own code.
    assert (clone / "pip-calls").read_text().splitlines() == [PROJECT, EXAMPLES]
