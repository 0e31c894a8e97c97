"""In each Train worker: live metrics, the workers' end: ``raynb.report()`` on workers -> a sink actor (``sink.py``) ->
the notebook (``_runs/stream.py``).

Worker side, :func:`report` appends a record to an in-process queue (microseconds, never a Ray call, never a CUDA
sync: tensors are converted later) and a flusher thread ships batches: over the node's socket where the sink is on
the worker's node (``node_channel.py``), else one ``batch`` call a flush, one at a time. The sink
is a threaded, detached actor with ``num_cpus=0`` that keeps the run's whole history and, as records arrive, the run's
picture (``_shared/picture.py``: bounded, a few thousand points however long the run). The notebook long-polls the
picture from a background thread -- a kernel following 512 ranks draws from kilobytes, not from every record -- and
reads the records themselves only when asked (``run.metrics``). This module must stay importable on workers: it
imports nothing heavier than Ray.
"""

from __future__ import annotations

import collections
import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

from .node_channel import ChannelClient

__all__ = ["report", "Reporter", "current_reporter"]

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
    if metrics:
        kw = {**metrics, **kw}
    for key, value in kw.items():
        kind = type(value)
        if kind.__name__ == "Checkpoint" and kind.__module__.startswith("ray."):
            raise TypeError(
                f"raynb.report({key}=...) got a Ray Train Checkpoint: raynb.report sends metrics to the notebook "
                "only. Save it with ray.train.report(metrics, checkpoint=...), called on every rank (None on the "
                "ranks that save nothing)."
            )
    rep = _reporter
    if rep is None:
        return
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
        self,
        sink: Any,
        rank: int,
        *,
        flush_interval: float = 0.1,
        max_buffered: int = 200_000,
        gpu: Any = None,
        find_channel: Callable[[], str | None] | None = None,
    ) -> None:
        """``find_channel``: called once by the flush thread, before its first flush; the sink's socket it returns
        (``node_channel.find``) carries this worker's batches instead of Ray's calls."""
        self.sink, self.rank = sink, rank
        #: a GpuSampler (or None): its samples join the records from the flush thread, about once a second
        self.gpu = gpu
        self.flush_interval, self.max_buffered = flush_interval, max_buffered
        self._q: collections.deque[dict[str, Any]] = collections.deque()
        #: what this rank printed: (time, stream, line), shipped with the records (bounded like them)
        self._logs: collections.deque[tuple[float, str, str]] = collections.deque(maxlen=max_buffered)
        #: events for the run (``worker_started``...): sent ahead of the records queued after them
        self._events: collections.deque[dict[str, Any]] = collections.deque()
        self._find_channel = find_channel
        self._channel: ChannelClient | None = None
        #: how this worker's batches reach the sink: "ray" (a call each), "node socket", or "ray after the socket"
        self.over = "ray"
        self._step = 0
        #: stamped on every record from now on (a warm group sets {"cell": N} as each cell starts)
        self.tags: dict[str, Any] = {}
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
        rec = {**self.tags, **metrics}
        rec["rank"] = self.rank if rank is None else rank
        rec["step"] = step
        rec["time"] = time.time()
        if len(self._q) >= self.max_buffered:
            self._q.popleft()
            self.dropped += 1
        self._q.append(rec)

    @property
    def step(self) -> float:
        """The step of this rank's latest record."""
        return self._step

    def add_sample(self, sample: dict[str, Any]) -> None:
        """A measurement that is not a step (a GPU sample): stamped with the latest step, counting none."""
        self._q.append({**self.tags, **sample, "rank": self.rank, "step": self._step, "time": time.time()})

    def add_log(self, stream: str, line: str) -> None:
        self._logs.append((time.time(), stream, line))

    def event(self, event: dict[str, Any]) -> None:
        """An event for the run, sent by the flush thread ahead of every record added after it."""
        self._events.append(event)

    def _take(self) -> list[dict[str, Any]]:
        out = []
        q = self._q
        while q:
            rec = q.popleft()
            out.append({k: _plain(v) for k, v in rec.items()})
        return out

    def _flush(self, wait: bool = True) -> None:
        events, lines = _drain(self._events), _drain(self._logs)
        if self._channel is not None:
            records = self._take()
            if events or lines or records:
                try:
                    self._channel.send(("batch", self.rank, events, lines, records))
                except OSError:  # the sink is gone or stuck: Ray's calls from now on
                    self._channel.close()
                    self._channel = None
                    self.over = "ray after the socket"
                    self._over_ray(events, lines, records)
            return
        if wait and self._in_flight:
            import ray  # one batch at a time (it lands on this thread, not on training): the sink is threaded and
            # runs calls that overlap in any order, and a restarted worker's records would reach it before its
            # worker_started event, counted in the attempt before (a step lost from run.metrics: seen in the suite)

            _, self._in_flight = ray.wait(self._in_flight, num_returns=len(self._in_flight), timeout=5)
        self._over_ray(events, lines, self._take())

    def _over_ray(self, events: list[dict[str, Any]], lines: list[tuple[float, str, str]], records: list) -> None:
        if not (events or lines or records):
            return
        batch = getattr(self.sink, "batch", None)  # one call, taken as the node's socket takes a flush
        if batch is not None:
            self._in_flight.append(batch.remote(self.rank, events, lines, records))
            return
        for event in events:  # a sink of an earlier raynb
            self._in_flight.append(self.sink.event.remote(event))
        if lines:
            self._in_flight.append(self.sink.log.remote(self.rank, lines))
        if records:
            self._in_flight.append(self.sink.push.remote(records))

    def _loop(self) -> None:
        if self._find_channel is not None:
            with contextlib.suppress(OSError):  # the socket cannot be reached: Ray's calls, then
                if path := self._find_channel():
                    self._channel, self.over = ChannelClient(path), "node socket"
        while not self._stop.wait(self.flush_interval):
            try:
                if self.gpu is not None and self.gpu.due(time.monotonic()) and (s := self.gpu.sample()):
                    self.add_sample(s)
                self._flush()
            except Exception:  # noqa: BLE001 - metrics must never kill training
                time.sleep(0.5)

    def close(self, timeout: float = 5.0) -> None:
        """Flush what is left and wait (bounded) until the sink has it."""
        self._stop.set()
        self._thread.join(timeout=timeout)
        self._flush(wait=False)
        if self._channel is not None:
            self._channel.sync(timeout)
            self._channel.close()
            self._channel = None
        if self._in_flight:
            import ray

            ray.wait(self._in_flight, num_returns=len(self._in_flight), timeout=timeout)


def _drain(q: collections.deque) -> list:
    out = []
    while q:
        out.append(q.popleft())
    return out
