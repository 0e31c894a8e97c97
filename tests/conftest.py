"""Shared test setup: every test run gets its own raynb state dir, so it never touches ~/.raynb or a user's head."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

_HOME = Path(tempfile.mkdtemp(prefix="raynb-tests-"))
os.environ.setdefault("RAYNB_HOME", str(_HOME))
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

ARTIFACTS = Path(os.environ.get("RAYNB_TEST_ARTIFACTS", Path(__file__).resolve().parent.parent / "test-artifacts"))


@pytest.fixture(scope="session")
def artifacts() -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS
