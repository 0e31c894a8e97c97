"""A stand-in for what the display reads from a run (``raynb.display.viewed_run.ViewedRun``): records and fields as
plain values, so the display's tests need no cluster."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any


def fake_run(
    records: list[dict[str, Any]],
    *,
    status: str = "running",
    workers: int = 2,
    gpu: bool = False,
    cpus_per_worker: float = 1.0,
    max_failures: int = 0,
    usd_per_hour: float | None = None,
    total_steps: int | None = None,
    stall_min_s: float = 300.0,
    **fields: Any,
) -> SimpleNamespace:
    """``fields`` override the rest (``name``, ``elapsed``, ``events``, ``error``, ``attempt``, ...)."""
    run = {
        "name": "r1",
        "status": status,
        "phase": status,
        "records": records,
        "events": [],
        "step": max((r["step"] for r in records if r.get("kind") != "gpu"), default=0),
        "attempt": 1,
        "elapsed": 65.0,
        "error": None,
        "nccl": {},
        "spec": SimpleNamespace(
            workers=workers,
            gpu=gpu,
            cpus_per_worker=cpus_per_worker,
            max_failures=max_failures,
            usd_per_hour=usd_per_hour,
            total_steps=total_steps,
            stall_factor=10.0,
            stall_min_s=stall_min_s,
        ),
    }
    return SimpleNamespace(**{**run, **fields})
