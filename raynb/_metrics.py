"""Live metrics: ``raynb.report()`` on workers -> a sink actor -> the notebook.

Worker side, :func:`report` appends a record to an in-process queue (microseconds, never a Ray call, never a CUDA
sync: tensors are converted later) and a flusher thread ships batches with fire-and-forget ``push.remote``. The sink
is an async, detached actor with ``num_cpus=0`` that keeps the run's whole history and, as records arrive, the run's
picture (``display/aggregate.py``: bounded, a few thousand points however long the run). The notebook long-polls the
picture from a background thread -- a kernel following 512 ranks draws from kilobytes, not from every record -- and
reads the records themselves only when asked (``run.metrics``). This module must stay importable on workers: it
imports nothing heavier than Ray.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import os
import pickle
import tempfile
import threading
import time
from typing import Any

from ._detached import NAMESPACE, exit_unless_claimed, on_head
from .display.aggregate import Aggregate

__all__ = ["report", "Reporter", "MetricsSink", "MetricStream", "current_reporter"]

_reporter: Reporter | None = None


def current_reporter() -> Reporter | None:
    return _reporter


def _set_reporter(rep: Reporter | None) -> None:
    global _reporter
    _reporter = rep


def report(metrics: dict[str, Any] | None = None, /, **kw: Any) -> None:
    """Send metrics from a training worker to the notebook; cheap and non-blocking.

    ``raynb.report(loss=loss, tokens=n)`` or ``raynb.report({"loss": loss})``. Known keys: ``step`` (else each call
    counts one), ``loss``, ``samples``/``tokens`` (counts since the previous report; throughput is derived), or
    ``samples_per_s``/``tokens_per_s`` directly. Tensors are fine: they are read off the GPU on another thread.
    Outside a raynb run this does nothing.
    """
    rep = _reporter
    if rep is None:
        return
    if metrics:
        kw = {**metrics, **kw}
    rep.add(kw)


def _plain(v: Any) -> Any:
    if isinstance(v, (int, float, str, bool)) or v is None:
        return v
    item = getattr(v, "item", None)  # torch / numpy scalars and 1-element tensors
    if callable(item):
        try:
            return item()
        except Exception:  # noqa: BLE001 - a non-scalar tensor: keep its repr
            return repr(v)
    return repr(v)


class Reporter:
    """Per-worker-process buffer of records, flushed to the sink by a daemon thread."""

    def __init__(
        self, sink: Any, rank: int, *, flush_interval: float = 0.1, max_in_flight: int = 4, max_buffered: int = 200_000
    ) -> None:
        self.sink, self.rank = sink, rank
        self.flush_interval, self.max_in_flight, self.max_buffered = flush_interval, max_in_flight, max_buffered
        self._q: collections.deque[dict[str, Any]] = collections.deque()
        #: what this rank printed: (time, stream, line), shipped with the records (bounded like them)
        self._logs: collections.deque[tuple[float, str, str]] = collections.deque(maxlen=max_buffered)
        self._step = 0
        self._in_flight: list[Any] = []
        self.dropped = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="raynb-metrics-flush", daemon=True)
        self._thread.start()

    def add(self, metrics: dict[str, Any], rank: int | None = None) -> None:
        step = metrics.get("step")
        if step is None:
            self._step += 1
            step = self._step
        else:
            self._step = step
        rec = dict(metrics)
        rec["rank"] = self.rank if rank is None else rank
        rec["step"] = step
        rec["time"] = time.time()
        if len(self._q) >= self.max_buffered:
            self._q.popleft()
            self.dropped += 1
        self._q.append(rec)

    def add_log(self, stream: str, line: str) -> None:
        self._logs.append((time.time(), stream, line))

    def _take_logs(self) -> list[tuple[float, str, str]]:
        out = []
        while self._logs:
            out.append(self._logs.popleft())
        return out

    def _take(self) -> list[dict[str, Any]]:
        out = []
        q = self._q
        while q:
            rec = q.popleft()
            out.append({k: _plain(v) for k, v in rec.items()})
        return out

    def _flush(self) -> None:
        import ray

        if self._logs:
            self._in_flight.append(self.sink.log.remote(self.rank, self._take_logs()))
        if not self._q:
            return
        if len(self._in_flight) >= self.max_in_flight:  # backpressure lands on this thread, not on training
            _, self._in_flight = ray.wait(self._in_flight, num_returns=len(self._in_flight), timeout=0)
            if len(self._in_flight) >= self.max_in_flight:
                _, self._in_flight = ray.wait(self._in_flight, num_returns=1, timeout=5)
        batch = self._take()
        if batch:
            self._in_flight.append(self.sink.push.remote(batch))

    def _loop(self) -> None:
        while not self._stop.wait(self.flush_interval):
            try:
                self._flush()
            except Exception:  # noqa: BLE001 - metrics must never kill training
                time.sleep(0.5)

    def close(self, timeout: float = 5.0) -> None:
        """Flush what is left and wait (bounded) until the sink has it."""
        import ray

        self._stop.set()
        self._thread.join(timeout=timeout)
        batch = self._take()
        if batch:
            self._in_flight.append(self.sink.push.remote(batch))
        if self._logs:
            self._in_flight.append(self.sink.log.remote(self.rank, self._take_logs()))
        if self._in_flight:
            ray.wait(self._in_flight, num_returns=len(self._in_flight), timeout=timeout)


class MetricsSink:
    """Async actor holding a run's whole history -- every record and event -- for the kernel that started the run and
    any kernel that attaches later. The newest ``mem_records`` records stay in memory; older ones are spilled to a
    JSON-lines file beside the actor, so a day-long run neither grows the actor without bound nor loses a record."""

    SPILL_INDEX_EVERY = 1024
    #: lines the workers printed, kept for ``%raytrain logs`` (the newest, all ranks together)
    LOG_LINES = 100_000

    def __init__(self, mem_records: int = 200_000, ttl_s: float | None = None) -> None:
        self._records: list[dict[str, Any]] = []
        self._base = 0  # absolute index of self._records[0]; records before it are in the spill file
        self._events: list[dict[str, Any]] = []
        self._new = asyncio.Event()
        self._mem = max(mem_records, 2)
        self._spill: str | None = None
        self._offsets: list[int] = []  # byte offset of record k * SPILL_INDEX_EVERY in the spill file
        self._step = 0
        self._attempt = 0  # Ray Train starts the worker group again after a failure (max_failures): one more
        self._last_report: float | None = None
        self._ranks: set[int] = set()
        self._logs: collections.deque[dict[str, Any]] = collections.deque(maxlen=self.LOG_LINES)
        self._log_seq = 0
        self._new_log = asyncio.Event()
        self._picture = Aggregate()
        self._version = 0  # one more for each push or event: what a notebook's picture is up to date with
        self._claimed = threading.Event()
        if ttl_s is not None:
            exit_unless_claimed(self._claimed, ttl_s)

    async def claim(self) -> bool:
        self._claimed.set()
        return True

    async def push(self, records: list[dict[str, Any]]) -> None:
        for r in records:
            r.setdefault("attempt", max(self._attempt, 1))
        self._records.extend(records)
        for r in records:
            self._step = max(self._step, int(r.get("step") or 0))
            self._ranks.add(int(r.get("rank") or 0))
        if records:
            self._last_report = records[-1].get("time")
            self._picture.add(records)
            self._version += 1
        if len(self._records) > self._mem:
            self._spill_oldest(len(self._records) - self._mem // 2)
        self._new.set()

    async def event(self, event: dict[str, Any]) -> None:
        event.setdefault("time", time.time())
        if event.get("kind") == "worker_started" and event.get("rank") == 0:
            self._attempt += 1
            if self._attempt > 1:  # Ray Train started the workers again: find out which one was lost, and why
                before = [
                    e for e in self._events if e.get("kind") == "worker_started" and e["attempt"] == self._attempt - 1
                ]
                asyncio.get_running_loop().create_task(self._explain_restart(before, self._attempt))
        event.setdefault("attempt", max(self._attempt, 1))
        self._events.append(event)
        self._version += 1
        self._new.set()

    async def _explain_restart(self, before: list[dict[str, Any]], attempt: int) -> None:
        lost = await asyncio.to_thread(_lost_workers, before)
        await self.event({"kind": "restart", "attempt": attempt, "lost": lost})

    async def log(self, rank: int, lines: list[tuple[float, str, str]]) -> None:
        for t, stream, text in lines:
            self._log_seq += 1
            self._logs.append(
                {
                    "seq": self._log_seq,
                    "rank": rank,
                    "time": t,
                    "stream": stream,
                    "text": text,
                    "attempt": self._attempt,
                }
            )
        self._new_log.set()

    async def read_logs(
        self, after: int = 0, rank: int | None = None, tail: int | None = None, timeout: float = 0.0
    ) -> tuple[int, list[dict[str, Any]], int]:
        """Lines after sequence number ``after`` (of ``rank``, or all ranks; the last ``tail`` of them), waiting up
        to ``timeout`` for one. Returns the sequence number to ask from next time, the lines, and how many lines were
        dropped before the oldest still kept."""
        if self._log_seq <= after and timeout > 0:
            self._new_log.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._new_log.wait(), timeout)
        lines = [x for x in self._logs if x["seq"] > after and (rank is None or x["rank"] == rank)]
        if tail is not None:
            lines = lines[-tail:] if tail > 0 else []
        dropped = self._logs[0]["seq"] - 1 if self._logs else 0
        return self._log_seq, lines, dropped

    async def summary(self) -> dict[str, Any]:
        return {
            "step": self._step,
            "last_report": self._last_report,
            "records": self._base + len(self._records),
            "ranks": len(self._ranks),
            "attempt": max(self._attempt, 1),
        }

    async def picture(
        self, version: int, event_cursor: int, timeout: float = 0.5
    ) -> tuple[int, bytes | None, list[dict], dict[str, Any]]:
        """The run's picture if it changed since ``version`` (pickled here, between pushes, so it is consistent),
        the events after ``event_cursor`` and the summary; waits up to ``timeout`` for a change."""
        if version >= self._version and event_cursor >= len(self._events):
            self._new.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._new.wait(), timeout)
        changed = version < self._version
        pic = pickle.dumps(self._picture, protocol=pickle.HIGHEST_PROTOCOL) if changed else None
        return self._version, pic, self._events[event_cursor:], await self.summary()

    async def read(
        self, cursor: int, event_cursor: int, timeout: float = 0.5, limit: int = 100_000
    ) -> tuple[int, list[dict], list[dict]]:
        """Up to ``limit`` records from ``cursor`` on, and the events after ``event_cursor``; waits up to ``timeout``
        for something new. Returns the cursor to ask from next time."""
        total = self._base + len(self._records)
        if cursor >= total and event_cursor >= len(self._events):
            self._new.clear()
            try:
                await asyncio.wait_for(self._new.wait(), timeout)
            except asyncio.TimeoutError:
                pass
        recs: list[dict[str, Any]] = []
        if cursor < self._base:
            recs = self._read_spilled(cursor, min(limit, self._base - cursor))
        if len(recs) < limit and cursor + len(recs) >= self._base:
            start = cursor + len(recs) - self._base
            recs += self._records[start : start + limit - len(recs)]
        return cursor + len(recs), recs, self._events[event_cursor:]

    async def discard(self) -> None:
        """Delete the spill file (before the actor is killed for good)."""
        if self._spill:
            with contextlib.suppress(OSError):
                os.unlink(self._spill)

    def _spill_oldest(self, n: int) -> None:
        if self._spill is None:
            d = os.path.join(tempfile.gettempdir(), "raynb-runs")
            os.makedirs(d, exist_ok=True)
            self._spill = os.path.join(d, f"records-{os.getpid()}-{id(self):x}.jsonl")
        with open(self._spill, "ab") as f:
            for i, rec in enumerate(self._records[:n]):
                if (self._base + i) % self.SPILL_INDEX_EVERY == 0:
                    self._offsets.append(f.tell())
                f.write(json.dumps(rec, default=repr).encode() + b"\n")
        del self._records[:n]
        self._base += n

    def _read_spilled(self, cursor: int, n: int) -> list[dict[str, Any]]:
        assert self._spill is not None
        k = cursor // self.SPILL_INDEX_EVERY
        out: list[dict[str, Any]] = []
        with open(self._spill, "rb") as f:
            f.seek(self._offsets[k])
            skip = cursor - k * self.SPILL_INDEX_EVERY
            for line in f:
                if skip:
                    skip -= 1
                    continue
                out.append(json.loads(line))
                if len(out) >= n:
                    break
        return out


def _lost_workers(started: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Which of an attempt's worker processes died of something other than Ray Train ending them, and why (Ray's
    state API: the dashboard's; an empty list where it cannot answer)."""
    try:
        from ray.util.state import list_workers

        out = []
        for ev in started:
            for w in list_workers(filters=[("pid", "=", ev["pid"])], detail=True, raise_on_missing_output=False):
                if w.exit_type in ("SYSTEM_ERROR", "NODE_OUT_OF_MEMORY", "USER_ERROR"):
                    why = (w.exit_detail or w.exit_type or "").strip()
                    out.append({"rank": ev["rank"], "node": ev.get("node"), "pid": ev["pid"], "why": why[:300]})
        return out
    except Exception:  # noqa: BLE001 - no dashboard (RAYNB_LOCAL_DASHBOARD=0) or an older Ray: say less
        return []


