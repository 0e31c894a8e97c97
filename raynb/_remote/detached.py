"""What every detached actor of raynb shares, inside the actor: its CPU priority, and how a spare nobody claimed
goes away (where it is placed: ``_shared/seam.py``).

Detached actors outlive the kernel that created them (a run belongs to the cluster). The price is that nothing
cleans them up with the connection, so a spare made in advance exits by itself unless a run claims it.
"""

from __future__ import annotations

import contextlib
import os
import threading

__all__ = ["exit_unless_claimed", "yield_cpu_to_training"]


def exit_unless_claimed(claimed: threading.Event, ttl_s: float) -> None:
    """In a detached spare actor: exit the process if nobody claims it within ``ttl_s``."""

    def expire() -> None:
        if not claimed.wait(ttl_s):
            os._exit(0)

    threading.Thread(target=expire, name="raynb-spare-ttl", daemon=True).start()


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
    idle = getattr(os, "SCHED_IDLE", None)
    for tid in tids:
        try:
            if idle is None:
                raise OSError("no SCHED_IDLE here")
            os.sched_setscheduler(tid, idle, os.sched_param(0))
        except OSError:
            with contextlib.suppress(OSError):
                os.setpriority(os.PRIO_PROCESS, tid, 19)
