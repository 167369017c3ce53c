"""Every version the docs name is a version a test ran.

The tested versions are read from where the tests pin them, never written here:

- Kubernetes, etcd, KWOK and KubeRay: e2e/controlplane/versions.sh (K8S_VERSION, ETCD_VERSION,
  KWOK_VERSION, KUBERAY_VERSION), the local control plane every cluster test runs on; the real
  node's NODE_K8S_VERSION and e2e/kind/run.sh's KubeRay default must be the same;
- Kueue: the KUEUE_VERSION default of e2e/kueue/build.sh, which the queue tests build (the
  Makefile must not override it; tests/integration/kueue.py must name the same);
- Ray and torch: their `==` pins in constraints.txt, what `make install` and the images install;
- Python: the matrix of .github/workflows/check.yml;
- kind: KIND_VERSION of .github/workflows/e2e-kind.yml (e2e/kind/run.sh uses whichever kind is
  on PATH). No run of it is recorded yet, so kind is pinned but not tested: `NOT_RUN` below.
  Take it out of `NOT_RUN` once e2e-kind has passed.

The rule, over README.md, docs/*.md and charts/*/README.md (examples with made-up versions,
the tested one being 9.8.7). A mention is a product name followed by a version ("KubeRay 9.8.7",
"Kueue v9.8", "Python 9.8", `kuberay-operator --version 9.8.7`, `rayVersion: 9.8.7`,
"`spec.rayVersion` 9.8"), or a bare version that a sentence gives to the product it named last
("the same in 9.9", "any Kubernetes from 9.1", "rather than v9.9.0", "Python 9.8 to 9.9"). A
mention passes when

- its version is a prefix of a tested version, part by part ("Kubernetes 9.8" is 9.8.7;
  "Ray 9.8.70" and "Ray 9.80" are not), and
- it is not open-ended ("9.8 or later", "9.8+", "from 9.8", "Kubernetes >= 9.8" name versions
  no test ran).

Any other mention (a minimum users need, an older or newer release, an open range, any version
of a product in `NOT_RUN`) passes only when its sentence says "not tested" (the one marker, in
any case, across line breaks). The marker does not cover a version the sentence says is tested
("tested with 9.8.7", "tested on 9.8"): that one must still match. Sentences end at `.`, `!` or
`?` before a space, and within a paragraph, list item, table cell or line of code. A number
followed by a unit (GB, s, min, %) is a measurement, not a version.

docs/development.md also has a "Versions tested" section naming Kubernetes, KubeRay, Kueue, Ray
and torch with their full tested versions, and Python with each version of the matrix.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CONTROLPLANE = ROOT / "e2e" / "controlplane" / "versions.sh"
REALNODE = ROOT / "e2e" / "realnode" / "versions.sh"
KIND_RUN = ROOT / "e2e" / "kind" / "run.sh"
KUEUE_BUILD = ROOT / "e2e" / "kueue" / "build.sh"
KUEUE_TESTS = ROOT / "tests" / "integration" / "kueue.py"
CONSTRAINTS = ROOT / "constraints.txt"
CHECK_WORKFLOW = ROOT / ".github" / "workflows" / "check.yml"
KIND_WORKFLOW = ROOT / ".github" / "workflows" / "e2e-kind.yml"
DEVELOPMENT = ROOT / "docs" / "development.md"
MARKER = "not tested"
#: Products whose pin exists but whose run has not passed: every mention needs the marker.
NOT_RUN = {"kind": "no run of e2e/kind/run.sh (e2e-kind.yml) is recorded yet"}
#: The products the "Versions tested" section must name, with the full version.
LISTED = ("Kubernetes", "KubeRay", "Kueue", "Ray", "torch")

#: How each product is written in prose (case matters: "kind" and "Ray" are also words).
NAMES = {
    "Kubernetes": r"Kubernetes",
    "KubeRay": r"KubeRay",
    "Kueue": r"Kueue",
    "Ray": r"Ray",
    "torch": r"(?:PyTorch|torch)",
    "Python": r"Python",
    "kind": r"kind",
    "etcd": r"etcd",
    "KWOK": r"KWOK",
}
VERSION = r"v?(?P<ver>\d+(?:\.\d+)+)(?![\d.]*\d)"
#: A number followed by one of these is a measurement, not a version.
UNIT = re.compile(
    r"\s*(?:%|[KMGT]i?B\b|ms\b|s\b|min\b|h\b|x\b|times\b|cores?\b|seconds?\b|minutes?\b|hours?\b)"
)
SEPARATOR = r"(?P<sep>\s*(?:==|>=|~=|≥)\s*|\s+)"
NAME_RE = {p: re.compile(rf"(?<![\w./-]){n}(?![\w-])") for p, n in NAMES.items()}
DIRECT_RE = {p: re.compile(rf"(?<![\w./-]){n}{SEPARATOR}{VERSION}") for p, n in NAMES.items()}
#: Code that names a version without the product's name in front of it.
CODE_RE = {
    "KubeRay": re.compile(rf"kuberay-operator\s+--version(?P<sep>[\s=]+){VERSION}"),
    "Ray": re.compile(rf"rayVersion`?(?P<sep>:?\s*[\"']?){VERSION}"),
}
CONNECTOR = r"(?:,|\b(?:in|from|to|and|or|than|with|through|since|before|after|at|as|nor|vs\.?))"
BARE_RE = re.compile(rf"(?P<conn>{CONNECTOR})\s+{VERSION}")
OPEN_AFTER = re.compile(
    r"\s*(?:\+(?!\w)|or (?:later|newer|above|higher|greater)\b|and (?:later|newer|above|up)\b"
    r"|onwards?\b)"
)
OPEN_BEFORE = re.compile(r"(?:\bat least|>=|≥)\s*$")
#: "from 1.29" is open-ended, "from 1.29 to 1.31" is not.
CLOSED_AFTER = re.compile(r"\s*(?:to|through|and)\s+v?\d")
OPEN_SEP = {">=", "~=", "≥"}
BLOCK_START = re.compile(r"\s*(?:#|[-*+] |\d+[.)] |\||>)")
SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\s\|\s")
#: "tested with 9.8.7", "Tested with Kubernetes 9.8", "tested on 9.8": checked even in a
#: sentence that says "not tested" of some other version.
CLAIM = re.compile(r"(?<!not )\b[Tt]ested (?:with|on|against) (?:[A-Z]\w* )?v?$")


@dataclass(frozen=True)
class Pin:
    versions: tuple[str, ...]  # without the leading v
    source: str


def _sh_var(path: Path, name: str) -> str:
    """`NAME=value` or `NAME="${NAME:-value}"` in a shell script."""
    text = path.read_text()
    m = re.search(rf'^\s*{name}="?\$\{{{name}:-([^}}]+)\}}"?', text, re.M) or re.search(
        rf"^\s*{name}=\"?([^\s\"#]+)", text, re.M
    )
    assert m, f"{path.relative_to(ROOT)} no longer sets {name}: point this test at its new place"
    return m.group(1)


def _pin(name: str) -> str:
    m = re.search(rf"^{name}==(\S+)$", CONSTRAINTS.read_text(), re.M)
    assert m, f"constraints.txt has no {name}== pin"
    return m.group(1)


def _python_matrix() -> tuple[str, ...]:
    job = yaml.safe_load(CHECK_WORKFLOW.read_text())["jobs"]["check"]
    return tuple(str(v) for v in job["strategy"]["matrix"]["python-version"])


def _strip(v: str) -> str:
    return v.removeprefix("v")


def _tested() -> dict[str, Pin]:
    cp = "e2e/controlplane/versions.sh"
    kind = yaml.safe_load(KIND_WORKFLOW.read_text())["env"]["KIND_VERSION"]
    return {
        "Kubernetes": Pin((_strip(_sh_var(CONTROLPLANE, "K8S_VERSION")),), f"{cp} K8S_VERSION"),
        "etcd": Pin((_strip(_sh_var(CONTROLPLANE, "ETCD_VERSION")),), f"{cp} ETCD_VERSION"),
        "KWOK": Pin((_strip(_sh_var(CONTROLPLANE, "KWOK_VERSION")),), f"{cp} KWOK_VERSION"),
        "KubeRay": Pin(
            (_strip(_sh_var(CONTROLPLANE, "KUBERAY_VERSION")),), f"{cp} KUBERAY_VERSION"
        ),
        "Kueue": Pin(
            (_strip(_sh_var(KUEUE_BUILD, "KUEUE_VERSION")),), "e2e/kueue/build.sh KUEUE_VERSION"
        ),
        "Ray": Pin((_pin("ray"),), "constraints.txt ray=="),
        "torch": Pin((_pin("torch"),), "constraints.txt torch=="),
        "Python": Pin(_python_matrix(), ".github/workflows/check.yml matrix"),
        "kind": Pin((_strip(str(kind)),), ".github/workflows/e2e-kind.yml KIND_VERSION"),
    }


@dataclass(frozen=True)
class Mention:
    line: int
    product: str
    text: str  # as written, for the message
    version: str
    open_ended: bool
    marked: bool
    claim: bool  # "tested with <it>"


def _units(text: str) -> Iterator[tuple[str, list[int], int]]:
    """Paragraphs, list items, table rows and code lines: (joined text, the offset in it where
    each line starts, the first line's number)."""
    lines = text.splitlines()
    buf: list[str] = []
    starts: list[int] = []
    first = 0
    in_code = False

    def flush() -> Iterator[tuple[str, list[int], int]]:
        if buf:
            yield " ".join(buf), list(starts), first
        buf.clear()
        starts.clear()

    for number, line in enumerate(lines, 1):
        fence = line.lstrip().startswith("```")
        if fence or in_code or not line.strip() or BLOCK_START.match(line):
            yield from flush()
        if fence:
            in_code = not in_code
            continue
        if not line.strip():
            continue
        if not buf:
            first = number
        starts.append(sum(len(b) + 1 for b in buf))
        buf.append(line)
        if in_code:
            yield from flush()
    yield from flush()


def _sentences(unit: str) -> Iterator[tuple[int, str]]:
    pos = 0
    for m in SENTENCE_END.finditer(unit):
        yield pos, unit[pos : m.start()]
        pos = m.end()
    yield pos, unit[pos:]


def mentions(text: str) -> Iterator[Mention]:
    for unit, starts, first in _units(text):
        for base, sentence in _sentences(unit):
            marked = MARKER in " ".join(sentence.lower().split())

            def line(at: int, starts: list[int] = starts, first: int = first) -> int:
                return first + bisect.bisect_right(starts, at) - 1

            found: list[tuple[int, int, str, re.Match[str]]] = []
            for product in NAMES:
                for regex in (DIRECT_RE[product], CODE_RE.get(product)):
                    if regex is None:
                        continue
                    for m in regex.finditer(sentence):
                        found.append((m.start(), m.end(), product, m))
            taken = [(s, e) for s, e, _, _ in found]
            names = sorted((m.start(), p) for p, r in NAME_RE.items() for m in r.finditer(sentence))
            for m in BARE_RE.finditer(sentence):
                start = m.start("ver") - (1 if sentence[m.start("ver") - 1] == "v" else 0)
                if any(s <= start < e for s, e in taken) or UNIT.match(sentence, m.end()):
                    continue
                before = [p for at, p in names if at < m.start()]
                if before:
                    found.append((m.start(), m.end(), before[-1], m))
            for start, end, product, m in sorted(found, key=lambda f: f[0]):
                if UNIT.match(sentence, end):
                    continue
                groups = m.groupdict()
                open_ended = bool(
                    OPEN_AFTER.match(sentence, end)
                    or OPEN_BEFORE.search(sentence[:start])
                    or (groups.get("sep") or "").strip() in OPEN_SEP
                    or (
                        (groups.get("conn") or "") in ("from", "since")
                        and not CLOSED_AFTER.match(sentence, end)
                    )
                )
                after = OPEN_AFTER.match(sentence, end)
                written = " ".join((m.group(0) + (after.group(0) if after else "")).split())
                if "conn" in groups:
                    written = f"{product} … {written}"
                claim = bool(CLAIM.search(sentence[: m.start("ver")]))
                yield Mention(
                    line(base + start), product, written, m["ver"], open_ended, marked, claim
                )


def _matches(version: str, tested_version: str) -> bool:
    mine, theirs = version.split("."), re.split(r"[.+]", tested_version)
    return len(mine) <= len(theirs) and theirs[: len(mine)] == mine


def problems(text: str, where: str, versions: dict[str, Pin]) -> list[str]:
    out = []
    for m in mentions(text):
        if m.marked and not m.claim:
            continue
        t = versions[m.product]
        shown = ", ".join(t.versions)
        prefix = f"{where}:{m.line}: {m.text!r}"
        fix = f"test that version, or say {MARKER!r} in the sentence"
        if m.product in NOT_RUN:
            out.append(
                f"{prefix}: {m.product} is pinned at {shown} ({t.source}) but "
                f"{NOT_RUN[m.product]}; run it, or say {MARKER!r} in the sentence"
            )
        elif not any(_matches(m.version, v) for v in t.versions):
            out.append(f"{prefix}: tested is {m.product} {shown} ({t.source}); {fix}")
        elif m.open_ended and not m.marked:
            out.append(
                f"{prefix}: open-ended, but the tests ran only {m.product} {shown} ({t.source}); "
                f"name the tested version, or say {MARKER!r} in the sentence"
            )
    return out


def _docs() -> list[Path]:
    paths = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    paths += sorted((ROOT / "charts").glob("*/README.md"))
    return [p for p in paths if p.is_file()]


# --- the sources agree with each other ---------------------------------------------------------


def test_the_sources_are_readable() -> None:
    versions = _tested()
    for product, t in versions.items():
        for v in t.versions:
            assert re.fullmatch(r"\d+(\.\d+)+(\+\w+)?", v), f"{product} {v!r} from {t.source}"


def test_the_kind_run_installs_the_tested_kuberay() -> None:
    assert _strip(_sh_var(KIND_RUN, "KUBERAY_VERSION")) == _tested()["KubeRay"].versions[0], (
        "e2e/kind/run.sh's KUBERAY_VERSION default differs from e2e/controlplane/versions.sh"
    )


def test_the_real_node_runs_the_tested_kubernetes() -> None:
    node = _strip(_sh_var(REALNODE, "NODE_K8S_VERSION"))
    assert node == _tested()["Kubernetes"].versions[0], (
        "e2e/realnode/versions.sh's NODE_K8S_VERSION differs from K8S_VERSION"
    )


def test_kueue_is_the_version_build_sh_builds() -> None:
    assert not re.search(r"KUEUE_VERSION\s*[:?]?=", (ROOT / "Makefile").read_text()), (
        "the Makefile sets KUEUE_VERSION: read it from there"
    )
    m = re.search(r'^KUEUE_VERSION = "([^"]+)"', KUEUE_TESTS.read_text(), re.M)
    assert m, "tests/integration/kueue.py no longer names KUEUE_VERSION"
    assert _strip(m.group(1)) == _tested()["Kueue"].versions[0], (
        "tests/integration/kueue.py's KUEUE_VERSION differs from e2e/kueue/build.sh's"
    )


# --- the docs ----------------------------------------------------------------------------------


@pytest.mark.parametrize("path", _docs(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_version_the_docs_name_was_tested(path: Path) -> None:
    found = problems(path.read_text(), str(path.relative_to(ROOT)), _tested())
    assert not found, "versions no test ran:\n" + "\n".join(found)


def test_development_md_lists_the_versions_tested() -> None:
    text = DEVELOPMENT.read_text()
    m = re.search(r"^## Versions tested\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert m, "docs/development.md has no '## Versions tested' section"
    section = m.group(1)
    versions = _tested()
    written = {(x.product, x.version) for x in mentions(section) if not x.marked or x.claim}
    for product in LISTED:
        v = versions[product].versions[0]
        assert (product, v) in written, (
            f"docs/development.md's 'Versions tested' does not name {product} {v} "
            f"({versions[product].source})"
        )
    for v in versions["Python"].versions:
        assert re.search(rf"(?<![\d.]){re.escape(v)}(?![\d])", section), (
            f"docs/development.md's 'Versions tested' does not name Python {v}"
        )


# --- the rule itself, on made-up versions --------------------------------------------------------

FAKE = {
    **{p: Pin(("9.8.7",), "fake") for p in NAMES},
    "Python": Pin(("4.1", "4.2", "4.3"), "fake"),
    "torch": Pin(("7.6.5+cpu",), "fake"),
}


@pytest.mark.parametrize(
    "text",
    [
        "Pin with Kubernetes 9.8 and KubeRay v9.8.7.",
        "Needs Python 4.1 to 4.3 and torch 7.6.5+cu999.",
        "Kueue 0.1 or later, not tested: the tests run 9.8.7.",
        "KubeRay is at v9.8.7 rather than v9.9.0 (not tested).",
        "It took 1.5 to 2 times as long with Ray 9.8, and 3.1 GB.",
        "```\nhelm install kuberay-operator kuberay/kuberay-operator --version 9.8.7\n```",
        "Another kind, in `trainer.kubeflow.org`, at 2.0 s.",
        "The same on\nKubernetes 1.2\n(not tested).",
        "- Ray 1.0 (not\n  tested) runs.",
    ],
)
def test_the_rule_passes(text: str) -> None:
    assert problems(text, "x.md", FAKE) == []


@pytest.mark.parametrize(
    ("text", "line", "mention"),
    [
        ("Kubernetes 1.29 or later.", 1, "'Kubernetes 1.29 or later'"),
        ("Ray 1.0 runs. That is not\n  tested.", 1, "'Ray 1.0'"),
        ("Kueue 1.0 or later (tested with 9.9; earlier versions not tested).", 1, "with 9.9"),
        ("Kubernetes 9.8 or later.", 1, "open-ended"),
        ("Needs Python 4.1+.", 1, "open-ended"),
        ("One.\n\nKubeRay 9.8.7, the fields are\nthe same in 9.9.", 4, "KubeRay … in 9.9"),
        ("Pin with Kubernetes 9.8 (any Kubernetes from 9.1).", 1, "from 9.1"),
        ("Ray 9.8.70 serves it.", 1, "'Ray 9.8.70'"),
        ("Ray 9 serves it with Ray 9.80.", 1, "'Ray 9.80'"),
        ("```\nkuberay-operator --version 1.0.0\n```", 2, "1.0.0"),
        ("    rayVersion: 2.0.0", 1, "rayVersion"),
        ("Token auth (`spec.rayVersion` 9.8 and later).", 1, "and later"),
        ("a kind v9.8.7 cluster", 1, "pinned at 9.8.7"),
        ("| Kueue v1.0 | not tested later |\n", 1, "Kueue v1.0"),
    ],
)
def test_the_rule_fails(text: str, line: int, mention: str) -> None:
    found = problems(text, "x.md", FAKE)
    assert len(found) == 1, found
    assert found[0].startswith(f"x.md:{line}: "), found
    assert mention in found[0], found
    assert MARKER in found[0], found
