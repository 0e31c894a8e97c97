"""Shared test setup: every test run gets its own raynb state dir, so it never touches ~/.raynb or a user's head;
one embedded head serves the whole session; markers come from the directory a test lives in."""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

_HOME = Path(tempfile.mkdtemp(prefix="raynb-tests-"))
os.environ.setdefault("RAYNB_HOME", str(_HOME))
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
# A finished run keeps an embedded head up for 30 min by default (so a kernel can come back to it); in tests, heads
# go as soon as no kernel and no running run uses them, or a suite would pile them up. Tests of the delay set it.
os.environ.setdefault("RAYNB_LOCAL_IDLE_AFTER_RUN_S", "0")
# Ray Client keeps a dropped kernel's session 30 s by default (raynb's client_reconnect_grace_s, a user setting);
# the tests that cut a connection or kill a kernel wait for it, so it is shorter here.
os.environ.setdefault("RAYNB_CLIENT_RECONNECT_GRACE_S", "10")
# The test S3 server's key (tests/s3), in the environment every Ray node of the tests inherits, as EKS Pod Identity or
# IRSA gives every pod its role's; no instance metadata to ask on this machine.
os.environ.setdefault("AWS_ACCESS_KEY_ID", "raynb-test")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "raynb-test-secret")
os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")

#: the tier of each test directory, as a marker: `pytest -m unit`, `-m "not k8s"`
TIERS = ("unit", "integration", "notebook", "browser", "compat", "k8s", "packaging")

ARTIFACTS = Path(os.environ.get("RAYNB_TEST_ARTIFACTS", Path(__file__).resolve().parent.parent / "test-artifacts"))


@pytest.fixture(scope="session")
def session_head() -> Iterator[object]:
    """The embedded head every test shares that does not test a head's own life (start, reuse, orphans, auth,
    token switches: those start their own, in a RAYNB_HOME of their own). The pytest process is its owner, so it
    stays up between tests; kernels started by tests inherit this RAYNB_HOME, and their `%raycluster up --local`
    reuses it. Stopped at the end of the session, with every process it started."""
    from raynb import _embedded_head as local

    head = local.start_head(progress=print)
    yield head
    local.stop_head(head)
    deadline = time.monotonic() + 10
    while local.processes_of(head) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert local.processes_of(head) == [], "raynb left Ray processes behind"


@pytest.fixture(scope="session")
def artifacts() -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Each test is marked with its tier (its directory under tests/), in this one place."""
    here = Path(__file__).resolve().parent
    for item in items:
        try:
            tier = Path(item.path).resolve().relative_to(here).parts[0]
        except ValueError:
            continue
        if tier in TIERS:
            item.add_marker(getattr(pytest.mark, tier))


_TIER_SECONDS: dict[str, float] = {}
_TEST_SECONDS: dict[str, float] = {}
_STARTED = time.monotonic()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Seconds per test and per tier (setup, call and teardown: a module's kernel or lab counts where it is paid)."""
    tier = report.nodeid.split("/")[1] if report.nodeid.startswith("tests/") else "other"
    _TIER_SECONDS[tier] = _TIER_SECONDS.get(tier, 0.0) + report.duration
    _TEST_SECONDS[report.nodeid] = _TEST_SECONDS.get(report.nodeid, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int) -> None:
    """The suite's cost, printed every run and written to test-artifacts/test-times.json (tests/BUDGET.md keeps the
    measured totals): seconds per tier and in all, and each test's."""
    if not _TIER_SECONDS:
        return
    wall = time.monotonic() - _STARTED
    terminalreporter.section("time per tier (tests/BUDGET.md holds the budget)")
    for tier, seconds in sorted(_TIER_SECONDS.items(), key=lambda kv: -kv[1]):
        terminalreporter.write_line(f"{tier:<12} {seconds:8.1f} s")
    terminalreporter.write_line(f"{'all tests':<12} {sum(_TIER_SECONDS.values()):8.1f} s (pytest wall {wall:.1f} s)")
    record = {
        "written_by": "tests/conftest.py at the end of a pytest run",
        "exit_status": int(exitstatus),
        "ci": os.environ.get("CI") == "true",
        "cores": os.cpu_count(),
        "pytest_wall_s": round(wall, 1),
        "tiers_s": {k: round(v, 1) for k, v in sorted(_TIER_SECONDS.items())},
        "tests_s": {k: round(v, 2) for k, v in sorted(_TEST_SECONDS.items(), key=lambda kv: -kv[1])},
    }
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "test-times.json").write_text(json.dumps(record, indent=1) + "\n")


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
