"""What every detached actor of raynb shares, inside the actor: its CPU priority, and how a spare nobody claimed
goes away (where it is placed: ``_shared/seam.py``).

Detached actors outlive the kernel that created them (a run belongs to the cluster). The price is that nothing
cleans them up with the connection, so a spare made in advance exits by itself unless a run claims it.
"""

from __future__ import annotations

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
    """Give this actor process the lowest CPU priority (nice 19, every thread), so where it shares cores with
    training -- the embedded cluster, a small head -- it runs in the time training leaves. Measured on 2 cores: the
    workers of a DDP run wait for each other at every step, so a few ms taken from one worker stall both. Only inside
    a Ray actor: the same classes are driven as plain objects in the kernel and in tests."""
    import ray

    if not ray.is_initialized() or ray.get_runtime_context().get_actor_id() is None:
        return
    try:  # Linux: a nice value belongs to a thread, so set it on each (threads started later inherit it)
        tids = [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        tids = [0]
    for tid in tids:
        try:
            os.setpriority(os.PRIO_PROCESS, tid, 19)
        except OSError:
            pass
