"""On the head: the cluster's list of runs: one detached, named actor (``raynb-runs`` in the ``raynb`` namespace) per
cluster, started and asked by the kernel through ``_client/spares.py``.

A run belongs to the cluster, not to the kernel that started it: its launcher (which calls ``TorchTrainer.fit()``)
and its metrics sink are detached actors, and this registry holds their handles with what a later kernel needs to
find them again (name, shape, who started it, status, outcome). Killing the kernel, restarting it or losing the
connection leaves all of it running; ``raynb.runs()`` and ``raynb.attach(name)`` read it back.

Finished runs stay attachable (status, metrics, error, checkpoint) until removed (``raynb.remove_run``) or until more than
``KEEP_FINISHED`` finished runs exist, when the oldest finished ones go first. An ended run's sink stays a process for
the run's ``sink_stays_s`` (the kernels following it read its last records meanwhile), then hands its history to a
file on the head and exits; from then on this registry answers the reads for it (:meth:`RunRegistry.history`).

On a RayCluster, the registry also tells the cluster's Kubernetes object what runs (``_shared/run_notice.py``: a label
and an annotation, written with the head pod's service account by ``kube_notice.py``) -- at once when a run starts or
ends, and every ``NOTICE_S`` while one runs -- so a run nobody follows is seen by kubectl, colleagues and idle policies.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import time
from typing import Any

from .._shared.outcome import Outcome, RunStatus
from .._shared.run_notice import Notice, notice_of, patch_body
from .._shared.seam import ACTIVE, KEEP_FINISHED
from .kube_notice import NoticeRefused, PodIdentity, patch_raycluster
from .sink import MetricsSink

__all__ = ["RunRegistry", "STALL_CHECK_S", "NOTICE_S"]

#: how often the registry looks for stalled runs that asked to be stopped (``on_stall="stop"``)
STALL_CHECK_S = 5.0
#: how often a running run's step reaches its RayCluster (each write is one PATCH, and a reconcile of KubeRay's)
NOTICE_S = 10.0
#: a notice unchanged this long is written again while runs go on: its time says the head is still there
NOTICE_REFRESH_S = 60.0
#: the reads a retired run's history answers (``history``), with the place of each one's wait in its arguments
HISTORY_READS = {"picture": 2, "read": 2, "read_logs": 3, "watch": None, "summary": None}
#: retired runs' histories kept loaded (the most recently read)
LOADED_HISTORIES = 4


class RunRegistry:
    """Async actor (0 CPUs): name → the run's info, launcher and sink handles."""

    def __init__(self) -> None:
        self.started = time.time()  # the head (re)started about then: runs from before are gone with it
        self._runs: dict[str, dict[str, Any]] = {}
        self._handles: dict[str, tuple[Any, Any]] = {}
        self._changed: dict[str, asyncio.Event] = {}
        self._guard: asyncio.Task[None] | None = None  # stops the stalled runs that asked for it (on_stall="stop")
        self._stalled: set[str] = set()  # runs the guard found stalled at its last look
        self._notice: Notice | None = None  # the last one written on the RayCluster
        self._notice_kick = asyncio.Event()  # a run started or ended: write now
        self._notice_task: asyncio.Task[None] | None = None
        self._notice_refused: tuple[float, str] | None = None  # until when not to try again, and why
        self._histories: dict[str, str] = {}  # a retired run's history file (its sink has exited)
        self._loaded: dict[str, MetricsSink] = {}  # some of them read back, the most recently used last
        self._answered: dict[tuple[str, str, tuple[Any, ...]], Any] = {}  # their rows for `ls` and the notice

    async def register(self, name: str, info: dict[str, Any], launcher: Any, sink: Any) -> dict[str, Any] | None:
        """Record a new run; returns the existing run's info instead if a run of that name is going on. A finished
        run of that name is replaced: starting a run again under its name is how Ray Train resumes it."""
        if name in self._runs:
            if self._runs[name]["status"] in ACTIVE:
                return self._runs[name]
            await self.remove(name)
        self._runs[name] = {
            **info,
            "name": name,
            "status": RunStatus.RUNNING.value,
            "started": time.time(),
            "ended": None,
        }
        self._handles[name] = (launcher, sink)
        self._changed[name] = asyncio.Event()
        await self._forget_old()
        if self._guard is None:
            self._guard = asyncio.get_running_loop().create_task(self._stop_stalled())
        self._kick_notice()
        return None

    def _kick_notice(self) -> None:
        """A run started or ended: its RayCluster hears of it now (in a pod; elsewhere nothing is tried)."""
        if self._notice_task is None:
            if PodIdentity.from_env() is None:
                return  # not a pod of a RayCluster (or no token yet): the next run's start looks again
            self._notice_task = asyncio.get_running_loop().create_task(self._keep_notice())
        self._notice_kick.set()

    async def _keep_notice(self) -> None:
        while True:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._notice_kick.wait(), NOTICE_S)
            self._notice_kick.clear()
            try:
                await self._write_notice()
            except Exception as e:  # noqa: BLE001 - the notice must never take the registry down
                print(f"[raynb] the run notice was not written: {type(e).__name__}: {e}", flush=True)

    async def _write_notice(self) -> None:
        now = time.time()
        ident = PodIdentity.from_env()
        if ident is None or (self._notice_refused and now < self._notice_refused[0]):
            return
        ended = [(r["ended"], n) for n, r in self._runs.items() if r["status"] not in ACTIVE and r["ended"]]
        last = max(ended, default=(0, None))[1]
        rows = []
        for name, run in list(self._runs.items()):
            row = dict(run)
            if run["status"] in ACTIVE or name == last:  # the step: the sink's
                with contextlib.suppress(Exception):  # a sink lost with its node: the row says what is known
                    row.update(await asyncio.wait_for(self._sink_call(name, "summary"), 5))
            rows.append(row)
        notice = notice_of(rows, now, ACTIVE)
        old = self._notice
        if old is not None and notice.same_as(old) and (not notice.running or now - old.updated < NOTICE_REFRESH_S):
            return
        try:
            await asyncio.to_thread(patch_raycluster, ident, patch_body(notice))
        except NoticeRefused as e:
            lasting = e.status in (401, 403, 404)  # no such right, or no such RayCluster: not for a while
            why = f"the head could not write the run notice on {ident.where} ({e})"
            if self._notice_refused is None or self._notice_refused[1] != why:
                print(f"[raynb] {why}" + ("; trying again in 5 min" if lasting else ""), flush=True)
            self._notice_refused = (now + (300.0 if lasting else NOTICE_S), why)
            return
        self._notice, self._notice_refused = notice, None

    async def _watch(self, name: str) -> dict[str, Any] | None:
        """The run's progress and stall verdict by its own settings (None: its sink does not answer); a finished run
        is never stalled (no window is long enough)."""
        run = self._runs.get(name)
        if run is None:  # removed meanwhile
            return None
        spec = run.get("spec") or {}
        min_s = spec.get("stall_min_s", 300.0) if run["status"] in ACTIVE else math.inf
        args = (spec.get("total_steps"), spec.get("stall_factor", 10.0), min_s)
        try:
            found: dict[str, Any] = await asyncio.wait_for(self._sink_call(name, "watch", *args), 5)
        except Exception:  # noqa: BLE001 - a sink lost with its node, or one of an earlier raynb
            return None
        return found

    async def _stop_stalled(self) -> None:
        """Every ``STALL_CHECK_S``, stop each running run that asked for it and is found stalled twice in a row (a
        verdict that holds one more look) -- here, on the cluster, so no kernel needs to be there."""
        while True:
            await asyncio.sleep(STALL_CHECK_S)
            for name, run in list(self._runs.items()):
                if run["status"] not in ACTIVE or (run.get("spec") or {}).get("on_stall") != "stop":
                    continue
                try:
                    watched = await self._watch(name)
                    if not (watched and watched["stall"]):
                        self._stalled.discard(name)
                    elif name not in self._stalled:  # seen once: the kernels' views say so until the next look
                        self._stalled.add(name)
                    else:
                        why = "stalled, stopped by raynb (on_stall=stop): " + watched["stall"]["text"]
                        await self.stop(name, int(watched["progress"]["done"]), reason=why)
                except Exception:  # noqa: BLE001 - the run was removed meanwhile: the guard goes on for the others
                    self._stalled.discard(name)

    async def finished(self, name: str, outcome: dict[str, Any]) -> None:
        """Called by the run's launcher when ``fit()`` returns (with or without a kernel listening), and by the kernel
        when a worker raised with no restart left (``outcome["early"]``: ``fit()``'s own outcome replaces it)."""
        run = self._runs.get(name)
        if run is None:
            return
        ended = Outcome.from_wire(outcome)
        if run["status"] not in ACTIVE:
            if (run.get("outcome") or {}).get("early") and run["status"] == ended.status.value:
                run["outcome"] = ended.to_wire()  # the details (each rank's failure) of the failure already recorded
            return
        run.update(status=ended.status.value, ended=time.time(), outcome=ended.to_wire())
        self._ended(name)  # its launcher stays: the kernel's next run may take it (it exits when idle)

    async def stop(self, name: str, step: int | None = None, reason: str | None = None) -> dict[str, Any] | None:
        """Stop a running run: killing its launcher takes Train's controller and workers with it."""
        run = self._runs.get(name)
        if run is None:
            return None
        if run["status"] in ACTIVE:
            _kill(self._handles[name][0])
            outcome = Outcome(RunStatus.ABORTED, step=step, reason=reason)
            run.update(status=outcome.status.value, ended=time.time(), outcome=outcome.to_wire())
            self._ended(name)
        return run

    async def get(self, name: str) -> tuple[dict[str, Any], Any, Any] | None:
        if name not in self._runs:
            return None
        launcher, sink = self._handles[name]
        return self._runs[name], launcher, sink

    async def wait(self, name: str, timeout: float) -> dict[str, Any] | None:
        """The run's info once it has ended, or None after ``timeout``. A launcher that died without saying how its
        run ended (its node or process lost) ends the run as failed."""
        run = self._runs.get(name)
        if run is None:
            return None
        if run["status"] in ACTIVE:
            try:
                await asyncio.wait_for(self._changed[name].wait(), timeout)
            except asyncio.TimeoutError:
                await self._check_alive(name)
        return run if run["status"] not in ACTIVE else None

    async def _check_alive(self, name: str) -> None:
        run, launcher = self._runs[name], self._handles[name][0]
        try:
            await asyncio.wait_for(launcher.alive.remote(), 30)
        except asyncio.TimeoutError:
            return  # busy, not dead
        except Exception as e:  # noqa: BLE001 - ActorDiedError and friends
            if run["status"] in ACTIVE:
                why = f"the run's launcher (where fit() and Ray Train's controller ran) is gone: {e}"
                lost = Outcome(RunStatus.FAILED, error_type=type(e).__name__, message=why[:2000])
                run.update(status=lost.status.value, ended=time.time(), outcome=lost.to_wire())
                self._ended(name)

    def _ended(self, name: str) -> None:
        """The run has just ended: every kernel hears of it; its sink retires after the run's ``sink_stays_s``."""
        self._kick_notice()
        self._changed[name].set()
        sink = self._handles[name][1]
        asyncio.get_running_loop().create_task(self._retire(name, sink, self._runs[name].get("sink_stays_s", 60.0)))

    async def _retire(self, name: str, sink: Any, after_s: float) -> None:
        await asyncio.sleep(after_s)
        if self._handles.get(name, (None, None))[1] is not sink:  # removed, or a new run under its name
            return
        try:
            path = await asyncio.wait_for(sink.retire.remote(), 60)
        except Exception:  # noqa: BLE001 - lost with its node, or a sink of an earlier raynb: it stays as it is
            return
        if self._handles.get(name, (None, None))[1] is not sink:  # removed meanwhile
            with contextlib.suppress(OSError):
                os.unlink(path)
            return
        self._histories[name] = path
        self._handles[name] = (self._handles[name][0], None)
        _kill(sink)

    async def history(self, name: str, method: str, args: tuple[Any, ...]) -> Any:
        """What the run's sink answered to ``method(*args)``, for a run whose sink has retired; None where there is
        no such history. A read that would have waited for news waits here (nothing new comes) and answers."""
        path = self._histories.get(name)
        if path is None or method not in HISTORY_READS:
            return None
        sink = self._loaded.pop(name, None)
        if sink is None:
            sink = await asyncio.to_thread(MetricsSink.restored, path)
        self._loaded[name] = sink
        while len(self._loaded) > LOADED_HISTORIES:
            del self._loaded[next(iter(self._loaded))]
        at = HISTORY_READS[method]
        wait = 0.0
        if at is not None and len(args) > at:
            wait, args = float(args[at] or 0.0), (*args[:at], 0.0, *args[at + 1 :])
        found = await asyncio.to_thread(getattr(sink, method), *args)
        if wait and not any(isinstance(x, (list, bytes)) and x for x in found):
            await asyncio.sleep(min(wait, 5.0))
        return found

    async def _sink_call(self, name: str, method: str, *args: Any) -> Any:
        """``method(*args)`` of the run's sink, or of its history where it has retired (kept: `ls` asks for every
        run's row, and a history does not change)."""
        sink = self._handles[name][1]
        if sink is not None:
            return await getattr(sink, method).remote(*args)
        key = (name, method, args)
        if key not in self._answered:
            self._answered[key] = await self.history(name, method, args)
        return self._answered[key]

    async def started_at(self) -> float:
        return self.started

    async def rows(self) -> list[dict[str, Any]]:
        """Every run with its latest step, report time, progress and stall verdict: one call to each run's sink, all
        at once (a sink lost with its node costs its 5 s once, not once per run)."""
        names = list(self._runs)
        watched = await asyncio.gather(*(self._watch(n) for n in names))
        out = []
        for name, found in zip(names, watched, strict=True):
            if (run := self._runs.get(name)) is None:
                continue
            row = {k: v for k, v in run.items() if k != "outcome"}
            row.update(found or {})  # None: a sink lost with its node -- the row still says what is known
            row["why"] = (run.get("outcome") or {}).get("reason")  # a stop's reason (on_stall="stop")
            out.append(row)
        return out

    async def active(self) -> list[str]:
        return [n for n, r in self._runs.items() if r["status"] in ACTIVE]

    async def remove(self, name: str) -> dict[str, Any] | None:
        """Forget a finished run and free its history; None if there is no such run. Refuses an active one."""
        run = self._runs.get(name)
        if run is None or run["status"] in ACTIVE:
            return run
        _launcher, sink = self._handles.pop(name)
        del self._runs[name], self._changed[name]
        if sink is None:  # retired: its history and spill files
            path, loaded = self._histories.pop(name), self._loaded.pop(name, None)
            self._answered = {k: v for k, v in self._answered.items() if k[0] != name}
            with contextlib.suppress(Exception):  # unreadable: its spill file stays in the head's temp folder
                history = loaded if loaded is not None else await asyncio.to_thread(MetricsSink.restored, path)
                history.discard()
            with contextlib.suppress(OSError):
                os.unlink(path)
            return run
        try:
            await asyncio.wait_for(sink.discard.remote(), 10)  # its spill file
        except Exception:  # noqa: BLE001 - gone already
            pass
        _kill(sink)  # the launcher is not the run's any more: it serves the next run or exits when idle
        return run

    async def _forget_old(self) -> None:
        done = sorted((r["ended"] or 0, n) for n, r in self._runs.items() if r["status"] not in ACTIVE)
        for _ended, name in done[: max(0, len(done) - KEEP_FINISHED)]:
            await self.remove(name)


def _kill(actor: Any) -> None:
    import ray

    try:
        ray.kill(actor, no_restart=True)
    except Exception:  # noqa: BLE001 - already gone
        pass
