"""How far a run is and whether it is stuck (``_shared/progress.py``), from the picture its records make; the view's
bar and stall banner, ``%raytrain ls``'s cells, Hugging Face's Trainer hooked for its own total."""

from __future__ import annotations

import pickle
import sys
import time

import pytest

from raynb._runs.catalog import RunList
from raynb._runs.metrics_table import metrics_table
from raynb._shared.picture import Aggregate
from raynb._shared.progress import progress, stall
from raynb.display import render_bundle
from tests.unit.fake_run import fake_run


def _steps(n: int, *, dt: float = 0.5, t0: float = 1000.0, first: int = 0, ranks: int = 2, **extra: object) -> list:
    return [
        {"rank": r, "step": s, "time": t0 + (s - first) * dt, "loss": 1.0 / (s + 1), **extra}
        for s in range(first, first + n)
        for r in range(ranks)
    ]


def test_half_way_with_a_total_says_the_fraction_and_the_time_left_at_the_recent_pace() -> None:
    agg = Aggregate().add(_steps(10))  # steps 0..9 every 0.5 s: 10 of 20 done
    p = progress(agg, total=20)
    assert (p.done, p.total, p.fraction) == (10, 20, 0.5)
    assert p.steps_per_s == pytest.approx(2.0) and p.left_s == pytest.approx(5.0)
    # counting down from the last step: 2 s after it, 3 s are left
    assert progress(agg, total=20, now=1000.0 + 9 * 0.5 + 2.0).left_s == pytest.approx(3.0)


def test_no_total_no_fraction_and_nothing_invented() -> None:
    p = progress(Aggregate().add(_steps(10)))
    assert (p.total, p.fraction, p.left_s) == (None, None, None) and p.steps_per_s == pytest.approx(2.0)


def test_steps_from_1_count_as_done_and_a_reported_total_is_used_unless_the_notebook_gave_one() -> None:
    agg = Aggregate().add(_steps(5, first=1, total=40))  # raynb.report without step= counts from 1
    assert progress(agg).done == 5 and progress(agg).total == 40 and progress(agg).fraction == 0.125
    assert progress(agg, total=10).fraction == 0.5  # --steps wins


def test_the_pace_starts_again_after_a_restart() -> None:
    first = _steps(10, dt=0.1)
    again = [{**r, "attempt": 2, "time": r["time"] + 100} for r in _steps(4, dt=1.0, first=6)]
    agg = Aggregate().add(first + again)
    p = progress(agg, total=20)
    assert p.done == 10 and p.steps_per_s == pytest.approx(1.0), "the new attempt's pace, not across the pause"


def test_a_stall_is_named_past_the_window_and_not_before_the_second_step() -> None:
    agg = Aggregate().add(_steps(1))
    assert stall(agg, 5000.0, factor=10, min_s=3) is None, "one step: its start-up and compiles predict nothing"
    agg = Aggregate().add(_steps(6))  # 0.5 s a step, the last at t=1002.5
    assert stall(agg, 1002.5 + 2.9, factor=4, min_s=3) is None  # window max(3, 4 x 0.5) = 3 s
    verdict = stall(agg, 1002.5 + 3.5, factor=4, min_s=3)
    assert verdict is not None and verdict.window_s == 3 and verdict.quiet_s == pytest.approx(3.5)
    assert verdict.ranks[1] == {"step": 5, "ago_s": pytest.approx(3.5)}
    assert verdict.text().startswith("no new step for 4 s (over 3 s); last reports: rank 0 at step 5 4 s ago")
    assert stall(agg, 1002.5 + 9.0, factor=20, min_s=3) is None, "20 x 0.5 s: a 10 s window"


def test_a_gpu_that_keeps_working_is_no_stall_and_a_flat_one_is() -> None:
    steps = _steps(6)
    working = [{"kind": "gpu", "rank": 0, "time": 1003.0 + i, "gpu_util": 20.0 + 30 * (i % 2)} for i in range(5)]
    flat = [{"kind": "gpu", "rank": 0, "time": 1003.0 + i, "gpu_util": 99.0} for i in range(5)]
    assert stall(Aggregate().add(steps + working), 1010.0, factor=4, min_s=3) is None
    assert stall(Aggregate().add(steps + flat), 1010.0, factor=4, min_s=3) is not None


