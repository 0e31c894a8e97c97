"""display: pure series derivations, the SVG chart, the HTML/text views of a run."""

from __future__ import annotations

import re
from types import SimpleNamespace
from typing import Any

from raynb._shared import series as S
from raynb.display import LiveView, render_bundle
from raynb.display.svg import line_chart
from tests.unit.fake_run import fake_run


def _recs(ranks: int = 2, steps: int = 5, dt: float = 0.5, samples: int = 64, loss0: float = 2.0) -> list[dict]:
    out = []
    for r in range(ranks):
        for s in range(1, steps + 1):
            out.append({"rank": r, "step": s, "time": 100 + s * dt, "loss": loss0 / s + r * 0.5, "samples": samples})
    return out


def test_throughput_from_counts_sums_complete_steps() -> None:
    unit, tp = S.throughput_series(_recs())
    assert unit == "samples/s"
    assert tp["rank 0"][0] == (2.0, 128.0)  # 64 samples in 0.5 s, from step 2 on
    assert S.total(tp)[-1] == (5.0, 256.0)
    assert S.latest_throughput(tp) == 256.0


def test_total_leaves_out_a_step_not_every_rank_reported() -> None:
    recs = [*_recs(), {"rank": 0, "step": 6, "time": 103.5, "samples": 64}]
    _, tp = S.throughput_series(recs)
    assert S.total(tp)[-1][0] == 5.0


def test_rate_keys_win_over_counts() -> None:
    unit, tp = S.throughput_series([{"rank": 0, "step": 1, "time": 1, "tokens_per_s": 5000.0, "tokens": 1}])
    assert unit == "tokens/s" and tp["rank 0"] == [(1.0, 5000.0)]


def test_differ_detects_ranks_apart() -> None:
    same = S.metric_series([{"rank": r, "step": 1, "loss": 1.0} for r in range(3)])
    apart = S.metric_series(_recs())
    assert not S.differ(same) and S.differ(apart)


def test_downsample_bounds_points_and_keeps_ends() -> None:
    pts = [(float(i), float(i * i)) for i in range(10_000)]
    d = S.downsample(pts, 300)
    assert len(d) <= 300 and d[0] == pts[0] and d[-1] == pts[-1]


def test_svg_chart_counts_points_and_stays_small() -> None:
    series = {"rank 0": [(float(i), 1.0 / (i + 1)) for i in range(1000)]}
    svg = line_chart(series, title="loss", chart_id="loss")
    assert 'data-points="1000"' in svg and "<polyline" in svg
    assert len(svg) < 15_000
    assert "waiting for the first report" in line_chart({}, title="loss")


def _run(records: list[dict], status: str = "running", error: Any = None, attempt: int = 1) -> SimpleNamespace:
    return fake_run(records, status=status, error=error, attempt=attempt, max_failures=2, aborted_at_step=3)


def test_bundle_has_html_and_text() -> None:
    b = render_bundle(_run(_recs()))
    assert "step 5" in b["text/plain"] and "samples/s" in b["text/plain"] and "1:05" in b["text/plain"]
    html = b["text/html"]
    assert 'data-status="running"' in html and html.count("<svg") == 2
    assert re.search(r'data-chart="loss" data-points="10"', html)


def test_aborted_run_says_at_which_step() -> None:
    assert "aborted at step 3" in render_bundle(_run(_recs(), status="aborted"))["text/plain"]


def test_a_restarted_run_says_which_attempt() -> None:
    b = render_bundle(_run(_recs(), attempt=2))
    assert "attempt 2 of 3 (restarted after a worker failed)" in b["text/plain"] and "attempt 2 of 3" in b["text/html"]


