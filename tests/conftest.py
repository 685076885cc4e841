"""Fixtures shared by unit and integration tests."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest


@pytest.fixture
def unique_name() -> Callable[[str], str]:
    """Factory of unique topic / group / id names for one test."""

    def make(prefix: str = "t") -> str:
        return f"{prefix}-{uuid.uuid4().hex[:10]}"

    return make
