"""The names both sides of the seam agree on: where raynb's detached actors live and what the registry keeps.
Standard library only."""

from __future__ import annotations

__all__ = ["NAMESPACE", "REGISTRY_NAME", "ACTIVE", "KEEP_FINISHED", "SPARE_TTL_S", "on_head"]

#: every detached actor of raynb
NAMESPACE = "raynb"
#: the cluster's run registry: one named, detached actor on the head
REGISTRY_NAME = "raynb-runs"
#: a run's statuses while it goes on
ACTIVE = ("running",)
#: finished runs the registry keeps (the oldest go first)
KEEP_FINISHED = 50
#: a spare launcher or sink nobody claims within this exits by itself
SPARE_TTL_S = 600.0


def on_head() -> dict[str, float]:
    """Pin to the head node: a worker node's loss must not take a run's list or history with it."""
    return {"node:__internal_head__": 0.001}
