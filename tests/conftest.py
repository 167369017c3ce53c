"""Session-wide test policy: in a required run (CI, or RAYTRAIN_REQUIRE_ALL=1) nothing may skip
unless tests/_required.py lists it with a reason; see that module."""

from __future__ import annotations

import pytest
from _required import RequiredSkips


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(RequiredSkips(), "raytrain-required-skips")