def test_a_run_restarted_after_its_node_was_lost_names_the_node_and_its_ranks() -> None:
    lost = {"node": "ip-10-0-1-7", "node_lost": "13dd83e2 at 10.0.1.7", "pid": 7, "why": "health check failed"}
    restart = {"kind": "restart", "attempt": 2, "lost": [{**lost, "rank": 1}, {**lost, "rank": 3}]}
    run = fake_run(_recs(), attempt=2, max_failures=1, events=[restart])
    assert (
        "attempt 2 of 2 (restarted after node ip-10-0-1-7 (13dd83e2 at 10.0.1.7) was lost with ranks 1, 3: "
        "health check failed)" in render_bundle(run)["text/plain"]
    )


def test_a_resumed_attempt_says_which_checkpoint_and_that_a_newer_one_was_not_registered() -> None:
    """Ray Train resumes from the newest checkpoint its controller registered: step 8's, written a second before the
    node went, was not yet, and steps 5-8 run again -- said, so that it does not look like lost work."""
    from raynb.display.restart_text import resumed_text

    def written(*steps: int, attempt: int = 1) -> list[dict]:
        return [{"kind": "checkpoint", "rank": 0, "step": s, "attempt": attempt} for s in steps]

    late = resumed_text(5, written(2, 4, 6, 8), attempt=2)
    assert late.startswith("resumed at step 5 from step 4's checkpoint (step 8's checkpoint was written, but Ray Train")
    assert "steps 5-8 run again" in late
    assert resumed_text(9, written(4, 8), attempt=2) == "resumed at step 9 from step 8's checkpoint"
    assert resumed_text(0, written(3), attempt=2).startswith("resumed at step 0 from the start (step 3's")
    assert resumed_text(5, [], attempt=2) == "resumed at step 5"  # no checkpoint seen (an earlier raynb's workers)
    # only the attempt before counts: attempt 1's checkpoints say nothing of where attempt 3 began
    assert (
        resumed_text(11, written(4, 12) + written(10, attempt=2), attempt=3)
        == "resumed at step 11 from step 10's checkpoint"
    )
    records = [{"rank": 0, "step": s, "loss": 1.0, "time": 100.0 + s, "attempt": 1} for s in range(9)]
    records += [{"rank": 0, "step": s, "loss": 1.0, "time": 120.0 + s, "attempt": 2} for s in range(5, 9)]
    run = fake_run(records, attempt=2, max_failures=1, events=written(4, 8))
    assert "resumed at step 5 from step 4's checkpoint (step 8's" in render_bundle(run)["text/plain"]


class _Handle:
    def __init__(self) -> None:
        self.updates = 0

    def update(self, _obj: Any) -> None:
        self.updates += 1


def test_live_view_throttles_and_skips_unchanged(monkeypatch) -> None:
    """Each mechanism on its own: a change within the period waits (throttle); no change after the period is not
    drawn (change check); a change after the period is drawn."""
    import raynb.display as D

    now = [1000.0]
    monkeypatch.setattr(D.time, "monotonic", lambda: now[0])
    run = _run(_recs(steps=2))
    view = LiveView(run, mode="html", hz=4)
    view._handle = _Handle()
    view.refresh(force=True)
    assert view._handle.updates == 1
    run.records = _recs(steps=3)  # changed, 0.1 s later: within the 0.25 s period
    now[0] += 0.1
    view.refresh()
    assert view._handle.updates == 1, "a change inside the period must wait (throttle)"
    now[0] += 0.2  # the period is over, and the change is still there
    view.refresh()
    assert view._handle.updates == 2, "a change after the period must be drawn"
    now[0] += 10.0  # long after, nothing changed
    view.refresh()
    assert view._handle.updates == 2, "an unchanged run must not be redrawn"
    run.status = run.phase = "succeeded"
    view.refresh()
    assert view._handle.updates == 3


def test_text_mode_writes_one_line() -> None:
    import io

    buf = io.StringIO()
    view = LiveView(_run(_recs(), status="succeeded"), mode="text", stream=buf)
    view.start()
    view.finish()
    out = buf.getvalue()
    assert out.startswith("\r[r1] succeeded") and out.endswith("\n")
    assert "step " in out and "loss " in out and "samples/s" in out, out  # what terminal IPython's line says


