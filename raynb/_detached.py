"""What every detached actor of raynb shares: where it is placed, and how a spare nobody claimed goes away.

Detached actors outlive the kernel that created them (a run belongs to the cluster). The price is that nothing
cleans them up with the connection, so a spare made in advance exits by itself unless a run claims it.
"""

from __future__ import annotations

import os
import threading

__all__ = ["NAMESPACE", "on_head", "exit_unless_claimed"]

NAMESPACE = "raynb"


def on_head() -> dict[str, float]:
    """Pin to the head node: a worker node's loss must not take a run's list or history with it."""
    return {"node:__internal_head__": 0.001}


def exit_unless_claimed(claimed: threading.Event, ttl_s: float) -> None:
    """In a detached spare actor: exit the process if nobody claims it within ``ttl_s``."""

    def expire() -> None:
        if not claimed.wait(ttl_s):
            os._exit(0)

    threading.Thread(target=expire, name="raynb-spare-ttl", daemon=True).start()
