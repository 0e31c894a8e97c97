"""In the kernel: what of the cluster's log stream reaches the cell. Pure: lines in, lines out.

Ray Client forwards every actor's output to the notebook. Two kinds of lines are not the user's business there:
Ray's own chatter on every run (:data:`KNOWN_NOISE`), and Ray Train's copies of a failing rank's traceback -- the
worker's "Error in training function", the controller's failure policy and error snippet. raynb shows that error
once, as its own message with the cell's line numbers; Ray's copies stay in Ray's log files on the cluster.
"""

from __future__ import annotations

import logging
import re

__all__ = ["KNOWN_NOISE", "LineFilter", "NoiseRecords"]

#: Lines Ray itself logs on every run that say nothing to a notebook user (Ray 2.58). User prints are untouched.
#: Ray Train's own INFO narration (resource requests, worker group start, process group set-up, prepare_model's
#: "Moving model to device" and "Wrapping provided model", each checkpointing report) is dropped by Train itself:
#: raynb hands it ``LoggingConfig(log_level="WARNING")`` (raynb/_runs/trainer_config.py). What is left comes from
#: loggers that level does not reach:
KNOWN_NOISE = (
    # Ray Core's actor-creation warning for Train's preemption watcher (ray._private; on clusters that run it)
    re.compile(r"Actor with class name: 'PreemptionWatcher' and ID: '\w+' has constructor arguments"),
    # ray._private.worker, when Ray Client's server connects a driver off the main thread
    re.compile(r"SIGTERM handler is not set because current thread is not the main thread"),
    # a WARNING of Train's placement-group watchdog polling the State API, which needs the dashboard (heads started
    # without it): above the level raynb gives Train
    re.compile(r"Failed to query Ray Train Controller actor state\. State API may be temporarily unavailable"),
)
#: Where Ray Train begins reporting a failure that raynb reports itself.
_FAILURE_START = re.compile(
    r"^(Error in training function:|\[FailurePolicy\]|Error: Training failed due to worker errors|"
    r"ray\.train\.\w*Error: Training failed|"
    # Train's resource-request retry on a busy machine, with a traceback; Ray itself says it is safe to ignore
    r"Failed to send resource request for )"
)
#: Lines that continue such a report: tracebacks, indented details, snippets, the exception line, blank lines.
_FAILURE_MORE = re.compile(r"^(Traceback |\s|\[Rank \d+ Error Snippet\]|[\w.]+(Error|Exception|Interrupt)\b|$)")
_PREFIX = re.compile(r"^(?:\x1b\[[\d;]*m)?\((?P<who>[\w.]+) pid=(?P<pid>\d+)[^)]*\)(?:\x1b\[[\d;]*m)? ?")


class LineFilter:
    """Keeps the lines a notebook user should see; remembers, per process, whether a failure report is running."""

    def __init__(self) -> None:
        self._in_failure: set[str] = set()

    def keep(self, line: str) -> bool:
        if any(p.search(line) for p in KNOWN_NOISE):
            return False
        m = _PREFIX.match(line)
        if m is None or not m["who"].startswith(("RayTrainWorker", "TrainController")):
            return True
        source, text = m["pid"], line[m.end() :].rstrip("\n")
        if _FAILURE_START.match(text):
            self._in_failure.add(source)
            return False
        if source in self._in_failure:
            if _FAILURE_MORE.match(text):
                return False
            self._in_failure.discard(source)
        return True

    def text(self, msg: str) -> str:
        """``msg`` (one or more lines, as Ray Client delivers them) without the lines to drop."""
        return "".join(ln for ln in msg.splitlines(keepends=True) if self.keep(ln))


class NoiseRecords(logging.Filter):
    """The same known noise where Ray logs it in the notebook's own process (``ray.init`` called off the main thread
    warns about its SIGTERM handler through Ray's logger, not through the cluster's log stream)."""

    def filter(self, record: logging.LogRecord) -> bool:
        msg = record.getMessage()
        return not any(p.search(msg) for p in KNOWN_NOISE)
