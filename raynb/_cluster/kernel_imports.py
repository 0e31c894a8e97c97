"""In the kernel: Ray Train imported in the kernel while a new embedded head boots, not on the first run's path.

A run's ``ScalingConfig`` and ``RunConfig`` are made in the kernel (``_runs/trainer_config.py``), and so the kernel's
first run imported Ray Train there: 0.8 s on the 2-core host, 2.6 s on an H100 node (record
first_step-h100-2026-12-07c: the first run reached its controller 4.6 s after the call, the second 0.9 s). A new
embedded head takes longer than that to boot, in processes of its own: the kernel imports Ray Train in that time,
from its main thread. Not from a thread beside ``up``: Ray's modules import one another, and a kernel connecting
over Ray Client imports some of them as Ray Train does -- the two met half-imported (an ``AttributeError`` in
JupyterLab's ``%raycluster up --local``, seen once in the suite).
"""

from __future__ import annotations

import contextlib

__all__ = ["import_ray_train"]


def import_ray_train() -> None:
    """Import Ray Train here and now; any error is left to the first run, which imports it again and says."""
    with contextlib.suppress(Exception):
        import ray.train  # noqa: F401