def test_the_view_says_its_shape_and_what_torch_compile_read_from_the_cache() -> None:
    """Each worker's CPUs (its threads) beside the worker count; once the ranks finish, how many FX graphs
    torch.compile built and how many it read back from the node's caches (an earlier run's compiles)."""
    done = [{"kind": "worker_done", "rank": r, "compiled": 0, "compiled_from_cache": 3} for r in (0, 1)]
    run = fake_run(_recs(), status="succeeded", gpu=True, cpus_per_worker=15.0, events=done)
    text, html = render_bundle(run)["text/plain"], render_bundle(run)["text/html"]
    assert "2 GPU workers × 15 CPUs" in text and "compiled from cache (6 graphs)" in text, text
    assert "<b>2</b> GPU workers × 15 CPUs" in html and 'class="raynb-compile">compiled from cache' in html
    first = [{"kind": "worker_done", "rank": 0, "compiled": 4, "compiled_from_cache": 0}]
    text = render_bundle(fake_run(_recs(), status="succeeded", events=first))["text/plain"]
    assert "compiled 4 graphs (cached on the node for the next run)" in text, text
    assert "compiled" not in render_bundle(fake_run(_recs(), status="succeeded"))["text/plain"]  # no torch.compile
    kept = [{"kind": "worker_done", "rank": 0, "compiled": 4, "compiled_from_cache": 0, "compile_cache_saved": 8}]
    text = render_bundle(fake_run(_recs(), status="succeeded", events=kept))["text/plain"]
    assert "compiled 4 graphs (kept in the run's storage for new nodes)" in text, text
    fresh_node = [
        {"kind": "worker_done", "rank": 0, "compiled": 0, "compiled_from_cache": 4, "compile_cache_loaded": 8}
    ]
    text = render_bundle(fake_run(_recs(), status="succeeded", events=fresh_node))["text/plain"]
    assert "compiled from cache (4 graphs, read from the run's storage)" in text, text


def test_run_error_carries_the_nccl_reason() -> None:
    from raynb._runs.run_error import RunError

    err = RunError(
        [0, 1],
        2,
        "DistBackendError",
        "NCCL error: invalid usage",
        {0: ["  cell line 7, in train_loop_per_worker", "    dist.all_reduce(x)"]},
        detail="NCCL on rank 0: NCCL could not initialise any network plugin",
    )
    text = str(err)
    assert text.startswith("All 2 workers failed with DistBackendError") and "cell line 7" in text
    assert text.endswith("NCCL on rank 0: NCCL could not initialise any network plugin")


def test_a_finished_short_run_says_its_mean_throughput() -> None:
    """The quickstart's 150 steps end within the live window's 2 s: the finished line says the run's mean rate
    rather than "– samples/s" beside a chart that has the numbers; a burst of back-to-back reports still has none."""
    short = _recs(steps=30, dt=0.05)  # 1.5 s of 2 ranks x 64 samples every 0.05 s: 2,560 samples/s
    assert "– samples/s" in render_bundle(_run(short))["text/plain"]  # live: no time base yet
    line = render_bundle(_run(short, status="succeeded"))["text/plain"].splitlines()[0]
    assert "2,560 samples/s total (1,280 per rank), mean of the run" in line, line
    quick = render_bundle(_run(_recs(steps=150, dt=0.002), status="succeeded"))["text/plain"]  # the quickstart's
    assert "64,000 samples/s total (32,000 per rank), mean of the run" in quick, quick  # 150 steps in 0.3 s
    burst = render_bundle(_run(_recs(steps=5, dt=0.001), status="succeeded"))  # 5 back-to-back reports
    assert "– samples/s" in burst["text/plain"] and "– samples/s" in burst["text/html"], burst["text/plain"]
