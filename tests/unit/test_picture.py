"""The run's picture as its sink keeps it: bounded however long the run, and faithful to the records."""

from __future__ import annotations

import pickle
import random

import pytest

from raynb._shared.flat_series import CountsTail, StepCounts
from raynb._shared.picture import COUNT_STEPS, OPEN_STEPS, Aggregate, Decimated
from raynb.display import render_bundle

from .test_display import _run


def _records(ranks: int, steps: int, *, attempt_at: int | None = None) -> list[dict]:
    out = []
    for step in range(1, steps + 1):
        for rank in range(ranks):
            rec = {"rank": rank, "step": step, "time": step * 0.1, "loss": 10.0 / step + rank, "samples": 32}
            if attempt_at is not None:
                rec["attempt"] = 2 if step >= attempt_at else 1
            out.append(rec)
    return out


def test_decimated_series_stays_bounded_and_keeps_the_mean() -> None:
    d = Decimated(cap=64)
    ys = [random.Random(1).random() for _ in range(10_000)]
    for i, y in enumerate(ys):
        d.append(float(i), y)
    pts = d.view()
    assert len(pts) <= 65 and d.per_point == 256
    assert pts[0][0] < 256 and pts[-1][0] > 9_000  # spans the whole run
    # every kept point is the mean of the points it stands for: the weighted mean of the whole is kept
    kept = sum(y for _x, y in d.points) * d.per_point + d._acc[1]
    assert abs(kept - sum(ys)) < 1e-6


def test_a_long_wide_run_is_a_small_picture() -> None:
    agg = Aggregate()
    for step in range(1, 20_001):  # 16 ranks x 20,000 steps = 320,000 records, in batches as the sink gets them
        agg.add([{"rank": r, "step": step, "time": step * 0.1, "loss": 1.0 / step, "samples": 8} for r in range(16)])
    assert agg.records == 320_000 and agg.ranks == 16
    assert agg.metric == {} and agg.tput == {}  # > 8 ranks: cross-rank views only
    mean, total = agg.metric_mean(), agg.tput_total()
    assert 100 < len(mean) <= 1024 + 2 * OPEN_STEPS and 100 < len(total) <= 1024 + 2 * OPEN_STEPS
    assert mean[-1][0] == 20_000.0 and abs(mean[-1][1] - 1.0 / 20_000) < 1e-12 and abs(total[-1][1] - 16 * 80.0) < 1e-6
    assert len(pickle.dumps(agg)) < 200_000  # what the notebook fetches
    assert agg.counted_rate() == 16 * 8 / 0.1  # from the newest steps only
    assert len(agg._counts) <= 2 * COUNT_STEPS


def test_picture_matches_aggregating_the_records_here() -> None:
    recs = _records(ranks=2, steps=50)
    here = Aggregate().update(recs)
    sink = Aggregate()
    for i in range(0, len(recs), 7):
        sink.add(recs[i : i + 7])
    assert sink.metric_series() == here.metric_series() and sink.tput_total() == here.tput_total()
    a, b = render_bundle(_run(recs)), render_bundle(_with_picture(recs, sink))
    assert a == b


def _with_picture(recs: list[dict], picture: Aggregate):
    run = _run(recs)
    run.records, run.picture = [], picture  # the view draws from the picture, never from records
    return run


def test_a_restart_is_marked_on_both_charts() -> None:
    recs = _records(ranks=2, steps=30, attempt_at=12)
    html = render_bundle(_with_picture(recs, Aggregate().add(recs)))["text/html"]
    assert html.count('class="raynb-mark"') == 2 and "restart 2" in html


def test_a_rank_far_behind_does_not_bend_the_mean() -> None:
    agg = Aggregate()
    for step in range(1, 1001):
        agg.add([{"rank": 0, "step": step, "time": step, "loss": 1.0}])
    agg.add([{"rank": 1, "step": 1, "time": 1, "loss": 99.0}])  # 1,000 steps late: its step was folded already
    assert max(y for _x, y in agg.metric_mean()) == 1.0


def test_the_pause_between_warm_cells_is_not_a_slow_step() -> None:
    """A warm group's cells report with a `cell` tag; the minutes between two cells must not show as one slow step
    or drag the current throughput down."""
    agg = Aggregate()
    for cell, start in ((1, 0.0), (2, 300.0)):  # cell 2 starts five minutes after cell 1 ended
        for i in range(1, 41):
            step = (cell - 1) * 40 + i
            agg.add(
                [
                    {"rank": r, "step": step, "time": start + i * 0.1, "loss": 1.0, "tokens": 100, "cell": cell}
                    for r in range(2)
                ]
            )
    rates = [y for _x, y in agg.tput_total()]
    assert abs(min(rates) - 2000) < 1e-6 and abs(max(rates) - 2000) < 1e-6  # no dip at the first step of cell 2
    assert abs(agg.counted_rate() - 2 * 100 / 0.1) < 1e-6  # over cell 2 only, not across the pause


