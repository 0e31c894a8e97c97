"""On the head: what every detached actor of raynb shares, inside the actor: its CPU priority, and how a spare nobody
claimed goes away (where it is placed: ``_shared/seam.py``).

Detached actors outlive the kernel that created them (a run belongs to the cluster). The price is that nothing
cleans them up with the connection, so a spare made in advance exits by itself unless a run claims it.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable

__all__ = ["SpareClock", "leave", "yield_cpu_to_training"]


def leave() -> None:
    """End this actor as its own decision, from any of its threads: Ray's graceful exit (the actor's
    ``__ray_terminate__``, queued like a call), which Ray records as intended. A process that simply exits is, to
    Ray, a worker that died "by an unexpected system error", and every connected notebook printed that as a red
    paragraph each time an idle spare went. ``os._exit`` only where Ray cannot be asked."""
    try:
        import ray

        ray.get_runtime_context().current_actor.__ray_terminate__.remote()
    except Exception:  # noqa: BLE001 - not inside a Ray actor, or Ray is going away
        os._exit(0)


class SpareClock:
    """A spare's time to live: claimed within ``ttl_s`` it stays; not, it leaves (:func:`leave`), and a claim that
    comes after that is refused, so the kernel starts another spare rather than taking one on its way out."""

    def __init__(self, ttl_s: float, on_expiry: Callable[[], None] = leave) -> None:
        self._on_expiry = on_expiry
        self._lock = threading.Lock()
        self._claimed = self._left = False
        self._timer = threading.Timer(ttl_s, self._expire)
        self._timer.daemon = True
        self._timer.start()

    def claim(self) -> bool:
        with self._lock:
            self._claimed = not self._left
            return self._claimed

    def _expire(self) -> None:
        with self._lock:
            if self._claimed:
                return
            self._left = True
        self._on_expiry()


def yield_cpu_to_training() -> None:
    """Run this actor process in the time training leaves: Linux's idle scheduling class (every thread; threads
    started later inherit it), else nice 19. Ray starts its workers at nice 15, so nice 19 alone still took about a
    third of a core from a Train worker it shared the core with (CFS weights 15 : 36); the idle class weighs 3.
    Measured on 2 cores: the workers of a DDP run wait for each other at every step, so a few ms taken from one
    worker stall both. Only inside a Ray actor: the same classes are driven as plain objects in the kernel and in
    tests."""
    import ray

    if not ray.is_initialized() or ray.get_runtime_context().get_actor_id() is None:
        return
    try:  # Linux: a scheduling class and a nice value belong to a thread, so set them on each
        tids = [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        tids = [0]
    for tid in tids:
        try:
            os.sched_setscheduler(tid, os.SCHED_IDLE, os.sched_param(0))
        except (AttributeError, OSError):  # no idle class on this platform, or refused
            with contextlib.suppress(OSError):
                os.setpriority(os.PRIO_PROCESS, tid, 19)