def sink_actor(ttl_s: float | None = None) -> Any:
    """Create a detached sink actor for one run (0 CPUs, so it never competes with training for a slot; on the head
    node, so the run's history survives the loss of a worker node). ``ttl_s``: exit unless claimed by then."""
    import ray

    cls = ray.remote(num_cpus=0, max_concurrency=64)(MetricsSink)
    return cls.options(lifetime="detached", namespace=NAMESPACE, resources=on_head()).remote(ttl_s=ttl_s)


class MetricStream:
    """Notebook side: a thread that long-polls the sink for the run's picture and events; the records themselves are
    read from the sink when asked for (``records``), and once more when the run ends (``stop``)."""

    def __init__(self, sink: Any, poll_timeout: float = 0.25, min_gap: float = 0.1) -> None:
        self.sink = sink
        self.picture: Aggregate | None = None
        self.events: list[dict[str, Any]] = []
        self.summary: dict[str, Any] = {}
        #: (arrival time here, newest record's report time) for each new picture: how far behind the view is
        self.arrivals: list[tuple[float, float]] = []
        self.poll_timeout = poll_timeout
        # Each poll is a Ray Client round trip through the head: at most one per `min_gap` keeps the notebook's
        # share of a small machine's CPU low while latency stays ~ flush interval + min_gap.
        self.min_gap = min_gap
        self.changed = threading.Event()
        self._version = 0
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
        import ray

        with self._records_lock:
            if self._records_final:
                return
            try:
                while True:
                    _cursor, recs, _ = ray.get(self.sink.read.remote(len(self._records), 1 << 62, 0.0, chunk))
                    self._records.extend(recs)
                    if len(recs) < chunk:
                        break
            except Exception as e:  # noqa: BLE001 - the sink is gone (cluster down): keep what was read
                if self.error is None:
                    self.error = e
                final = True
            self._records_final = final

    def poll_once(self, timeout: float | None = None) -> bool:
        import ray

        version, pic, evs, summary = ray.get(
            self.sink.picture.remote(self._version, len(self.events), self.poll_timeout if timeout is None else timeout)
        )
        self.summary = summary
        if pic is None and not evs:
            return False
        self._version = version
        if pic is not None:
            self.picture = pickle.loads(pic)
            if summary.get("last_report"):
                self.arrivals.append((time.time(), summary["last_report"]))
        self.events.extend(evs)
        self.changed.set()
        return True

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                if self.poll_once() and self.min_gap:
                    self._stop.wait(self.min_gap)
            except Exception as e:  # noqa: BLE001 - the sink died (run aborted) or the client went away
                self.error = e
                return

    def stop(self, final_drain: bool = True, *, keep_records: bool = True) -> None:
        """Stop following. ``final_drain``: bring the picture up to date; ``keep_records``: then read every record
        in a background thread (``records`` waits for it), so the run's table outlives the cluster."""
        self._stop.set()
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