def test_a_frameworks_progress_samples_advance_steps_but_are_no_rows_of_the_metrics() -> None:
    samples = [
        {"kind": "progress", "rank": 0, "step": 0, "time": 1000.0 + i, "at_step": i + 1, "total": 24} for i in range(6)
    ]
    agg = Aggregate().add(samples)
    p = progress(agg)
    assert (p.done, p.total, p.fraction) == (6, 24, 0.25) and p.steps_per_s == pytest.approx(1.0)
    assert agg.records == 0 and metrics_table(samples, None).empty


def test_a_picture_pickled_by_an_earlier_sink_reads_with_no_progress() -> None:
    agg = Aggregate().add(_steps(3))
    for name in ("total", "first_step", "top_step", "advances", "last_seen", "gpu_recent"):
        del agg.__dict__[name]  # as an Aggregate of before issue 42
    old = pickle.loads(pickle.dumps(agg))
    assert progress(old).done == 0 and stall(old, 9e9, factor=1, min_s=1) is None
    old.add(_steps(2, first=3, t0=1010.0))
    assert progress(old).done == 4


def test_the_view_shows_the_bar_the_time_left_and_the_cost_to_finish() -> None:
    now = time.time()
    recs = _steps(10, t0=now - 4.5)  # the last step just now
    run = fake_run(recs, total_steps=20, usd_per_hour=36.0)
    html, text = render_bundle(run)["text/html"], render_bundle(run)["text/plain"]
    assert 'class="raynb-progress" data-fraction="0.5000"' in html
    assert "50% of 20 steps, ~0:0" in text and "left (≈ $0.05 to finish)" in text, text
    assert "raynb-stall" not in html
    done = fake_run(recs, status="succeeded", total_steps=10)
    assert "100% of 10 steps" in render_bundle(done)["text/plain"]
    assert "raynb-progress" not in render_bundle(fake_run(recs))["text/html"], "no total, no bar"


def test_the_view_names_a_stalled_run_and_how_to_stop_it() -> None:
    recs = _steps(6, t0=time.time() - 60)  # the last step 57 s ago, 0.5 s a step
    run = fake_run(recs, stall_min_s=30)
    html, text = render_bundle(run)["text/html"], render_bundle(run)["text/plain"]
    assert 'class="raynb-stall"' in html and "%raytrain stop r1" in html
    assert "Stalled: no new step for 5" in text and "(over 30 s); last reports: rank 0 at step 5" in text, text
    assert "raynb-stall" not in render_bundle(fake_run(recs, status="succeeded", stall_min_s=30))["text/html"]


def test_ls_says_how_far_a_run_is_and_which_one_stalled() -> None:
    base = {"spec": {"workers": 2, "gpu": False}, "started": 1.7e9, "user": "u@h", "last_report": None}
    rows = [
        {**base, "name": "a", "status": "running", "step": 9, "progress": {"total": 20, "fraction": 0.5}},
        {**base, "name": "b", "status": "running", "step": 5, "stall": {"quiet_s": 420.0}},
        {**base, "name": "c", "status": "aborted", "step": 5, "why": "stalled, stopped by raynb (on_stall=stop): no"},
    ]
    table = repr(RunList(rows))
    assert "9 of 20 (50%)" in table
    assert "running, STALLED for 7 min" in table
    assert "aborted (stalled, stopped by raynb (on_stall=stop))" in table


def test_hugging_faces_trainer_says_its_total_without_a_line_in_the_cell() -> None:
    from raynb._remote import framework_hooks

    sent: list[dict] = []
    was_imported = "transformers.trainer_callback" in sys.modules
    undo = framework_hooks.install(sent.append)
    try:
        from transformers.trainer_callback import CallbackHandler, TrainerControl, TrainerState

        handler = CallbackHandler([], None, None, None, None)
        for step in (1, 2, 24):
            state = TrainerState(global_step=step, max_steps=24)
            handler.on_step_end(None, state, TrainerControl())
    finally:
        undo()
    # the first step and the last, at most one a second between
    assert sent == [{"kind": "progress", "at_step": 1, "total": 24}, {"kind": "progress", "at_step": 24, "total": 24}]
    assert not any(isinstance(f, framework_hooks._WhenImported) for f in sys.meta_path), "the finders step aside"
    assert CallbackHandler.on_step_end.__module__ == "transformers.trainer_callback", "undone"
    assert was_imported or not any("lightning" in m for m in sys.modules), "nothing imported that the cell did not"
