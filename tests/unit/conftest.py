"""Fixtures shared by the unit tests."""

from __future__ import annotations

import pytest

from raytrain_operator.handlers import apply


@pytest.fixture
def no_fence(monkeypatch: pytest.MonkeyPatch) -> None:
    """`apply.ensure_children` without the fence's reads, for tests of the children themselves;
    the fence has its own tests (test_attempt_fencing.py, test_apply_children.py)."""
    monkeypatch.setattr(apply, "fence", lambda pool, meta, attempt: None)
