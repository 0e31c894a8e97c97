"""The suite's own guard: areas cover every module, and the count guard reads processes and budgets right."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

from tests.areas import AREAS, area_of
from tests.stack_build import needs_stack, wait_for_build
from tests.suite_budget import Counts, kind_of, over_budget, parse_override, read_budget

TESTS = Path(__file__).resolve().parents[1]


def test_every_module_outside_the_unit_tests_has_an_area() -> None:
    modules = [p.relative_to(TESTS).as_posix() for p in TESTS.glob("*/test_*.py") if p.parent.name != "unit"]
    assert modules and [m for m in modules if area_of(m) is None] == []
    assert len(AREAS) == len({a.replace("-", "_") for a in AREAS})  # one marker each


def test_process_kinds_from_command_lines() -> None:
    assert kind_of("ray::TrainController.run") == "cold_groups"
    assert kind_of("/venv/lib/python3.11/site-packages/ray/core/src/ray/gcs/gcs_server --log_dir=/tmp") == "heads"
    assert kind_of("/venv/bin/python -m ipykernel_launcher -f /tmp/kernel.json") == "kernels"
    assert kind_of("/venv/bin/python -m ray.util.client.server --host=0.0.0.0 --mode=specific-server") == (
        "client_sessions"
    )
    assert kind_of("/venv/bin/python -m ray.util.client.server --mode=proxy") is None  # one per head, not per client
    assert kind_of("ray::RayTrainWorker.run") is None


def test_budget_lines_and_the_verdict() -> None:
    budget = read_budget("text\n    budget.cold_groups = 14\nbudget.heads = 4  # why\nnot budget.x = 1\n")
    assert budget == {"cold_groups": 14, "heads": 4}
    assert parse_override("cold_groups=3, heads=1") == {"cold_groups": 3, "heads": 1}
    assert over_budget(Counter(cold_groups=15, heads=4), budget) == ["cold_groups: 15 > 14 allowed"]
    assert over_budget(Counter(cold_groups=14), budget) == []


def test_the_sampler_bills_a_new_process_to_the_running_test() -> None:
    marker = f"raynb-sampler-test-{time.monotonic_ns()}"
    counts = Counts(period_s=0.05, classify=lambda cmd: "kernels" if marker in cmd else None)
    counts.start()
    try:
        counts.begin("first")
        # a process the classifier above takes for a kernel (the sampler reads /proc/<pid>/cmdline)
        proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", marker])
        try:
            deadline = time.monotonic() + 10
            while counts.per_test.get("first", Counter())["kernels"] < 1 and time.monotonic() < deadline:
                time.sleep(0.05)
            counts.begin("second")
        finally:
            proc.kill()
            proc.wait()
        time.sleep(1.0)  # test code's deliberate wait: counted
    finally:
        counts.stop()
    assert counts.per_test["first"]["kernels"] == 1
    assert counts.per_test["second"]["kernels"] == 0 and counts.per_test["second"]["sleep_s"] == 1.0


def test_the_tests_that_need_the_stack_wait_for_its_background_build(tmp_path: Path, monkeypatch) -> None:
    assert needs_stack(True, False) and needs_stack(False, True) and not needs_stack(False, False)
    monkeypatch.delenv("RAYNB_STACK_BUILD", raising=False)
    assert wait_for_build(print) is None  # pytest by hand: nothing to wait for
    said: list[str] = []
    (tmp_path / "log").write_text("[s3] weed built in 300 s\n")
    threading.Timer(0.7, lambda: (tmp_path / "rc").write_text("0\n")).start()
    assert wait_for_build(said.append, folder=str(tmp_path)) == "0"
    assert len(said) == 1 and "waiting for the test stack's build" in said[0] and "weed built" in said[0], said
