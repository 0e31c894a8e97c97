"""Notebooks in real Jupyter kernels: the stop button, auto-loading. (A killed kernel's head stopping by itself is in
test_cli_and_local_options.py; the quickstart notebook runs top to bottom in tests/packaging, from the wheel outside
the repository, as the README's main job.)"""

from __future__ import annotations

import time
from pathlib import Path

from .kernels import STEP, errors, html_of, kernel, run, text, train_workers


def test_stop_button_aborts_and_the_kernel_stays_usable(session_head: object) -> None:
    with kernel() as (km, kc):
        up = run(kc, "%load_ext raynb\nc = %raycluster up --local\nprint(c.dashboard_url)", timeout=240)
        assert not errors(up), text(up)
        steps: list[int] = []
        interrupted: list[float] = []
        seen_alive: list[int] = []

        def watch(m: dict) -> None:
            for s in STEP.findall(html_of(m)):
                steps.append(int(s))
            if steps and max(steps) >= 3 and not interrupted:
                seen_alive.append(
                    len(train_workers())
                )  # the query must see the workers before it can vouch they are gone
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
        while train_workers() and time.monotonic() - interrupted[0] < 30:
            time.sleep(0.2)
        assert train_workers() == [], "the workers must be stopped by the interrupt, not left running"
        after = run(kc, "print(r.status, r.aborted_at_step >= 3, 6 * 7)")
        assert "aborted True 42" in text(after)


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
