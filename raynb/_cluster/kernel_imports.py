"""Ray Train imported in the kernel while ``up`` waits for its cluster, not in the first run's path.

A run's ``ScalingConfig`` and ``RunConfig`` are made in the kernel (``_runs/trainer_config.py``), and so the kernel's
first run imported Ray Train there: 0.8 s on the 2-core host, 2.6 s on an H100 node (record
first_step-h100-2026-12-07c: the first run reached its controller 4.6 s after the call, the second 0.9 s). ``up``
spends longer than that waiting for a head to start or a pod to be scheduled, in this process's other threads.

The import runs in a thread for as long as ``up`` runs, and ``up`` returns only once it has ended: nothing else the
notebook imports meanwhile (the next cell) meets Ray Train half-imported.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["ray_train_imported_meanwhile"]

F = TypeVar("F", bound=Callable[..., Any])
#: an import slower than this (a cold disk) is left to finish on the first run's path, as before
JOIN_S = 60.0


def _import_ray_train() -> None:
    with contextlib.suppress(Exception):  # the first run imports it again and says what is wrong
        import ray.train  # noqa: F401


def ray_train_imported_meanwhile(fn: F) -> F:
    """Run ``fn`` with Ray Train being imported beside it; return (or raise) once that import has ended."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        thread = threading.Thread(target=_import_ray_train, name="raynb-import-ray-train", daemon=True)
        thread.start()
        try:
            return fn(*args, **kwargs)
        finally:
            thread.join(JOIN_S)

    return wrapper  # type: ignore[return-value]
