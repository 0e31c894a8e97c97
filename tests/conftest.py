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

from tests.areas import AREAS, area_of
from tests.stack_build import needs_stack, wait_for_build
from tests.suite_budget import BUDGET_MD, KINDS, Counts, over_budget, parse_override, read_budget

_HOME = Path(tempfile.mkdtemp(prefix="raynb-tests-"))
os.environ.setdefault("RAYNB_HOME", str(_HOME))
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
# A finished run keeps an embedded head up for 30 min by default (so a kernel can come back to it); in tests, heads
# go as soon as no kernel and no running run uses them, or a suite would pile them up. Tests of the delay set it.
os.environ.setdefault("RAYNB_LOCAL_IDLE_AFTER_RUN_S", "0")
# Ray Client keeps a dropped kernel's session 30 s by default (raynb's client_reconnect_grace_s, a user setting);
# the tests that cut a connection or kill a kernel wait for it, so it is shorter here.
os.environ.setdefault("RAYNB_CLIENT_RECONNECT_GRACE_S", "10")
# Ray Train's controller polls its workers every 2 s by default (raynb's health_check_interval_s, a user setting): a
# run's end is seen up to 2 s late and each checkpointing report blocks that long. 0.25 s keeps far above the 20 ms
# bound that tells raynb's non-blocking report path from Ray's (tests/integration/test_train.py).
os.environ.setdefault("RAYNB_HEALTH_CHECK_INTERVAL_S", "0.25")
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
    from raynb._cluster import embedded_head as local

    head = local.start_head(progress=print)
    yield head
    local.stop_head(head)
    deadline = time.monotonic() + 10
    while (local.processes_of(head) or _agents()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert local.processes_of(head) == [], "raynb left Ray processes behind"
    assert _agents() == [], "raynb's agent (a Ray Job, in a session of its own) outlived its head"


def _agents() -> list[int]:
    """raynb's agents on this machine (the Jobs path's cluster side)."""
    from raynb._cluster.processes import pids_naming

    return pids_naming("python -m raynb._agent")


@pytest.fixture(scope="session")
def artifacts() -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Each test is marked with its tier (its directory under tests/) and its area (`area_<name>`: `make test-area
    A=<name>`), in this one place."""
    here = Path(__file__).resolve().parent
    for item in items:
        try:
            rel = Path(item.path).resolve().relative_to(here)
        except ValueError:
            continue
        if rel.parts[0] in TIERS:
            item.add_marker(getattr(pytest.mark, rel.parts[0]))
        area = area_of(rel.as_posix())
        if area:
            item.add_marker(getattr(pytest.mark, "area_" + area.replace("-", "_")))
    # the unit tests first (a mistake shows in seconds), the Kubernetes tests last (their stack builds meanwhile)
    items.sort(key=lambda i: 0 if i.get_closest_marker("unit") else 2 if i.get_closest_marker("k8s") else 1)


_STACK_BUILD: list[str | None] = []  # the background build's status, once waited for


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Before the first test that needs the test stack, wait for its background build (outside the test's time
    limit: this wrapper runs outside pytest-timeout's); a failed build is shown here, and those tests then skip
    (which fails CI)."""
    if not _STACK_BUILD and needs_stack(
        item.get_closest_marker("k8s") is not None, item.get_closest_marker("s3") is not None
    ):
        reporter = item.config.pluginmanager.get_plugin("terminalreporter")
        say = reporter.write_line if reporter is not None else print
        status = wait_for_build(say)
        _STACK_BUILD.append(status)
        if status not in (None, "0"):
            log = Path(os.environ["RAYNB_STACK_BUILD"]) / "log"
            tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
            say(f"the test stack's build ended with {status}:\n{tail}")
    yield


_JOURNEY_FAILED: dict[str, str] = {}  # a journey module's path -> its stage that failed


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    outcome = yield
    if item.get_closest_marker("journey") and outcome.get_result().failed:
        _JOURNEY_FAILED.setdefault(str(item.path), item.name)


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A journey's stages build on each other: once one fails, the later ones say so instead of failing again."""
    failed = _JOURNEY_FAILED.get(str(item.path)) if item.get_closest_marker("journey") else None
    if failed:
        pytest.skip(f"an earlier stage of this journey failed: {failed}")


_TIER_SECONDS: dict[str, float] = {}
_TEST_SECONDS: dict[str, float] = {}
_STARTED = time.monotonic()
_COUNTS = Counts()


def pytest_runtest_logstart(nodeid: str, location: tuple[str, int | None, str]) -> None:
    _COUNTS.begin(nodeid)


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
    _COUNTS.stop()
    totals = _COUNTS.totals()
    terminalreporter.section("what the tests started (tests/suite_budget.py; the budget is in tests/BUDGET.md)")
    columns = (*KINDS, "sleep_s")
    terminalreporter.write_line(f"{'':<8}" + "".join(f"{k:>16}" for k in columns))
    terminalreporter.write_line(f"{'in all':<8}" + "".join(f"{totals.get(k, 0):>16.0f}" for k in columns))
    for nodeid, c in sorted(_COUNTS.per_test.items(), key=lambda kv: -_TEST_SECONDS.get(kv[0], 0.0)):
        if any(c.values()):
            terminalreporter.write_line(
                f"{_TEST_SECONDS.get(nodeid, 0.0):7.1f}s "
                + "".join(f"{c.get(k, 0):>16.0f}" for k in columns)
                + f"  {nodeid}"
            )
    record = {
        "written_by": "tests/conftest.py at the end of a pytest run",
        "exit_status": int(exitstatus),
        "ci": os.environ.get("CI") == "true",
        "cores": os.cpu_count(),
        "pytest_wall_s": round(wall, 1),
        "tiers_s": {k: round(v, 1) for k, v in sorted(_TIER_SECONDS.items())},
        "tests_s": {k: round(v, 2) for k, v in sorted(_TEST_SECONDS.items(), key=lambda kv: -kv[1])},
        "started": {k: round(v, 1) for k, v in sorted(totals.items())},
        "started_per_test": {t: dict(c) for t, c in _COUNTS.per_test.items() if any(c.values())},
    }
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "test-times.json").write_text(json.dumps(record, indent=1) + "\n")


