"""A run in real JupyterLab, driven in Debian's chromium by Playwright, as one journey on one run: the live chart
gains points while the run goes, Detach lets the waiting cell return while the view keeps updating, Stop stops it
and the final picture stays. Screenshots land in test-artifacts/. (The bars' buttons per kind of run, and the
chart's point bound at 1,500 steps, are unit tests: tests/unit/test_controls.py, tests/unit/test_picture.py.)"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = [
    pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (tests/install-system-tools.sh)"),
]
CHROME_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def lab(session_head: object, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """One JupyterLab for the module (its URL and root folder), on the session's embedded head: its kernels inherit
    the session's RAYNB_HOME, so `%raycluster up --local` reuses that head."""
    root = tmp_path_factory.mktemp("lab")
    settings = root / "lab-settings" / "@jupyterlab" / "notebook-extension"
    settings.mkdir(parents=True)
    (settings / "tracker.jupyterlab-settings").write_text(json.dumps({"windowingMode": "none"}))
    notes = root / "lab-settings" / "@jupyterlab" / "apputils-extension"
    notes.mkdir(parents=True)  # no "get Jupyter news?" toast over the page
    (notes / "notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false", "checkForUpdates": False})
    )
    port = _free_port()
    env = {
        **os.environ,
        "JUPYTERLAB_SETTINGS_DIR": str(root / "lab-settings"),
        "JUPYTERLAB_WORKSPACES_DIR": str(root / "lab-workspaces"),  # no notebook of an earlier test reopens
        "JUPYTER_RUNTIME_DIR": str(root / "rt"),
    }
    log = open(root / "lab.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyter",
            "lab",
            "--no-browser",
            f"--port={port}",
            "--ServerApp.ip=127.0.0.1",
            "--IdentityProvider.token=",
            "--ServerApp.password=",
            f"--ServerApp.root_dir={root}",
            "--ServerApp.disable_check_xsrf=True",
            *(["--allow-root"] if os.getuid() == 0 else []),
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            urllib.request.urlopen(url + "/lab", timeout=2)
            break
        except OSError:
            time.sleep(0.5)
    else:
        proc.kill()
        pytest.fail("JupyterLab did not start:\n" + (root / "lab.log").read_text()[-3000:])
    yield url, root
    proc.terminate()  # its kernels with it
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()


def _runs(page) -> list[dict]:
    return page.eval_on_selector_all(
        ".raynb-run",
        """els => els.map(e => ({name: e.dataset.run, status: e.dataset.status, step: +e.dataset.step,
                                 points: +((e.querySelector('svg[data-chart=loss]') || {dataset: {}}).dataset.points
                                           || 0)}))""",
    )


def _said(page, lab: tuple[str, Path]) -> str:
    """What a person would read to learn why: each cell's prompt and output, and the end of JupyterLab's log."""
    cells = page.eval_on_selector_all(
        ".jp-Cell",
        """els => els.map(e => ((e.querySelector('.jp-InputPrompt') || {}).innerText || '') + ' '
                                + ((e.querySelector('.jp-OutputArea') || {}).innerText || '').slice(-1500))""",
    )
    return "\n".join(cells) + "\n--- lab.log ---\n" + (lab[1] / "lab.log").read_text(errors="replace")[-3000:]


def _kernel_busy_or_done(page, timeout_s: float) -> bool:
    """Did execution start? The kernel indicator goes busy, or cells get execution counts."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if (
            page.locator(".jp-Notebook-ExecutionIndicator[data-status='busy']").count()
            or page.locator(".jp-InputPrompt:has-text('[1]')").count()
            or page.locator(".jp-InputPrompt:has-text('[*]')").count()
        ):
            return True
        time.sleep(0.25)
    return False


def _run_all(page, artifacts: Path) -> None:
    """Run all cells through the Run menu; if execution does not start, through the command palette.

    Seen on a fresh JupyterLab: the toolbar says idle before the kernel session is connected, and a Run All in that
    window selects every cell but runs none. The status bar's "| Idle" comes with the session.
    """
    page.wait_for_selector(".jp-StatusBar-TextItem:has-text('| Idle')", timeout=90_000)
    time.sleep(1)
    page.get_by_role("menuitem", name="Run", exact=True).click()
    page.get_by_role("menuitem", name="Run All Cells", exact=True).click()
    if _kernel_busy_or_done(page, 30):
        return
    page.screenshot(path=str(artifacts / "jupyterlab-run-all-retry.png"))
    page.keyboard.press("Escape")
    page.locator(".jp-Notebook").first.click()
    page.keyboard.press("Control+Shift+c")
    page.keyboard.type("Run All Cells")
    page.keyboard.press("Enter")
    assert _kernel_busy_or_done(page, 60), "JupyterLab did not start running the notebook"


@contextlib.contextmanager
def _running_notebook(lab: str, path: str, artifacts: Path) -> Iterator[Any]:
    """A chromium page with the notebook at ``path`` open in JupyterLab and Run All clicked."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROME_ARGS, headless=True)
        page = browser.new_page(viewport={"width": 1300, "height": 1000})
        page.goto(f"{lab}/lab/tree/{path}")
        page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=90_000)
        page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=90_000)
        _run_all(page, artifacts)
        try:
            yield page
        finally:
            browser.close()


