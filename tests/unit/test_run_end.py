"""A run's end as a waiting cell sees it: what follows the run (a background view) draws its last picture before
``run.wait()`` returns, and a view that fails to draw does not keep the waiting from ending. (A real background run
stopped from another kernel: tests/notebook/test_runs_outlive_the_kernel.py.)"""

from __future__ import annotations

import threading
import time

from raynb._runs.run import Run


def _run() -> Run:
    run = Run.__new__(Run)
    run._on_end, run._ended = [], threading.Event()
    return run


def test_the_last_picture_is_drawn_before_wait_returns() -> None:
    run, drawn = _run(), []

    def last_picture() -> None:
        time.sleep(0.2)  # a slow redraw
        drawn.append(run.done())

    run._on_end.append(last_picture)
    ender = threading.Thread(target=run._mark_ended)
    ender.start()
    assert run.wait(5) and drawn == [False]  # drawn while the run was not yet "done", and before wait returned
    ender.join()
    run._mark_ended()  # a second end (abort, then the follower's finish) draws nothing twice
    assert drawn == [False]


def test_a_view_that_cannot_draw_does_not_hold_the_wait() -> None:
    run = _run()

    def broken() -> None:
        raise RuntimeError("the front end went away")

    run._on_end.append(broken)
    run._mark_ended()
    assert run.wait(0) and run.done()


def test_a_worker_error_with_no_restart_left_ends_the_run_after_a_moments_grace() -> None:
    """Issue 41: the kernel shows a run failed when a worker raised on its last attempt (attempts count from 1;
    ``max_failures`` restarts), not on an attempt Ray Train will start again, and never when restarts are endless."""
    from raynb._runs import early_failure

    first = [{"kind": "worker_started", "rank": 0, "attempt": 1}, {"kind": "worker_error", "rank": 1, "attempt": 1}]
    second = [*first, {"kind": "worker_error", "rank": 0, "attempt": 2}]
    watch = early_failure.EarlyFailure(max_failures=0)
    assert not watch.due(first[:1])
    assert not watch.due(first)  # seen, and its peers' errors get the grace
    time.sleep(early_failure.FAIL_GRACE_S)
    assert watch.due(first)
    once = early_failure.EarlyFailure(max_failures=1)
    assert not once.due(first)  # Ray Train starts the workers again
    assert not once.due(second)
    time.sleep(early_failure.FAIL_GRACE_S)
    assert once.due(second)
    forever = early_failure.EarlyFailure(max_failures=-1)
    assert not forever.due(second) and forever.seen is None
