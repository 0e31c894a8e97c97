"""On the head: the run's history on the cluster: every record (spilled to a file past ``mem_records``), every event,
the lines the workers printed, and the run's picture (``_shared/picture.py``), kept by one detached threaded actor
per run on the head node. Workers push to it (``report.Reporter``); notebooks read from it
(``_stream.MetricStream``); the kernel starts it (``_client/spares.py``). Workers on its node hand it their batches
over a Unix socket instead of Ray's calls (``node_channel.py``). Once the run has ended, it hands its history to
files (:meth:`MetricsSink.retire`) and exits; the registry answers for the run from them. Imports nothing heavier
than Ray.

What a call costs the sink is Ray's machinery more than the sink's work (2-core host, 2 workers pushing 10 times a
second: 0.15 ms of ``Aggregate.add`` in a call of ~4 ms), and it is taken while training runs. So the actor is
threaded, not async (an async actor's call crosses to its event loop: ~1 ms more a call there), and the calls that
come many times a second (:func:`_frequent`: each worker's ``push`` and ``log``, each following kernel's
``picture``) leave no task events: Ray records one for every call (for its state API and dashboard) in the caller,
the sink and the GCS (~0.5 ms more a call), and the dashboard's task list gains nothing from thousands of them a
minute.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import os
import pickle
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from .._shared.picture import Aggregate, dumps
from .._shared.progress import progress, stall
from . import spill
from .detached import SpareClock, yield_cpu_to_training
from .node_channel import ChannelServer

__all__ = ["MetricsSink"]

F = TypeVar("F", bound=Callable[..., Any])


def _frequent(method: F) -> F:
    """Mark an actor method that is called many times a second: Ray records no task event for its calls. This is
    what ``@ray.method(enable_task_events=False)`` sets; it is set here by hand because this module must not import
    Ray (the kernel imports it before it may), and because it then travels with the class wherever the class is
    imported (a Ray Client server makes the actor from its own import of it)."""
    method.__ray_enable_task_events__ = False  # type: ignore[attr-defined]
    return method


class MetricsSink:
    """Threaded actor holding a run's whole history -- every record and event -- for the kernel that started the run and
    any kernel that attaches later. The newest ``mem_records`` records stay in memory; older ones are spilled to a
    JSON-lines file beside the actor, so a day-long run neither grows the actor without bound nor loses a record."""

    #: lines the workers printed, kept for ``%raytrain logs`` (the newest, all ranks together)
    LOG_LINES = 100_000

    def __init__(self, mem_records: int = 200_000, ttl_s: float | None = None) -> None:
        self._records: list[dict[str, Any]] = []
        self._base = 0  # absolute index of self._records[0]; records before it are in the spill file
        self._events: list[dict[str, Any]] = []
        #: held by every call (Ray runs them on a pool of threads); notified by each push, event and log line
        self._changed = threading.Condition()
        self._mem = max(mem_records, 2)
        self._spill: str | None = None
        self._offsets: list[int] = []  # byte offset of record k * spill.EVERY in the spill file
        self._step = 0
        self._attempt = 0  # Ray Train starts the worker group again after a failure (max_failures): one more
        self._rank_attempt: dict[int, int] = {}  # each rank's newest worker's attempt: what its records belong to
        self._last_report: float | None = None
        self._ranks: set[int] = set()
        self._logs: collections.deque[dict[str, Any]] = collections.deque(maxlen=self.LOG_LINES)
        self._log_seq = 0
        self._picture = Aggregate()
        self._version = 0  # one more for each push or event: what a notebook's picture is up to date with
        self._pickled: tuple[int, bytes] | None = None  # (version, picture): every kernel following gets the same
        self._clock = SpareClock(ttl_s) if ttl_s is not None else None
        self._server: ChannelServer | None = None  # the workers of this node hand batches over it (node_channel.py)
        self._spilling = False  # the oldest records are being written aside (:meth:`_spill_aside`)
        self._spill_at = self._mem  # held past this, the oldest go aside (higher after a failed write: not every push)
        yield_cpu_to_training()

    def claim(self) -> bool:
        """Reserve this sink for a run; False where it was a spare nobody claimed in time (it is leaving)."""
        return self._clock.claim() if self._clock is not None else True

    @_frequent
    def push(self, records: list[dict[str, Any]]) -> None:
        with self._changed:
            self._add(records)
            self._changed.notify_all()

    def _add(self, records: list[dict[str, Any]]) -> None:
        for r in records:
            r.setdefault("attempt", self._attempt_of(r.get("rank")))
        self._records.extend(records)
        for r in records:
            self._step = max(self._step, int(r.get("step") or 0))
            self._ranks.add(int(r.get("rank") or 0))
        if records:
            self._last_report = records[-1].get("time")
            self._picture.add(records)
            self._version += 1
        if len(self._records) > self._spill_at and not self._spilling:
            n = len(self._records) - self._mem // 2
            self._spilling = True
            args = (self._spill_path(), self._records[:n], self._base)  # they stay in memory, readable, till written
            threading.Thread(target=self._spill_aside, args=args, name="raynb-sink-spill", daemon=True).start()

    def event(self, event: dict[str, Any]) -> None:
        with self._changed:
            self._event(event)
            self._changed.notify_all()

    def _event(self, event: dict[str, Any]) -> None:
        event.setdefault("time", time.time())
        if event.get("kind") == "worker_started":
            self._worker_started(int(event.get("rank") or 0))
        event.setdefault("attempt", self._attempt_of(event.get("rank")))
        self._events.append(event)
        self._version += 1

    def channel(self) -> tuple[str, str]:
        """This sink's node and the socket its workers there hand their batches to (opened on the first ask)."""
        import ray

        return ray.get_runtime_context().get_node_id(), self._channel_path()

    def _channel_path(self) -> str:
        with self._changed:
            if self._server is None:
                self._server = ChannelServer(self._take_batch)
            return self._server.path

    @_frequent
    def batch(
        self,
        rank: int,
        events: list[dict[str, Any]],
        lines: list[tuple[float, str, str]],
        records: list[dict[str, Any]],
    ) -> None:
        """One flush of a worker on another node, in one call, taken as the socket takes one: separate ``event`` and
        ``push`` calls may run in either order on this threaded actor."""
        self._take_batch(("batch", rank, events, lines, records))

    def _take_batch(self, message: tuple[Any, ...]) -> None:
        """One flush of a worker on this node, as its Ray calls would have brought it: its events, then its printed
        lines, then its records."""
        _, rank, events, lines, records = message
        with self._changed:
            for event in events:
                self._event(event)
            self._log(rank, lines)
            self._add(records)
            self._changed.notify_all()

    def _worker_started(self, rank: int) -> None:
        """A rank's worker started: a rank that already started in this attempt means Ray Train started the group
        again. Each worker's calls reach this actor in the order it made them, but the ranks' calls are not ordered
        among themselves -- rank 1 of a new group may report before rank 0 of it says it started -- so a record
        belongs to its own rank's newest worker, never to whichever rank spoke last."""
        if self._attempt == 0 or self._rank_attempt.get(rank) == self._attempt:
            self._attempt += 1
            if self._attempt > 1:  # find out which worker was lost, and why
                before = [
                    e for e in self._events if e.get("kind") == "worker_started" and e["attempt"] == self._attempt - 1
                ]
                attempt = self._attempt
                threading.Thread(target=self._explain_restart, args=(before, attempt), daemon=True).start()
        self._rank_attempt[rank] = self._attempt

    def _attempt_of(self, rank: Any) -> int:
        """The attempt of ``rank``'s newest worker (the run's newest attempt for a record or event of no rank)."""
        if rank is None:
            return max(self._attempt, 1)
        return self._rank_attempt.get(int(rank), max(self._attempt, 1))

    def _explain_restart(self, before: list[dict[str, Any]], attempt: int) -> None:
        self.event({"kind": "restart", "attempt": attempt, "lost": _lost_workers(before)})

    @_frequent
    def log(self, rank: int, lines: list[tuple[float, str, str]]) -> None:
        with self._changed:
            self._log(rank, lines)
            self._changed.notify_all()

    def _log(self, rank: int, lines: list[tuple[float, str, str]]) -> None:
        for t, stream, text in lines:
            self._log_seq += 1
            self._logs.append(
                {
                    "seq": self._log_seq,
                    "rank": rank,
                    "time": t,
                    "stream": stream,
                    "text": text,
                    "attempt": self._attempt_of(rank),
                }
            )

    def read_logs(
        self, after: int = 0, rank: int | None = None, tail: int | None = None, timeout: float = 0.0
    ) -> tuple[int, list[dict[str, Any]], int]:
        """Lines after sequence number ``after`` (of ``rank``, or all ranks; the last ``tail`` of them), waiting up
        to ``timeout`` for one. Returns the sequence number to ask from next time, the lines, and how many lines were
        dropped before the oldest still kept."""
        with self._changed:
            self._changed.wait_for(lambda: self._log_seq > after, timeout)
            lines = [x for x in self._logs if x["seq"] > after and (rank is None or x["rank"] == rank)]
            if tail is not None:
                lines = lines[-tail:] if tail > 0 else []
            dropped = self._logs[0]["seq"] - 1 if self._logs else 0
            return self._log_seq, lines, dropped

    def watch(self, total: float | None, factor: float, min_s: float) -> dict[str, Any]:
        """The run's summary, how far it is and, when it looks stuck, the stall verdict with each rank's last printed
        line (``_shared/progress.py``; ``total``, ``factor``, ``min_s``: the run's own settings, which the registry
        holds)."""
        now = time.time()
        with self._changed:
            out: dict[str, Any] = {
                **self._summary(),  # one call answers `%raytrain ls`'s row
                "progress": progress(self._picture, total=total, now=now).as_dict(),
                "stall": None,
            }
            verdict = stall(self._picture, now, factor=factor, min_s=min_s)
            if verdict is not None:
                last: dict[int, str] = {}
                for x in itertools.islice(reversed(self._logs), 5000):
                    last.setdefault(x["rank"], x["text"][-200:])
                out["stall"] = {**verdict.as_dict(), "text": verdict.text(), "last_lines": last}
            return out

    def summary(self) -> dict[str, Any]:
        with self._changed:
            return self._summary()

    def _summary(self) -> dict[str, Any]:
        return {
            "step": self._step,
            "last_report": self._last_report,
            "records": self._base + len(self._records),
            "ranks": len(self._ranks),
            "attempt": max(self._attempt, 1),
        }

    @_frequent
    def picture(
        self, version: int, event_cursor: int, timeout: float = 0.5, since: dict[int, tuple[int, int]] | None = None
    ) -> tuple[int, bytes | None, list[dict], dict[str, Any]]:
        """The run's picture if it changed since ``version`` (pickled here, between pushes, so it is consistent),
        the events after ``event_cursor`` and the summary; waits up to ``timeout`` for a change. ``since``: the
        shape of the reader's copy (``Aggregate.shape``): its series come as what they added since."""
        with self._changed:
            self._changed.wait_for(lambda: version < self._version or event_cursor < len(self._events), timeout)
            pic = None
            if version < self._version and since:
                pic = dumps(self._picture, since)
            elif version < self._version:
                if self._pickled is None or self._pickled[0] != self._version:
                    self._pickled = (self._version, dumps(self._picture))
                pic = self._pickled[1]
            return self._version, pic, self._events[event_cursor:], self._summary()

    def read(
        self, cursor: int, event_cursor: int, timeout: float = 0.5, limit: int = 100_000
    ) -> tuple[int, list[dict], list[dict]]:
        """Up to ``limit`` records from ``cursor`` on, and the events after ``event_cursor``; waits up to ``timeout``
        for something new. Returns the cursor to ask from next time."""
        with self._changed:
            self._changed.wait_for(
                lambda: cursor < self._base + len(self._records) or event_cursor < len(self._events), timeout
            )
            recs: list[dict[str, Any]] = []
            if cursor < self._base:
                assert self._spill is not None
                recs = spill.read(self._spill, self._offsets, cursor, min(limit, self._base - cursor))
            if len(recs) < limit and cursor + len(recs) >= self._base:
                start = cursor + len(recs) - self._base
                recs += self._records[start : start + limit - len(recs)]
            return cursor + len(recs), recs, self._events[event_cursor:]

    #: what :meth:`retire` leaves out: the lock, the spare's clock, the socket, the picture's pickle
    _NOT_KEPT = ("_changed", "_clock", "_server", "_pickled")

    def retire(self) -> str:
        """The run has ended: every record to the spill file, the rest (events, lines, picture) to a file beside it,
        and the socket closed; returns that file's path, which :meth:`restored` reads back. Called by the registry,
        which then answers for the run (``registry.history``) and ends this actor: an idle actor process costs its
        node ~0.01 cores, and a kernel of many cells would leave one per run."""
        with self._changed:
            if self._records or self._spilling:
                self._spill_rest()
            if self._server is not None:
                self._server.close()
                self._server = None
            state = {k: v for k, v in vars(self).items() if k not in self._NOT_KEPT}
            path = os.path.join(spill.runs_dir(), f"history-{os.getpid()}-{id(self):x}.pickle")
            with open(path, "wb") as f:
                pickle.dump(state, f, protocol=pickle.HIGHEST_PROTOCOL)
            return path

    @classmethod
    def restored(cls, path: str) -> MetricsSink:
        """A retired run's history, read back as a plain object (no actor): it answers every read as the sink did."""
        with open(path, "rb") as f:
            state = pickle.load(f)  # a file the run's own sink wrote on this node
        sink = cls.__new__(cls)
        vars(sink).update(state)
        sink._changed, sink._clock, sink._server, sink._pickled = threading.Condition(), None, None, None
        sink._spilling = False
        return sink

    def discard(self) -> None:
        """Delete the spill file and the node's socket (before the actor is killed for good)."""
        if self._server is not None:
            self._server.close()
        if self._spill:
            with contextlib.suppress(OSError):
                os.unlink(self._spill)

    def _spill_aside(self, path: str, records: list[dict[str, Any]], base: int) -> None:
        """The oldest records to the spill file without the lock, then out of memory under it. Written under the
        lock, 100,000 records held every push and every kernel's poll for 0.45 s on the 2-core host (the lag's
        spike near the end of bench/metrics_path.py's 512 ranks); readers meanwhile read them from memory."""
        offsets: list[int] | None = None
        try:
            offsets = spill.append(path, records, base)
        except OSError as e:  # a full disk: they stay in memory, and the next try waits for as many again
            print(spill.failed(path, len(records), e, self._mem // 2), flush=True)
        with self._changed:
            if offsets is not None:
                self._offsets.extend(offsets)
                del self._records[: len(records)]
                self._base += len(records)
            self._spill_at = self._mem if offsets is not None else len(self._records) + self._mem // 2
            self._spilling = False
            self._changed.notify_all()

    def _spill_path(self) -> str:
        if self._spill is None:
            self._spill = os.path.join(spill.runs_dir(), f"records-{os.getpid()}-{id(self):x}.jsonl")
        return self._spill

    def _spill_rest(self) -> None:
        """Every record still in memory to the spill file, here and now (the lock held)."""
        self._changed.wait_for(lambda: not self._spilling)  # a spill under way ends first (it needs the lock)
        self._offsets.extend(spill.append(self._spill_path(), self._records, self._base))
        self._base += len(self._records)
        self._records = []


def _lost_workers(started: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Which of an attempt's worker processes died of something other than Ray Train ending them, and why: first the
    ranks whose node the cluster has lost (the GCS's node table, which needs no dashboard), then each process's own
    end (Ray's state API: the dashboard's); an empty list where neither can answer."""
    lost = _ranks_on_lost_nodes(started)
    if lost:
        return lost
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


def _ranks_on_lost_nodes(started: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ranks of ``started`` whose node is dead in the GCS's node table, with the reason the GCS gives."""
    try:
        import ray

        dead = {n["NodeID"]: n for n in ray.nodes() if not n.get("Alive")}
    except Exception:  # noqa: BLE001 - no answer from the GCS: say less
        return []
    out = []
    for ev in started:
        node = dead.get(ev.get("node_id") or "")
        if node is not None:
            why = (node.get("DeathReasonMessage") or "no reason given").strip()
            address = node.get("NodeManagerAddress") or "?"
            out.append(
                {
                    "rank": ev["rank"],
                    "node": ev.get("node"),
                    "pid": ev["pid"],
                    "node_lost": f"{ev['node_id'][:8]} at {address}",
                    "why": why[:300],
                }
            )
    return out
