"""In the kernel, and on the head inside raynb's agent: one run on the cluster as the kernel reaches it: its entry in
the cluster's registry, its launcher (where ``fit()`` runs), its sink (the picture, the records, what the workers
printed). Every call the kernel makes about a run goes through a :class:`RunChannel`; what crosses is plain data
(dicts, lists, the pickled picture)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

from .._shared.outcome import Outcome
from .._shared.picture import log_line
from . import handles

__all__ = ["RunChannel", "echo_logs"]

#: the longest one call of a run's outcome waits before asking again: disconnecting waits for the call in flight
#: (``handles.close``), so this is what `down` may wait for a thread still following a run (0.72 s measured at 2 s,
#: 0.23 s at 0.5 s, right after a failing run whose wind-down the kernel follows)
WAIT_S = 0.5


def echo_logs(channel: Any, ended: Callable[[], bool]) -> None:
    """Print what the run's ranks print, from its history (the sink), until ``ended()`` -- then what came last. Where
    the workers' output has no other way: a kernel on the Ray Jobs path, a run's own Ray Job."""
    seq, last = 0, False
    while not last:
        last = ended()
        try:
            seq, lines, _ = channel.logs(seq, None, None, timeout=None if last else 1.0)
        except Exception:  # noqa: BLE001 - the cluster does not answer now (or the sink went with the run)
            time.sleep(1.0)
            continue
        for x in lines:
            print(log_line(x, True), flush=True)


class RunChannel:
    """The handles of one run. ``registry`` and ``launcher`` may be None where only the sink is read (a bench)."""

    def __init__(self, name: str, registry: Any, launcher: Any, sink: Any) -> None:
        self.name, self.registry, self.launcher, self.sink = name, registry, launcher, sink
        self._fit: Any = None  # the launcher's fit() call, when this kernel started the run

    # --- the run's life -------------------------------------------------------------------------------------------
    @handles.calls_ray
    def launch(self, payload: bytes, config: dict[str, Any], spec: dict[str, Any]) -> None:
        """Start ``fit()`` in the launcher (returns at once); ``spec`` is what the launcher needs besides the cell."""
        self._fit = self.launcher.fit.remote(payload, config, {**spec, "registry": self.registry}, self.sink)

    def outcome(self) -> tuple[Outcome, float | None]:
        """Block until the run ends: how it ended and when (None: now). A run this kernel launched answers from its
        ``fit()`` (or, where that call ends with its actor, from the registry, which then says how the run ended for every
        kernel); one found in the registry from the registry. Raises if the cluster goes."""
        import ray

        if self._fit is not None:
            try:
                while (answer := self._fit_answer(WAIT_S)) is None:
                    pass
                return Outcome.from_wire(answer), None
            except ray.exceptions.RayActorError:
                pass  # the launcher stopped, lost or out of reach for a moment: the registry tells which, and records it
        while (info := self._registry_wait(WAIT_S)) is None:
            pass
        return Outcome.from_wire(info.get("outcome") or {"status": info["status"]}), info.get("ended")

    # each wait is short, so that a kernel disconnecting never waits long for this call to leave the gate
    @handles.calls_ray
    def _fit_answer(self, timeout: float) -> dict[str, Any] | None:
        import ray

        done, _ = ray.wait([self._fit], timeout=timeout)
        return ray.get(self._fit) if done else None

    @handles.calls_ray
    def _registry_wait(self, timeout: float) -> dict[str, Any] | None:
        import ray

        return ray.get(self.registry.wait.remote(self.name, timeout))

    @handles.calls_ray
    def entry(self, timeout: float | None = None) -> dict[str, Any] | None:
        """What the registry holds of the run now (None: no such run any more)."""
        import ray

        found = ray.get(self.registry.get.remote(self.name), timeout=timeout)
        return None if found is None else found[0]

    @handles.calls_ray
    def stop(self, step: int | None = None) -> None:
        """Stop the run: the registry kills the launcher, which takes the Train controller and workers with it; if the
        registry does not answer, the launcher is killed from here."""
        import ray

        try:
            ray.get(self.registry.stop.remote(self.name, step), timeout=10)
        except Exception:  # noqa: BLE001 - the registry does not answer
            with contextlib.suppress(Exception):
                ray.kill(self.launcher, no_restart=True)

    @handles.calls_ray
    def failed(self, outcome: Outcome) -> None:
        """The registry records the run failed now (every kernel, ``down`` and ``ls`` see it); ``fit()``'s own outcome
        follows when Ray Train has wound the run down."""
        import ray

        ray.get(self.registry.finished.remote(self.name, outcome.to_wire()), timeout=10)

    # --- the run's sink ---------------------------------------------------------------------------------------------
    def _read(self, method: str, *args: Any, timeout: float | None = None) -> Any:
        """``method(*args)`` of the run's sink; once the sink has retired (an ended run's, after its
        ``sink_stays_s``), of the run's history, which the registry answers the same way."""
        import ray

        if self.sink is not None:
            try:
                return ray.get(getattr(self.sink, method).remote(*args), timeout=timeout)
            except ray.exceptions.RayActorError as e:
                lost: BaseException = e  # retired, or lost with its node: the registry knows which
        else:
            lost = RuntimeError(
                f"Run {self.name!r}'s history is no longer on the cluster (its sink has exited and the registry "
                "holds no copy: the run was removed meanwhile). `%raytrain ls` lists the runs the cluster still has."
            )
        found = None if self.registry is None else ray.get(self.registry.history.remote(self.name, method, args))
        if found is None:
            raise lost
        self.sink = None  # retired for good: ask the registry from now on
        return found

    @handles.calls_ray
    def picture(
        self, version: int, events_seen: int, timeout: float, since: dict[int, tuple[int, int]] | None = None
    ) -> tuple[int, bytes | None, list, dict]:
        """(version, the pickled picture if newer than ``version`` -- as what changed since the reader's copy of
        shape ``since`` --, events after ``events_seen``, summary); waits up to ``timeout`` for something new."""
        args = (version, events_seen, timeout) if since is None else (version, events_seen, timeout, since)
        version, pic, events, summary = self._read("picture", *args)
        return version, pic, events, summary

    @handles.calls_ray
    def records(self, cursor: int, chunk: int) -> list[dict[str, Any]]:
        """Up to ``chunk`` records from index ``cursor`` on."""
        _cursor, recs, _ = self._read("read", cursor, 1 << 62, 0.0, chunk)
        return list(recs)

    @handles.calls_ray
    def watch(self, total: float | None, factor: float, min_s: float) -> dict[str, Any]:
        """How far the run is and its stall verdict, with each rank's last printed line."""
        found: dict[str, Any] = self._read("watch", total, factor, min_s, timeout=10)
        return found

    @handles.calls_ray
    def logs(
        self, after: int, rank: int | None, tail: int | None, timeout: float | None = None
    ) -> tuple[int, list[dict[str, Any]], int]:
        """(last line's number, lines printed after line ``after`` -- every rank or ``rank``, the last ``tail`` --,
        lines no longer kept); with ``timeout``, waits that long for a new line."""
        args = (after, rank, tail) if timeout is None else (after, rank, tail, timeout)
        seq, lines, dropped = self._read("read_logs", *args)
        return seq, lines, dropped
