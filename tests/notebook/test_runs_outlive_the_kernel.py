"""Runs belong to the cluster, in real kernels on the embedded cluster: a run that outlives a kernel killed with
SIGKILL, is attached from a new kernel with its whole curve, and keeps its head up until it ends; a background run
that leaves its kernel free and is stopped from another kernel; and the refusals around names and `down`."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.notebook.kernels import errors, kernel, run, text

LOOP = "import raynb, time\nfor i in range({n}):\n    time.sleep({dt})\n    raynb.report(loss=1.0 / (i + 1))\n"


def _value(kc, expr: str, others: list[dict] | None = None) -> str:
    """What the cell printed (a background run's view updates may be filed under any later cell: left out, or kept
    in ``others``; so may the lines its workers print, which Ray forwards to whichever cell is running: only the
    marked line counts)."""
    out = run(kc, f"print('=value=', repr({expr}))", timeout=60, others=others)
    assert not errors(out), text(out)
    marked = [ln for ln in _printed(out).splitlines() if ln.startswith("=value= ")]
    assert len(marked) == 1, _printed(out)
    return marked[0][len("=value= ") :]


def _printed(msgs: list[dict]) -> str:
    return "".join(m["content"]["text"] for m in msgs if m["msg_type"] == "stream")


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The kernels' environment: no Kubernetes. Without RAYNB_HOME: the session's head (inherited)."""
    return {"KUBECONFIG": str(tmp_path_factory.mktemp("runs-home") / "no-kubeconfig")}


def _own_head(home: dict[str, str], tmp_path: Path) -> dict[str, str]:
    """For a test of the head's own life (kept up by a run, stopped, started again): a RAYNB_HOME of its own."""
    return {**home, "RAYNB_HOME": str(tmp_path / "raynb")}


