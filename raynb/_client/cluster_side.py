"""In the kernel, and on the head inside raynb's agent: the kernel ↔ cluster seam for the connected cluster: start a
run, find one, list, stop and remove runs, and run a plain function on a node. Kernel code reaches raynb's actors
only through here, ``run_channel.py`` (one run) and ``warm_channel.py`` (a warm group) -- tests/unit/test_house.py
holds it -- so a second way to reach a cluster (Ray Jobs, with the kernel's Python and Ray differing from the
image's) is one more implementation of these calls."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from .._remote.launcher import Launcher
from .._remote.sink import MetricsSink
from ..errors import UsageError
from . import handles
from .run_channel import RunChannel
from .spares import drop_spare, drop_taken, find_registry, free_name, prewarm, registry, take_spare
from .warm_channel import WarmChannel

__all__ = [
    "code_crosses",
    "streams_worker_output",
    "connected",
    "resources",
    "prewarm",
    "drop_spare",
    "free_name",
    "open_warm",
    "start_run",
    "find_run",
    "list_runs",
    "active_runs",
    "remove_run",
    "head_started_at",
    "run_task",
]

T = TypeVar("T")

#: code objects cross (the kernel's Python and Ray are the cluster's), and Ray streams what workers print
code_crosses = True
streams_worker_output = True


def connected() -> bool:
    import ray

    return bool(ray.is_initialized())


@handles.calls_ray
def resources() -> dict[str, Any]:
    """The cluster's resources now, and each node's, as plain data."""
    import ray

    keep = ("NodeID", "NodeManagerAddress", "Alive", "Resources")
    return {
        "total": dict(ray.cluster_resources()),
        "available": dict(ray.available_resources()),
        "nodes": [{k: n.get(k) for k in keep} for n in ray.nodes()],
    }


@handles.calls_ray
def start_run(name: str, info: dict[str, Any]) -> RunChannel:
    """Register a new run under ``name`` with the warm launcher and sink (``info``: what a later kernel reads of it).
    Refused when another kernel took the name a moment ago."""
    import ray

    reg = registry()
    launcher, sink = take_spare(name)
    taken = ray.get(reg.register.remote(name, info, launcher, sink))
    if taken is not None:
        drop_taken(name)
        for actor in (launcher, sink):
            ray.kill(actor, no_restart=True)
        raise UsageError(f"A run named {name!r} was just started by {taken.get('user')}.", fix="give another name")
    return RunChannel(name, reg, launcher, sink)


@handles.calls_ray
def find_run(name: str) -> tuple[dict[str, Any], RunChannel] | None:
    """The registry's entry for run ``name`` and a channel to it (None: no such run on this cluster)."""
    import ray

    reg = registry()
    found = ray.get(reg.get.remote(name))
    if found is None:
        return None
    info, launcher, sink = found
    return info, RunChannel(name, reg, handles.typed(launcher, Launcher), handles.typed(sink, MetricsSink))


@handles.calls_ray
def list_runs() -> list[dict[str, Any]]:
    """Every run the cluster keeps (running, and finished ones not yet removed), with its latest step."""
    import ray

    reg = find_registry()
    return [] if reg is None else list(ray.get(reg.rows.remote()))


@handles.calls_ray
def active_runs() -> list[str]:
    """Names of the runs going on."""
    import ray

    reg = find_registry()
    return [] if reg is None else list(ray.get(reg.active.remote()))


@handles.calls_ray
def remove_run(name: str) -> dict[str, Any] | None:
    """Forget a finished run and its history; the entry as it was (an active run's: not removed), or None."""
    import ray

    found: dict[str, Any] | None = ray.get(registry().remove.remote(name))
    return found


@handles.calls_ray
def head_started_at() -> float | None:
    """When the cluster's registry started (about when its head did; None: a registry that cannot say)."""
    import ray

    try:
        return float(ray.get(registry().started_at.remote(), timeout=10))
    except Exception:  # noqa: BLE001 - a registry from an older raynb
        return None


def open_warm(workers: int, idle_s: float) -> WarmChannel:
    """A mailbox for a warm group of ``workers`` ranks that ends itself after ``idle_s`` without a cell."""
    return WarmChannel(workers, idle_s)


@handles.calls_ray
def run_task(fn: Callable[..., T], *args: Any, node_id: str | None = None, timeout: float = 120.0) -> T:
    """``fn(*args)`` as a task on the cluster (0 CPUs; on node ``node_id`` if given), its answer."""
    import ray

    options: dict[str, Any] = {"num_cpus": 0}
    if node_id is not None:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node_id, soft=False)
    answer: T = ray.get(ray.remote(**options)(fn).remote(*args), timeout=timeout)
    return answer