def _write_notebook(path: Path, *cells: str) -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in cells]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)


def _until(cond: Any, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not cond():
        time.sleep(0.25)


def test_a_run_in_jupyterlab_live_chart_detach_and_stop(lab: tuple[str, Path], artifacts: Path) -> None:
    """A cell that waits on its run: its chart grows while the step rises, its bar says how far of ``--steps`` it is;
    Detach (clicked while the cell runs) lets
    the cell return and the next cell run, while the run goes on and its view keeps updating; Stop, in the same bar,
    stops it, the bar goes and the final picture stays."""
    _write_notebook(
        lab[1] / "journey.ipynb",
        "%load_ext raynb\n%raycluster up --local",
        "%%raytrain --workers 1 --steps 3000 --out fg --name lab-run\nimport raynb, time\n"
        "for i in range(1_000_000):\n    time.sleep(0.1)\n    raynb.report(loss=1.0 / (i + 1))",
        "print('next cell ran while', fg.name, 'was', fg.status)",
    )
    with _running_notebook(lab[0], "journey.ipynb?reset", artifacts) as page:
        # the live chart: drawn while running, its step rising between redraws
        seen: list[tuple[str, int, int]] = []  # (status, loss points, step)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            runs = _runs(page)
            if runs:
                seen.append((runs[0]["status"], runs[0]["points"], runs[0]["step"]))
                if len({st for s_, pts, st in seen if s_ == "running" and pts > 0}) >= 3:
                    break
            time.sleep(0.25)
        running_steps = [step for status, pts, step in seen if status == "running" and pts > 0]
        if len(set(running_steps)) < 3:
            page.screenshot(path=str(artifacts / "jupyterlab-no-live-chart.png"), full_page=True)
        assert len(set(running_steps)) >= 3 and running_steps == sorted(running_steps), (seen[-20:], _said(page, lab))
        cell = page.locator(".jp-Cell:has(.raynb-run)").first
        cell.scroll_into_view_if_needed()
        cell.screenshot(path=str(artifacts / "jupyterlab-live.png"))
        bar = cell.locator(".raynb-progress").first  # --steps: the bar and the time left (issue 42)
        assert float(bar.get_attribute("data-fraction") or 0) > 0 and "of 3,000 steps, ~" in bar.inner_text()
        # Detach: the waiting cell returns, the next cell runs, the run goes on
        printed = page.locator(".jp-OutputArea-output", has_text="next cell ran while")
        assert printed.count() == 0  # the cell still waits on its run
        button = page.locator("button.raynb-detach")
        button.scroll_into_view_if_needed()
        cell.screenshot(path=str(artifacts / "jupyterlab-detach-button.png"))
        button.click()
        printed.filter(has_text="lab-run was running").wait_for(timeout=60_000)
        page.wait_for_selector("button.raynb-detach", state="detached", timeout=10_000)  # only Stop stays
        step = _runs(page)[0]["step"]
        _until(lambda: _runs(page)[0]["step"] >= step + 10, 60)
        assert _runs(page)[0]["step"] >= step + 10, _runs(page)  # the detached run's view keeps updating
        cell.screenshot(path=str(artifacts / "jupyterlab-detached.png"))
        # Stop: aborted, the bar gone with the run, the final picture kept
        page.locator("button.raynb-stop").click()
        _until(lambda: _runs(page)[0]["status"] == "aborted", 90)
        assert _runs(page)[0]["status"] == "aborted", _runs(page)
        page.wait_for_selector("button.raynb-stop", state="detached", timeout=30_000)
        cell.scroll_into_view_if_needed()
        cell.screenshot(path=str(artifacts / "jupyterlab-final.png"))
        assert cell.locator("svg[data-chart=loss] polyline").count() >= 1
        page.screenshot(path=str(artifacts / "jupyterlab-page.png"), full_page=False)
