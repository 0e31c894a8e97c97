"""Notebooks in real Jupyter kernels: the quickstart, the stop button, a killed kernel, auto-loading."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import nbformat
import pytest

from raynb import _embedded_head as local
from raynb.notebook import execute

from .kernels import STEP, errors, html_of, kernel, run, text

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "notebooks" / "quickstart.ipynb"


def test_quickstart_runs_top_to_bottom_and_stays_small(
    artifacts: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """1,000 training steps on 2 workers; the saved notebook keeps the final curves and stays under 1 MB. On a head
    of its own, as a newcomer's first run: the notebook starts it and its last cell stops it."""
    monkeypatch.setenv("RAYNB_HOME", str(tmp_path / "home"))
    out = artifacts / "quickstart-1000-steps.ipynb"
    summary = execute(QUICKSTART, out, {"STEPS": 1000})
    assert summary.size_bytes < 1_000_000, summary.size_bytes
    assert [(r["name"].startswith("raytrain-"), r["status"], r["step"]) for r in summary.runs[:1]] == [
        (True, "succeeded", 1000)
    ]
    assert summary.runs[0]["records"] == 2000  # both ranks, every step
    assert summary.runs[1]["name"] == "broken-run" and summary.runs[1]["status"] == "failed"
    assert len(summary.errors) == 1 and summary.errors[0].startswith("TrainingFailedError: Rank 1 of 2 failed")
    nb = nbformat.read(out, as_version=4)
    outputs = "\n".join(json.dumps(c.get("outputs", [])) for c in nb.cells)
    assert "cell line 5, in train_loop_per_worker" in outputs
    m = re.search(r"loss (\d+\.\d+) -> (\d+\.\d+), final accuracy (\d+\.\d+)%", outputs)
    assert m and float(m[2]) < float(m[1]) * 0.5 and float(m[3]) > 80, m and m.group(0)
    # the final picture is a static SVG chart holding every step's point
    assert re.search(r'data-chart=\\"loss\\" data-points=\\"2000\\"', outputs)


def test_stop_button_aborts_and_the_kernel_stays_usable(session_head: object) -> None:
    with kernel() as (km, kc):
        up = run(kc, "%load_ext raynb\nc = %raycluster up --local\nprint(c.dashboard_url)", timeout=240)
        assert not errors(up), text(up)
        steps: list[int] = []
        interrupted: list[float] = []
        seen_alive: list[int] = []

        def alive() -> list[int]:
            """Ray Train worker processes on this machine (Ray names each actor's process after its class)."""
            pids = []
            for p in Path("/proc").iterdir():
                try:
                    if p.name.isdigit() and (p / "cmdline").read_bytes().startswith(b"ray::RayTrainWorker"):
                        pids.append(int(p.name))
                except OSError:
                    pass
            return pids

        def watch(m: dict) -> None:
            for s in STEP.findall(html_of(m)):
                steps.append(int(s))
            if steps and max(steps) >= 3 and not interrupted:
                seen_alive.append(len(alive()))  # the query must see the workers before it can vouch they are gone
                km.interrupt_kernel()
                interrupted.append(time.monotonic())

        cell = (
            "%%raytrain --workers 2 --out r\nimport time, raynb\n"
            "for i in range(10_000):\n    time.sleep(0.2)\n    raynb.report(loss=1.0 / (i + 1))"
        )
        msgs = run(kc, cell, timeout=300, on_msg=watch)
        assert interrupted, "the run never reached step 3"
        errs = errors(msgs)
        assert len(errs) == 1 and errs[0]["ename"] == "RunAborted", text(msgs)
        assert "aborted at step" in errs[0]["evalue"] and "SystemExit" not in text(msgs)
        assert seen_alive == [2], seen_alive
        while alive() and time.monotonic() - interrupted[0] < 30:
            time.sleep(0.2)
        assert alive() == [], "the workers must be stopped by the interrupt, not left running"
        after = run(kc, "print(r.status, r.aborted_at_step >= 3, 6 * 7)")
        assert "aborted True 42" in text(after)


def test_killed_kernel_leaves_no_ray_process(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with kernel(env={"RAYNB_HOME": str(home)}) as (km, kc):
        up = run(kc, "%load_ext raynb\n%raycluster up --local", timeout=240)
        assert not errors(up), text(up)
        os.environ["RAYNB_HOME"], saved = str(home), os.environ["RAYNB_HOME"]
        try:
            head = local.find_head()
        finally:
            os.environ["RAYNB_HOME"] = saved
        assert head is not None and local.processes_of(head)
        km.shutdown_kernel(now=True)  # SIGKILL: no atexit, no goodbye
    deadline = time.monotonic() + 20
    while local.processes_of(head) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert local.processes_of(head) == [], "the head must stop once no kernel uses it"


def test_extension_loads_from_ipython_config(tmp_path: Path) -> None:
    profile = tmp_path / "ipython" / "profile_default"
    profile.mkdir(parents=True)
    (profile / "ipython_kernel_config.py").write_text(
        "c.InteractiveShellApp.extensions = ['raynb']\nc.RayNB.workers = 3\n"
    )
    with kernel(env={"IPYTHONDIR": str(tmp_path / "ipython")}) as (_km, kc):
        msgs = run(
            kc,
            "ip = get_ipython()\nprint(ip.find_cell_magic('raytrain') is not None, "
            "ip._raynb_magics._settings({}).workers)",
        )
        assert "True 3" in text(msgs), text(msgs)
