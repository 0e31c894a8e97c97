"""What of the cluster's log stream reaches the cell: real lines as Ray 2.58 sends them over Ray Client (captured from
a failing 2-worker run on the embedded cluster)."""

from __future__ import annotations

from raynb._cluster.log_filter import LineFilter

W, C = "\x1b[36m(RayTrainWorker pid=2033)\x1b[0m ", "\x1b[36m(TrainController pid=1827)\x1b[0m "
FAILING_RUN = [
    W + "user print before the failure\n",
    W + "Error in training function:\n",
    W + "Traceback (most recent call last):\n",
    W + '  File "/work/main/raynb/_worker.py", line 185, in run_on_worker\n',
    W + "    fn(config)\n",
    W + "ValueError: boom\n",
    W + "\n",
    C + "[FailurePolicy] RAISE\n",
    C + "  Source: worker group\n",
    C + "  Error count: 1 (max allowed: 0)\n",
    C + "Error: Training failed due to worker errors:\n",
    C + "[Rank 1 Error Snippet]:\n",
    C + "Traceback (most recent call last):\n",
    C + "ValueError: boom\n",
    C + "ray.train.WorkerGroupError: Training failed due to worker errors:\n",
    W + "user print after the report\n",
    "(ray_client_server) SIGTERM handler is not set because current thread is not the main thread.\n",
    "(MyActor pid=7) Traceback (most recent call last):\n",  # not Ray Train's: the user's actor, shown
]


def test_rays_copies_of_the_failure_and_its_chatter_stay_out() -> None:
    f = LineFilter()
    kept = [ln for ln in FAILING_RUN if f.keep(ln)]
    assert kept == [FAILING_RUN[0], FAILING_RUN[15], FAILING_RUN[17]]


def test_a_message_of_several_lines_is_filtered_line_by_line() -> None:
    assert LineFilter().text("".join(FAILING_RUN[:3])) == FAILING_RUN[0]


def test_trains_resource_request_retry_on_a_busy_machine_stays_out() -> None:
    """Seen in JupyterLab while a background run went on (Ray 2.58, 2-core machine under load)."""
    C2 = "\x1b[36m(TrainController pid=30596)\x1b[0m "
    lines = [
        C2 + "Failed to send resource request for train-0fe5773610d54c8eb69a216069ccb555. If this only happens "
        "transiently during network partition or CPU being overloaded, it's safe to ignore this error. If this error "
        "persists, file a GitHub issue.\n",
        C2 + "Traceback (most recent call last):\n",
        C2
        + '  File "/work/main/.venv/lib/python3.11/site-packages/ray/_private/worker.py", line 1004, in get_objects\n',
        C2 + "    ] = self.core_worker.get_objects(\n",
        C2 + "ray.exceptions.GetTimeoutError: Get timed out: some object(s) not ready.\n",
        C2 + "a line of the controller's that is not part of it\n",
    ]
    f = LineFilter()
    assert [ln for ln in lines if f.keep(ln)] == [lines[-1]]


def test_rays_own_logger_in_the_notebook_drops_the_same_noise() -> None:
    """`ray.init` off the main thread warns through Ray's logger in the notebook's process (seen in terminal IPython:
    "worker.py:1673 -- SIGTERM handler is not set ..."); the same patterns drop it there, other records pass."""
    import logging

    from raynb._cluster.log_filter import NoiseRecords

    f = NoiseRecords()

    def record(msg: str) -> logging.LogRecord:
        return logging.LogRecord("ray._private.worker", logging.WARNING, "worker.py", 1673, msg, None, None)

    assert not f.filter(record("SIGTERM handler is not set because current thread is not the main thread."))
    assert f.filter(record("Connecting to existing Ray cluster at address: 127.0.0.1:6379"))


def test_user_lines_that_read_like_trains_narration_stay_in() -> None:
    """Train's own INFO lines are dropped by Train (raynb gives it WARNING: tests/unit/test_trainer_config.py); the
    filter no longer guesses at them, so a user's line is never taken for one."""
    f = LineFilter()
    for line in ("Moving model to device: cpu\n", "Requesting resources: my own\n", "moving my model to the GPU now\n"):
        assert f.text(W + line) == W + line
