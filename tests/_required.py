"""Whether this test run must not skip anything, and the session check that enforces it.

A run is *required* under CI (any truthy ``CI``: ``1``, ``true``, ``yes``...; CI systems spell it
differently, and some set none) or with ``RAYTRAIN_REQUIRE_ALL=1``, which ``.ci/run`` sets. In a
required run a missing toolchain or service fails the tests that need it instead of skipping
them, and :class:`RequiredSkips` fails the whole run if any test was skipped anyway, unless that
test is on :data:`ALLOWED_SKIPS` with a reason why skipping it is right even in CI.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Mapping
from dataclasses import dataclass

import pytest

#: Values of ``CI`` / ``RAYTRAIN_REQUIRE_ALL`` that mean "no" (compared case-insensitively).
FALSY = frozenset({"", "0", "false", "no", "off", "n", "f"})

#: Tests that may skip even in a required run: node id (an fnmatch pattern) -> why that is
#: right. Every entry needs its reason; a skip of anything else fails a required run.
ALLOWED_SKIPS: dict[str, str] = {}


def _truthy(value: str | None) -> bool:
    return value is not None and value.strip().lower() not in FALSY


def required(environ: Mapping[str, str] | None = None) -> bool:
    """True under CI (any truthy ``CI``) or with ``RAYTRAIN_REQUIRE_ALL=1``."""
    env = os.environ if environ is None else environ
    return _truthy(env.get("CI")) or _truthy(env.get("RAYTRAIN_REQUIRE_ALL"))


@dataclass(frozen=True)
class Skip:
    nodeid: str
    reason: str


def _reason(report: pytest.CollectReport | pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


class RequiredSkips:
    """A pytest plugin: in a required run, any skip not on the allow-list fails the session."""

    def __init__(
        self, allowed: Mapping[str, str] = ALLOWED_SKIPS, *, is_required: bool | None = None
    ) -> None:
        unjustified = [pattern for pattern, why in allowed.items() if not why.strip()]
        if unjustified:
            raise ValueError(
                f"ALLOWED_SKIPS: {unjustified} have no justification; say why each may skip "
                "in CI, or remove it"
            )
        self.allowed = dict(allowed)
        self.required = required() if is_required is None else is_required
        self.skips: list[Skip] = []

    def is_allowed(self, nodeid: str) -> bool:
        return any(fnmatch.fnmatchcase(nodeid, pattern) for pattern in self.allowed)

    def unlisted(self) -> list[Skip]:
        return [s for s in self.skips if not self.is_allowed(s.nodeid)]

    # A module-level skip (importorskip at import time) is a skipped collect report.
    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.skipped:
            self.skips.append(Skip(report.nodeid, _reason(report)))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        # An xfail is reported as skipped with `wasxfail`: it ran, so it is not a skip.
        if report.skipped and not hasattr(report, "wasxfail"):
            self.skips.append(Skip(report.nodeid, _reason(report)))

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        # A run that already failed keeps its status; one that passed (or ran nothing, all
        # of it skipped at import) fails.
        passed = (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED)
        if self.required and self.unlisted() and session.exitstatus in passed:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        bad = self.unlisted() if self.required else []
        if not bad:
            return
        terminalreporter.section("skips not allowed in a required run", sep="!", red=True)
        terminalreporter.write_line(
            f"{len(bad)} test(s) skipped under CI / RAYTRAIN_REQUIRE_ALL=1, where every test "
            "must run. Make what they need available (see each reason), or, if skipping is "
            "right even in CI, add them with a reason to ALLOWED_SKIPS in tests/_required.py:"
        )
        for skip in bad:
            terminalreporter.write_line(f"  {skip.nodeid}: {skip.reason}")
        terminalreporter.write_line("FAILED: the run is required and skipped tests (exit 1)")
