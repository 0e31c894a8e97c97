"""In the kernel: live metrics, the notebook's end: a thread that long-polls the run's sink (``_remote/sink.py``) for
its picture and events; the records themselves only when asked (``run.metrics``)."""

from __future__ import annotations

import threading
import time
from typing import Any

from .._shared.picture import Aggregate
from .._shared.picture import loads as load_picture
from .._shared.seam import RunChannel

__all__ = ["MetricStream", "UNDRAWN_GAP_S"]

#: the gap between two polls while no view draws the run (a script's ``display=False``, a warm group between cells):
#: what the kernel still follows then -- the events (a worker that failed ends the wait), the summary -- needs no more.
#: On the 2-core host a poll of a 2-rank run cost ~3.5 ms of CPU across the kernel, the sink and the raylet (its
#: ~140-KB picture goes through the object store), four times a second beside the training.
UNDRAWN_GAP_S = 1.0


class MetricStream:
    """Notebook side: a thread that long-polls the sink for the run's picture and events; the records themselves are
    read from the sink when asked for (``records``), and once more when the run ends (``stop``)."""

    def __init__(
        self, channel: RunChannel, poll_timeout: float = 0.25, min_gap: float = 0.25, undrawn_gap: float | None = None
    ) -> None:
        """``min_gap``: the shortest gap between two polls that bring something new, while a view draws the run
        (:meth:`drawn`); ``undrawn_gap``: the gap while none does (None: ``min_gap`` either way)."""
        self.channel = channel
        self.picture: Aggregate | None = None
        self.events: list[dict[str, Any]] = []
        self.summary: dict[str, Any] = {}
        #: (arrival time here, newest record's report time) for each new picture: how far behind the view is
        self.arrivals: list[tuple[float, float]] = []
        #: pictures that came whole, and as what their series added to this stream's copy (``picture.dumps``)
        self.pictures = {"whole": 0, "changes": 0}
        self.poll_timeout = poll_timeout
        # Each poll is a round trip through the head carrying what the picture's series added since this copy (~8 KB
        # for 2 ranks a quarter-second apart; whole, ~156 KB): at most one per `gap` (the drawing views' redraw period: a faster poll draws
        # nothing more) keeps the notebook's and the head's share of a small machine's CPU low. The newest record in
        # a picture is at most a flush interval old when it arrives, so latency stays ~ flush interval + the gap.
        self.min_gap, self.undrawn_gap = min_gap, undrawn_gap
        self._views: list[float] = []  # the gap each view drawing the run now asks for
        self._nudge = threading.Event()  # a view started: poll now, not after the undrawn gap
        self._version = 0
        self._deltas = True  # ask for what changed since this copy of the picture (``picture.dumps``)
        self._records: list[dict[str, Any]] = []
        self._records_lock = threading.Lock()
        self._records_final = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None

    def start(self) -> MetricStream:
        self._thread = threading.Thread(target=self._loop, name="raynb-metrics-drain", daemon=True)
        self._thread.start()
        return self

    @property
    def records(self) -> list[dict[str, Any]]:
        """Every record so far, in arrival order (read from the sink up to now, unless the run has ended and they
        are all here already)."""
        if not self._records_final:
            self.fetch_records()
        return self._records

    def fetch_records(self, *, final: bool = False, chunk: int = 200_000) -> None:
        with self._records_lock:
            if self._records_final:
                return
            try:
                while True:
                    recs = self.channel.records(len(self._records), chunk)
                    self._records.extend(recs)
                    if len(recs) < chunk:
                        break
            except Exception as e:  # noqa: BLE001 - the sink is gone (cluster down): keep what was read
                if self.error is None:
                    self.error = e
                final = True
            self._records_final = final

    def poll_once(self, timeout: float | None = None) -> bool:
        held, wait = self.picture, self.poll_timeout if timeout is None else timeout
        since = held.shape() if held is not None and self._deltas else None
        try:
            version, pic, evs, summary = self.channel.picture(self._version, len(self.events), wait, since)
        except TypeError:  # a sink of an earlier raynb (a head kept across an upgrade) takes no shape: whole ones
            if since is None:
                raise
            self._deltas = False
            version, pic, evs, summary = self.channel.picture(self._version, len(self.events), wait)
        self.summary = summary
        if pic is None and not evs:
            return False
        self._version = version
        if pic is not None:
            self.picture = load_picture(pic, held)
            self.pictures["changes" if since else "whole"] += 1
            if summary.get("last_report"):
                self.arrivals.append((time.time(), summary["last_report"]))
        self.events.extend(evs)
        return True

    @property
    def gap(self) -> float:
        """The gap between two polls now: what the most eager view asks for (never slower than undrawn), at least
        ``min_gap``."""
        undrawn = self.min_gap if self.undrawn_gap is None else self.undrawn_gap
        return max(self.min_gap, min([*self._views, undrawn]))

    def drawn(self, gap: float, on: bool = True) -> None:
        """A view starts drawing the run every ``gap`` seconds (``on``) or stops: the polls follow the views."""
        if on:
            self._views.append(gap)
            self._nudge.set()
        elif gap in self._views:
            self._views.remove(gap)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                if self.poll_once() and (gap := self.gap):
                    self._nudge.wait(gap)
                    self._nudge.clear()
            except Exception as e:  # noqa: BLE001 - the sink died (run aborted) or the client went away
                self.error = e
                return

    def stop(self, final_drain: bool = True, *, keep_records: bool = True) -> None:
        """Stop following. ``final_drain``: bring the picture up to date; ``keep_records``: then read every record
        in a background thread (``records`` waits for it), so the run's table outlives the cluster."""
        self._stop.set()
        self._nudge.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if final_drain and self.error is None:
            try:
                while self.poll_once(timeout=0.0):
                    pass
            except Exception as e:  # noqa: BLE001
                self.error = e
            if keep_records and self.error is None:
                threading.Thread(
                    target=self.fetch_records, kwargs={"final": True}, name="raynb-records", daemon=True
                ).start()
