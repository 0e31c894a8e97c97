"""In the kernel: a run that has failed before Ray Train says so: a worker raised on the run's last attempt (no restart
left), so the group fails whatever the controller decides at its next poll (every ``health_check_interval_s``, then
the workers' shutdown: about 3 s on 2 cores). The kernel shows the error when the worker's own event comes in, a
moment's grace later for its peers' errors, and lets the run wind down behind the cell (``Run._finish``)."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from .._shared.outcome import Outcome, RunStatus

__all__ = ["EarlyFailure", "FAILED_EARLY", "WIND_DOWN_S"]

#: after the first worker error on the last attempt, how long its peers' errors may take to come in
FAIL_GRACE_S = 0.5
#: how long the kernel waits in the background for ``fit()`` to return after an early failure
WIND_DOWN_S = 60.0
#: the outcome of a run shown failed before ``fit()`` returned (the workers' errors are in its events)
FAILED_EARLY = Outcome(
    RunStatus.FAILED, error_type="WorkerGroupError", message="a worker raised on the run's last attempt", early=True
)


class EarlyFailure:
    """Watches a run's events for a worker error with no restart left (``max_failures`` < 0: restarts forever)."""

    def __init__(self, max_failures: int) -> None:
        self.max_failures = max_failures
        self.seen: float | None = None  # when the first such error came in

    def due(self, events: Sequence[Mapping[str, Any]]) -> bool:
        """True once such an error came in ``FAIL_GRACE_S`` ago."""
        if self.seen is None and self.max_failures >= 0 and any(_last_attempt(e, self.max_failures) for e in events):
            self.seen = time.monotonic()
        return self.seen is not None and time.monotonic() - self.seen >= FAIL_GRACE_S


def _last_attempt(event: Mapping[str, Any], max_failures: int) -> bool:
    return event.get("kind") == "worker_error" and int(event.get("attempt") or 1) > max_failures
