"""Shared test setup: every test run gets its own raynb state dir, so it never touches ~/.raynb or a user's head."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

_HOME = Path(tempfile.mkdtemp(prefix="raynb-tests-"))
os.environ.setdefault("RAYNB_HOME", str(_HOME))
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
# A finished run keeps an embedded head up for 30 min by default (so a kernel can come back to it); in tests, heads
# go as soon as no kernel and no running run uses them, or a suite would pile them up. Tests of the delay set it.
os.environ.setdefault("RAYNB_LOCAL_IDLE_AFTER_RUN_S", "0")

ARTIFACTS = Path(os.environ.get("RAYNB_TEST_ARTIFACTS", Path(__file__).resolve().parent.parent / "test-artifacts"))


@pytest.fixture(scope="session")
def artifacts() -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS


def pytest_configure(config: pytest.Config) -> None:
    config.option.reportchars = "".join(sorted(set((config.option.reportchars or "") + "s")))  # say why things skip


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Under CI (CI=true) a skipped test fails the run: a green CI means every path ran."""
    if os.environ.get("CI") != "true":
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = len(reporter.stats.get("skipped", [])) if reporter is not None else 0
    if skipped and session.exitstatus == 0:
        if reporter is not None:
            reporter.write_line(
                f"CI=true: {skipped} test(s) skipped (reasons above); every test must run in CI", red=True
            )
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
