"""Run.rate: steady-state throughput excludes the start (compile, warm-up), unlike total / elapsed."""

from __future__ import annotations

from types import SimpleNamespace

from raynb._runs.run import Run


def _run(records: list[dict]) -> Run:
    run = Run.__new__(Run)
    run.stream = SimpleNamespace(records=records, events=[])
    return run


def _slow_start() -> list[dict]:
    """20 steps per rank: steps 1-2 take 10 s each (compile, warm-up), then 2 steps/s."""
    recs = []
    for rank in (0, 1):
        t = 100.0
        for step in range(1, 21):
            t += 10.0 if step <= 2 else 0.5
            recs.append({"rank": rank, "step": step, "time": t, "tokens": 1000})
    return recs


def test_rate_skips_the_slow_first_steps() -> None:
    run = _run(_slow_start())
    assert abs(run.rate("tokens", skip_steps=2) - 4000.0) < 1e-6  # 2 ranks x 1000 tokens x 2 steps/s
    assert abs(run.rate("tokens") - 4000.0) < 1e-6  # default skip (a tenth of 20 steps = 2) leaves the slow ones out
    with_slow = run.rate("tokens", skip_steps=1)  # step 2 (10 s) counted: far slower
    assert with_slow < 0.6 * 4000.0, with_slow
    assert abs(with_slow - 2 * 19 * 1000 / (10.0 + 18 * 0.5)) < 1e-6
    assert run.rate("samples") == 0.0


def test_an_attached_run_cannot_be_rerun_here_and_says_so() -> None:
    import pytest

    from raynb.errors import UsageError

    run = _run([])
    run.name, run._rerun = "long", None
    with pytest.raises(UsageError) as e:
        run.rerun(env={"X": "1"})
    assert "attached here" in e.value.what and "again in this kernel" in e.value.fix