def pytest_configure(config: pytest.Config) -> None:
    config.option.reportchars = "".join(sorted(set((config.option.reportchars or "") + "s")))  # say why things skip
    config.addinivalue_line("markers", "s3: starts the S3 server (tests/s3), built with the Kubernetes stack")
    for area in AREAS:
        config.addinivalue_line("markers", f"area_{area.replace('-', '_')}: `make test-area A={area}`")
    _COUNTS.start()


def _budget(config: pytest.Config) -> tuple[dict[str, int], str]:
    """The limits this run is held to, and where they come from: RAYNB_TEST_BUDGET for any selection; BUDGET.md's
    when the whole suite ran (no -m, -k or paths: a selection cannot be held to the whole suite's totals)."""
    if os.environ.get("RAYNB_TEST_BUDGET"):
        return parse_override(os.environ["RAYNB_TEST_BUDGET"]), "RAYNB_TEST_BUDGET"
    whole = (
        config.args_source == pytest.Config.ArgsSource.TESTPATHS
        and not config.option.markexpr
        and not config.option.keyword
    )
    return (read_budget(BUDGET_MD.read_text()), "tests/BUDGET.md") if whole else ({}, "")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """The count guard (a run that starts more than its budget fails, however fast it was), and under CI
    (CI=true) a skipped test fails the run: a green CI means every path ran."""
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    budget, source = _budget(session.config)
    _COUNTS.sample()
    over = over_budget(_COUNTS.totals(), budget)
    if over and session.exitstatus == 0:
        if reporter is not None:
            reporter.write_line(
                f"over the suite's budget ({source}): {'; '.join(over)}. Merge the new test into a journey that "
                "already pays for these, or raise the budget in tests/BUDGET.md in the same change, with the reason.",
                red=True,
            )
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    if os.environ.get("CI") != "true":
        return
    skipped = len(reporter.stats.get("skipped", [])) if reporter is not None else 0
    if skipped and session.exitstatus == 0:
        if reporter is not None:
            reporter.write_line(
                f"CI=true: {skipped} test(s) skipped (reasons above); every test must run in CI", red=True
            )
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
