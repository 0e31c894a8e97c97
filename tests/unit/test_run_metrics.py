"""``run.metrics`` after Ray Train started the workers again from a checkpoint: each step once, the redone steps
the later attempt's (a node really lost mid-run: tests/integration/test_nodes.py)."""

from __future__ import annotations

from raynb._runs.metrics_table import metrics_table


def test_each_step_once_after_a_restart_from_a_checkpoint() -> None:
    # attempt 1 reached step 7 on rank 0 and step 5 on rank 1; attempt 2 resumed from the checkpoint of step 3
    first = [
        {"rank": r, "step": s, "attempt": 1, "time": 100.0 + s} for r, last in ((0, 7), (1, 5)) for s in range(last + 1)
    ]
    second = [{"rank": r, "step": s, "attempt": 2, "time": 120.0 + s} for r in (0, 1) for s in range(4, 10)]
    df = metrics_table(first + second, 100.0)
    assert not df.duplicated(["rank", "step"]).any()
    for rank in (0, 1):
        mine = df[df["rank"] == rank]
        assert list(mine["step"]) == list(range(10))
        assert set(mine[mine["step"] < 4]["attempt"]) == {1} and set(mine[mine["step"] >= 4]["attempt"]) == {2}


def test_a_run_without_a_restart_keeps_every_record() -> None:
    records = [{"rank": 0, "step": s % 3, "attempt": 1, "time": 100.0 + s} for s in range(6)]  # steps may repeat
    assert len(metrics_table(records, 100.0)) == 6
