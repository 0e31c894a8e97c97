"""Which Ray worker processes a run started, and when each took each role: a poller of ``/proc`` for benchmarks
that time a run's way to its function (``first_step.py``). Ray renames a worker's process title as it works
(``ray::IDLE`` once registered, ``ray::TrainController.__init__``, ``ray::RayTrainWorker.init_train_context``, ...),
so the titles, with the process's own start time from ``/proc``, say which process waited on which. Linux only;
the benchmark's machine must be the head's (the embedded cluster)."""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from raynb._remote.worker import _process_started  # the same clock as the worker's own setup_at.process_started

__all__ = ["ProcessTimeline"]


def _ray_title(pid: str) -> str | None:
    """The process title if this is one of Ray's Python workers (``ray::...``) or one starting (default_worker)."""
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        raw = f.read()
    title = raw.replace(b"\0", b" ").decode(errors="replace").strip()
    if title.startswith("ray::"):
        return title.split("  ")[0][:80]
    return "(starting)" if "default_worker.py" in title else None


class ProcessTimeline:
    """Polls ``/proc`` every ``interval_s`` from ``start()`` to ``stop()``; ``since(t0)`` gives the Ray workers that
    started after ``t0`` (less a margin), each as its pid, start and the first time each title was seen, in seconds
    after ``t0``."""

    def __init__(self, interval_s: float = 0.05) -> None:
        self.interval_s = interval_s
        self._seen: dict[str, dict[str, Any]] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _poll_once(self) -> None:
        now = time.time()
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                title = _ray_title(pid)
                if title is None:
                    continue
                entry = self._seen.get(pid)
                if entry is None:
                    started = _process_started(pid)
                    if started is None:  # gone meanwhile
                        continue
                    entry = self._seen[pid] = {"started": started, "titles": {}}
                entry["titles"].setdefault(title, now)
            except (OSError, ValueError, IndexError):  # gone between the listing and the read
                continue

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._poll_once()

    def start(self) -> ProcessTimeline:
        self._thread = threading.Thread(target=self._loop, name="bench-process-timeline", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def since(self, t0: float, margin_s: float = 0.5) -> list[dict[str, Any]]:
        rows = [
            {
                "pid": int(pid),
                "started_s": round(e["started"] - t0, 2),
                "titles": {title: round(at - t0, 2) for title, at in e["titles"].items()},
            }
            for pid, e in self._seen.items()
            if e["started"] >= t0 - margin_s
        ]
        return sorted(rows, key=lambda r: r["started_s"])