def test_two_ranks_past_the_point_bound_draw_at_most_1024_points_a_line() -> None:
    """The quickstart at 1,500 steps (once the browser test's run): each rank's loss line is halved into wider
    buckets past 1,024 points, so the chart holds between 500 and 1,025 points a line, its last step included."""
    import re

    recs = _records(ranks=2, steps=1500)
    agg = Aggregate()
    for i in range(0, len(recs), 2):  # a step at a time, as the sink gets them
        agg.add(recs[i : i + 2])
    html = render_bundle(_with_picture(recs, agg))["text/html"]
    points = int(re.search(r'data-chart="loss" data-points="(\d+)"', html)[1])
    assert 2 * 500 <= points <= 2 * 1025, points
    assert all(line[-1][0] >= 1499 for line in agg.metric_series().values())  # up to the last step (bucket means)


def test_a_picture_pickled_where_it_lived_before_the_move_still_loads() -> None:
    """A sink started by a raynb from before the house by process (an embedded head kept across an upgrade) pickles
    the picture under its old module, ``raynb.display.aggregate``; the kernel reads it as today's."""
    import sys

    from raynb._shared import picture
    from raynb._shared.picture import loads

    agg = Aggregate().update(_records(2, 50))
    homes = {cls: cls.__module__ for cls in (Aggregate, Decimated)}
    sys.modules["raynb.display.aggregate"] = picture  # the class where the old sink had it
    try:
        for cls in homes:
            cls.__module__ = "raynb.display.aggregate"
        old = pickle.dumps(agg)
    finally:
        for cls, home in homes.items():
            cls.__module__ = home
        del sys.modules["raynb.display.aggregate"]
    assert b"raynb.display.aggregate" in old
    with_new_names = loads(old)
    assert type(with_new_names) is Aggregate and with_new_names.records == agg.records
    assert with_new_names.tput_total() == agg.tput_total()


def test_a_picture_crosses_the_wire_as_a_few_arrays_and_draws_the_same() -> None:
    """The sink pickles the picture up to four times a second while the run trains beside it: its series are flat
    arrays, so loading one in the notebook makes a few dozen objects, not one per point (a kernel that has imported
    torch paid a full garbage collection every few pictures). What the view draws is the same as the sink's."""
    import gc

    from raynb._shared.picture import loads

    recs = _records(ranks=2, steps=3000)
    sink = Aggregate()
    for i in range(0, len(recs), 8):
        sink.add(recs[i : i + 8])
    data = pickle.dumps(sink, protocol=pickle.HIGHEST_PROTOCOL)
    gc.collect()
    gc.disable()
    try:
        before = gc.get_count()[0]
        here = loads(data)
        made = gc.get_count()[0] - before  # container objects this load made (8,759 as lists of pairs)
    finally:
        gc.enable()
    assert made < 1000, made
    assert here.metric_series() == sink.metric_series() and here.tput_series() == sink.tput_series()
    assert here.metric_mean() == sink.metric_mean() and here.tput_total() == sink.tput_total()
    assert here.counted_rate() == sink.counted_rate() == 2 * 32 / 0.1
    finished = {"window_s": float("inf"), "min_span_s": 0.0, "min_steps": 2}
    assert here.counted_rate(**finished) == sink.counted_rate(**finished)
    # a loaded picture that gets records (the notebook's own aggregate of an attached run) goes on as the sink's
    more = [{**r, "step": r["step"] + 3000, "time": r["time"] + 300.0} for r in _records(ranks=2, steps=50)]
    here.add(more), sink.add(more)
    assert here.counted_rate() == sink.counted_rate() and here.tput_total() == sink.tput_total()