def test_a_run_outlives_a_killed_kernel_and_is_attached_from_a_new_one(
    home: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a head of its own: the run's lease keeps the head up after its kernel is killed; a new kernel lists,
    follows, attaches and removes it; once the run has ended (plus the idle delay, shortened here) and no kernel uses
    the head, the head goes."""
    env = _own_head(home, tmp_path)
    until = tmp_path / "stop-at-step"  # the run goes on until the test writes a step here, and ends at that step
    with kernel(env=env) as (km, kc):
        up = run(kc, "%load_ext raynb\n%raycluster up --local", timeout=300)
        assert not errors(up), text(up)
        run(kc, "%config RayNB.local_idle_after_run_s = 3")
        cell = (
            "import os, time, raynb, ray.train\nrank = ray.train.get_context().get_world_rank()\ni = 0\n"
            f"while not (os.path.exists({str(until)!r}) and i >= int(open({str(until)!r}).read())):\n"
            "    i += 1\n    time.sleep(0.25)\n    raynb.report(loss=1.0 / i)\n"
            "    if i % 8 == 1:\n        print('rank', rank, 'at', i)\n"
        )
        out = run(kc, "%%raytrain --workers 2 --background --out r --name outlive\n" + cell)
        assert not errors(out), text(out)
        deadline = time.monotonic() + 120
        while int(_value(kc, "r.step")) < 5 and time.monotonic() < deadline:
            time.sleep(0.5)
        km.shutdown_kernel(now=True)  # SIGKILL: no atexit, no goodbye
    time.sleep(5)  # longer than the head waits for a kernel: the run's lease keeps it up
    with kernel(env=env) as (_km, kc):
        up = run(kc, "%load_ext raynb\n%raycluster up --local", timeout=300)
        assert "reusing the embedded Ray head" in text(up), text(up)
        listing = text(run(kc, "%raytrain ls", timeout=60))  # nothing is running in the background here
        row = [ln for ln in listing.splitlines() if ln.startswith("outlive ")]
        assert row and " running " in row[0] and "2" in row[0], listing
        run(kc, "import os\nfrom raynb._cluster import embedded_head")
        leases = _value(kc, "os.listdir(embedded_head.leases_dir())")
        assert leases == "['outlive']", leases  # the run took a lease on the head
        # what rank 1 prints, as it prints it: the lines so far at once, then live ones; after 4 s of live lines the
        # test tells the run at which step to end (a few steps ahead of both ranks), and the follow ends with it
        arrivals: list[tuple[float, str]] = []

        def follow(m: dict) -> None:
            if m["msg_type"] != "stream":
                return
            arrivals.append((time.monotonic(), m["content"]["text"]))
            steps = [int(ln.rsplit(" ", 1)[1]) for _, t in arrivals for ln in t.splitlines() if ln.startswith("rank")]
            if not until.exists() and steps and arrivals[-1][0] - arrivals[0][0] > 4:
                tmp = until.with_suffix(".tmp")  # whole or not there: the workers read it every step
                tmp.write_text(str(steps[-1] + 23))  # 8 steps (2 s) between lines: both ranks are behind that
                tmp.rename(until)

        run(kc, "%raytrain logs outlive --rank 1 --follow", timeout=300, on_msg=follow)
        end = int(until.read_text())
        printed = [f"rank 1 at {i}" for i in range(1, end + 1, 8)]
        followed = "".join(t for _, t in arrivals).splitlines()
        assert followed == [*printed, "(run outlive succeeded)"], followed
        assert arrivals[-1][0] - arrivals[0][0] > 4, arrivals  # live: lines came while the run went on
        attached = run(kc, "%raytrain attach outlive --out a --wait", timeout=300)
        assert not errors(attached), text(attached)
        html = [m for m in attached if m["msg_type"] in ("display_data", "update_display_data")][-1]
        assert 'data-status="succeeded"' in html["content"]["data"]["text/html"]
        out = run(
            kc, "m = a.metrics\nprint(a.status, sorted(set(m.step))[:2], m.step.max(), len(m), sorted(set(m['rank'])))"
        )
        assert f"succeeded [1, 2] {end} {2 * end} [0, 1]" in _printed(out), text(out)  # every step, both ranks
        # finished runs stay attachable until removed
        again = run(
            kc, "import raynb\nb = raynb.attach('outlive', display=False)\nprint(b.status, len(b.metrics))", timeout=120
        )
        assert f"succeeded {2 * end}" in _printed(again), text(again)
        # what the cell printed, before and after the first kernel died, per rank
        logs = _printed(run(kc, "%raytrain logs outlive --rank 1 --tail 3", timeout=60))
        assert logs.splitlines() == printed[-3:], logs
        logs = _printed(run(kc, "%raytrain logs outlive", timeout=60))
        assert "[rank 0] rank 0 at 1" in logs and f"[rank 1] {printed[-1]}" in logs
        assert len(logs.splitlines()) == 2 * len(printed), logs
        bad = errors(run(kc, "%raytrain logs outlive --rank 5", timeout=60))
        assert bad and "there is no rank 5" in bad[0]["evalue"], bad
        gone = run(kc, "%raytrain rm outlive\n%raytrain ls", timeout=60)
        assert "removed run outlive" in text(gone) and "no runs on this cluster" in text(gone), text(gone)
    # the last kernel is gone and the run's lease has ended: the head stops by itself
    from raynb._cluster import embedded_head as local

    monkeypatch.setenv("RAYNB_HOME", env["RAYNB_HOME"])
    d = local.state_dir()
    deadline = time.monotonic() + 60
    while (d / "head.json").exists() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not (d / "head.json").exists(), "the head must stop once its runs' leases end and no kernel uses it"
    # what a new head says of the run (gone with the old one): integration/test_train.py, from the journal entry


def test_a_background_run_stopped_from_another_kernel_and_the_refusals(home: dict[str, str]) -> None:
    """On the session's head: a background run leaves its kernel free while its view keeps updating; a second kernel
    is refused a name in use and `down`, stops the run by name, and is told what it cannot stop or attach."""
    with kernel(env=home) as (_km, a), kernel(env=home) as (_km2, b):
        for kc in (a, b):
            up = run(kc, "%load_ext raynb\nimport raynb\n%raycluster up --local", timeout=300)
            assert not errors(up), text(up)
        started = run(a, "%%raytrain --workers 2 --background --out r --name long\n" + LOOP.format(n=10_000, dt=0.2))
        assert not errors(started), text(started)
        seen: list[dict] = []  # every message, whichever cell ipykernel files a background update under
        assert _value(a, "r.status", others=seen) in ("'starting'", "'running'")
        round_trips = []
        for _ in range(5):  # the kernel answers while the run goes on
            t0 = time.monotonic()
            out = run(a, "6 * 7", timeout=60, others=seen)
            round_trips.append(time.monotonic() - t0)
            seen += out
            assert "42" in text(out)
        assert max(round_trips) < 1.0, round_trips
        assert _value(a, "r.done()", others=seen) == "False"
        deadline = time.monotonic() + 120
        while int(_value(a, "r.step", others=seen)) < 3 and time.monotonic() < deadline:
            time.sleep(0.5)
        # a second run with a name in use: refused, with a way out
        dup = errors(run(b, "%%raytrain --workers 1 --name long\npass\n", timeout=60))
        assert dup and "A run named 'long' is going on on this cluster" in dup[0]["evalue"], dup
        assert "--name long-2" in "".join(dup[0]["traceback"])
        # `down` while a run goes on: refused without --force
        down = errors(run(b, "%raycluster down", timeout=60))
        assert down and "1 run(s) still going on this cluster: long" in down[0]["evalue"], down
        stopped = run(b, "%raytrain stop long", timeout=60)
        assert "stopped run long" in _printed(stopped), text(stopped)
        out = run(a, "print(r.wait(60), r.done(), r.status, r.step >= 3)", timeout=90, others=seen)
        seen += out
        assert "True True aborted True" in _printed(out), text(out)
        # the cell's live view (its display id) kept updating from the background, up to the final picture
        view_id = next(
            m["content"]["transient"]["display_id"]
            for m in started
            if m["msg_type"] == "display_data" and "raynb-run" in m["content"]["data"].get("text/html", "")
        )
        updates = [
            m
            for m in seen
            if m["msg_type"] == "update_display_data" and m["content"]["transient"]["display_id"] == view_id
        ]
        assert len(updates) >= 3 and 'data-status="aborted"' in updates[-1]["content"]["data"]["text/html"]
        out = run(a, "import asyncio\nr2 = await r\nprint(r2 is r)")  # `await run` in async code
        assert "True" in text(out), text(out)
        again = errors(run(b, "%raytrain stop long", timeout=60))
        assert again and "has already ended (aborted)" in again[0]["evalue"], again
        unknown = errors(run(b, "%raytrain attach nope", timeout=60))
        assert unknown and "No run named 'nope'" in unknown[0]["evalue"] and "long" in "".join(unknown[0]["traceback"])
