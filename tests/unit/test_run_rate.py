"""Run.rate: steady-state throughput excludes the start (compile, warm-up), unlike total / elapsed."""

from __future__ import annotations

from types import SimpleNamespace

from raynb._run import Run


def _run(records: list[dict]) -> Run:
    run = Run.__new__(Run)
    run.stream = SimpleNamespace(records=records, events=[])
    return run


def test_rate_skips_the_slow_first_steps() -> None:
    recs = []
    for rank in (0, 1):
        t = 100.0 + 30.0  # 30 s of start-up and a slow first step
        for step in range(1, 21):
            recs.append({"rank": rank, "step": step, "time": t, "tokens": 1000})
            t += 0.5  # then 2 steps/s per rank
    run = _run(recs)
    assert abs(run.rate("tokens", skip_steps=2) - 4000.0) < 1e-6  # 2 ranks x 1000 tokens x 2 steps/s
    assert abs(run.rate("tokens") - 4000.0) < 1e-6  # default skip: a tenth of the steps
    assert run.rate("samples") == 0.0