def test_a_reader_holding_a_copy_gets_what_the_series_added_and_draws_the_same() -> None:
    """A kernel following a run asks for the picture with its copy's shape: each series that only grew since comes
    as what it added, one decimated since (or new: a rank that joined) comes whole; either way the reader draws
    what the sink holds, for a fraction of the bytes."""
    from raynb._shared import wire
    from raynb._shared.picture import dumps, loads

    recs = _records(ranks=2, steps=4000)
    sink = Aggregate().update(recs[:2000])
    reader = loads(dumps(sink))

    def same(a: Aggregate, b: Aggregate) -> bool:
        return (
            a.metric_series() == b.metric_series()
            and a.tput_series() == b.tput_series()
            and a.metric_mean() == b.metric_mean()
            and a.tput_total() == b.tput_total()
            and a.counted_rate() == b.counted_rate()
        )

    sink.update(recs[:2100])  # 50 steps more: every series only grew
    full, delta = dumps(sink), dumps(sink, reader.shape())
    assert len(delta) < len(full) - 2 * 16 * 900  # the ranks' 2 x 1000 points stay home (16 bytes each)
    counts = pickle.loads(delta)._counts  # ... and the per-step counts of 1,000 steps: the 50 that changed
    assert isinstance(counts, CountsTail) and len(counts.rows) == 50 and len(pickle.dumps(counts)) < 4000
    assert wire.loads(wire.dumps({"since": reader.shape()}))["since"] != reader.shape()  # the Jobs path's JSON ...
    assert dumps(sink, wire.loads(wire.dumps({"since": reader.shape()}))["since"]) == delta  # ... asks the same
    reader = loads(delta, reader)
    assert same(reader, sink) and same(reader, loads(full))
    shape = reader.shape()
    sink.update(recs)  # past 1024 points: every series halves (decimated), so none is a tail of the copy
    sink.add([{"rank": 2, "step": 4001, "time": 400.1, "loss": 1.0, "samples": 32}])  # and a rank that joined
    assert all(s.shape()[0] > shape[s.uid][0] for s in sink._series() if s.uid in shape)  # each one decimated
    reader = loads(dumps(sink, shape), reader)
    assert same(reader, sink) and len(reader.metric) == 3
    # a tail for a copy this reader does not hold is an error, not a wrong picture
    sink.add([{"rank": 0, "step": 4002, "time": 400.2, "loss": 1.0, "samples": 32}])
    with pytest.raises(ValueError, match="does not hold"):
        loads(dumps(sink, reader.shape()), Aggregate())


def test_a_picture_in_the_form_an_earlier_sink_pickled_still_loads() -> None:
    """A sink started by an earlier raynb (an embedded head kept across an upgrade) holds each series as a list of
    point pairs and the per-step counts as a dict: the kernel reads them as today's."""
    agg = Aggregate().update(_records(2, 200))
    state = dict(agg.__dict__)
    state["_counts"] = {k: list(v) for k, v in agg._counts._steps.items()}
    old_lines = {}
    for rank, line in agg.metric.items():
        old = Decimated.__new__(Decimated)
        old.__setstate__(
            (None, {"cap": line.cap, "per_point": line.per_point, "_acc": line._acc, "points": line.points})
        )
        old_lines[rank] = old
    state["metric"] = old_lines
    loaded = Aggregate.__new__(Aggregate)
    loaded.__setstate__(state)
    assert loaded.metric_series() == agg.metric_series()
    assert loaded.counted_rate() == agg.counted_rate() == 2 * 32 / 0.1


def test_the_per_step_counts_go_as_the_steps_that_changed_and_come_out_as_the_senders() -> None:
    """The reader's copy of the per-step counts, brought up to date by the steps that changed since: new steps,
    old ones a lagging rank reported, and the oldest dropped as the sender dropped them. The copy itself is left as
    it was (the view may be drawing it)."""
    sink = StepCounts(keep=64)
    for step in range(1, 101):  # rank 0 alone
        sink.add(step, 32, step * 0.1, (1, 0))
    copy = pickle.loads(pickle.dumps(sink))  # the reader's: columns, as unpickled
    before = copy.as_dict()
    for step in range(80, 100):  # rank 1, behind: steps the copy holds change
        sink.add(step, 32, step * 0.1 + 0.05, (1, 0))
    for step in range(101, 131):  # rank 0 goes on: past 2 x 64 steps, the sender keeps its newest 64 then
        sink.add(step, 32, step * 0.1, (1, 0))
    tail = sink.since(copy.shape())
    assert isinstance(tail, CountsTail) and len(tail.rows) == 50 and tail.first == 66
    got = tail.onto(copy)
    assert got.as_dict() == sink.as_dict() and list(got.as_dict()) == list(range(66, 131))
    assert got.complete(2, (1, 0)) == sink.complete(2, (1, 0)) and len(got.complete(2, (1, 0))) == 20
    assert copy.as_dict() == before and got.uid == copy.uid == sink.uid
    assert sink.since((sink.shape()[0] + 1, 0)) is None  # not an earlier state of this one: sent whole
    again = pickle.loads(pickle.dumps(got))  # a copy made from a tail goes on taking tails
    sink.add(131, 32, 13.1, (1, 0))
    assert sink.since(again.shape()).onto(again).as_dict() == sink.as_dict()  # type: ignore[union-attr]
    old = StepCounts.__new__(StepCounts)  # as a sink of an earlier raynb pickled them: no uid, no changes column
    old.__setstate__((64, pickle.loads(pickle.dumps(sink)).__getstate__()[1][:6]))
    assert old.complete(2, (1, 0)) == sink.complete(2, (1, 0)) and old.since((0, 0)) is not None
