"""On the head, in raynb's agent (a Ray Job): ``python -m raynb._agent.run_job NAME``: a run's own Ray Job on the Ray
Jobs path, submitted by the agent when it launches the run. The run itself is the cluster's (its launcher, sink and
workers, in the registry); this job is its driver for as long as it goes on, so a cluster's idle detection -- Ray's
``noDriverTimeoutSeconds``, KubeRay's idle termination, which count a cluster with no driver as idle and detached
actors as nothing -- never sees a running run's cluster as idle, even while no kernel is connected and the agent is
gone. And the run shows where Ray shows jobs: ``ray job list`` and the dashboard name it, ``ray job logs`` has what
its workers print, ``ray job stop`` stops it; the job ends when the run does, SUCCEEDED when the run succeeded,
FAILED with how it ended otherwise."""

from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Any

from .._client import cluster_side as side
from .._client.run_channel import echo_logs
from .._shared.outcome import RunStatus

__all__ = ["main", "ENTRYPOINT", "submission_id"]

#: the job's entrypoint, the run's name after it
ENTRYPOINT = "python -m raynb._agent.run_job"


def submission_id(name: str) -> str:
    """The run's job id: its name and a tag (a run's name may be given again once the run is removed; a job's id
    never is)."""
    return f"raynb-run-{name}-{os.urandom(3).hex()}"


def main(argv: list[str] | None = None) -> int:
    import ray

    (name,) = argv if argv is not None else sys.argv[1:]
    ray.init(log_to_driver=False)
    found = side.find_run(name)
    if found is None:
        print(f"raynb: no run named {name!r} on this cluster", file=sys.stderr)
        return 2
    _info, channel = found

    def stop(*_: Any) -> None:  # `ray job stop`: the run stops with its job
        print(f"raynb: the run's job was stopped; stopping run {name}", flush=True)
        channel.stop()
        os._exit(1)

    signal.signal(signal.SIGTERM, stop)
    print(f"raynb: run {name} (this job is its driver while it goes on; `%raytrain attach {name}` follows it)")
    ended = threading.Event()
    echo = threading.Thread(target=echo_logs, args=(channel, ended.is_set), name="raynb-run-echo", daemon=True)
    echo.start()
    outcome, _at = channel.outcome()
    ended.set()
    echo.join(timeout=30)
    how = f": {outcome.error_type}: {outcome.message}" if outcome.error_type else ""
    print(f"raynb: run {name} {outcome.status.value}{how}", flush=True)
    return 0 if outcome.status is RunStatus.SUCCEEDED else 1


if __name__ == "__main__":
    sys.exit(main())
