"""In the kernel, and on the head inside raynb's agent: a warm group's mailbox as the kernel reaches it: cells go in,
each rank's result comes back, an interrupt or the end goes to every rank. The mailbox is a plain (not detached)
actor of this connection: it goes with the kernel, and the warm run's workers, which poll it, end with it."""

from __future__ import annotations

from typing import Any

from . import handles

__all__ = ["WarmChannel"]


class WarmChannel:
    """One warm group's mailbox. ``token`` goes into the warm run's config: it is what the workers poll."""

    @handles.calls_ray
    def __init__(self, workers: int, idle_s: float) -> None:
        import ray

        from .._remote.warm_worker import WarmMailbox
        from .._shared.seam import on_head

        cls = ray.remote(num_cpus=0, max_concurrency=64, resources=on_head())(WarmMailbox)  # outlives a worker node
        self.token: Any = cls.remote(workers, idle_s)

    @handles.calls_ray
    def post(self, cell: dict[str, Any]) -> int:
        """Hand a cell to every rank; its id."""
        import ray

        cell_id: int = ray.get(self.token.put.remote(cell))
        return cell_id

    @handles.calls_ray
    def results(self, cell_id: int, timeout: float) -> dict[int, dict[str, Any]]:
        """The ranks' results for the cell so far, waiting up to ``timeout`` for one more."""
        import ray

        got: dict[int, dict[str, Any]] = ray.get(self.token.results.remote(cell_id, timeout))
        return got

    @handles.calls_ray
    def interrupt(self, cell_id: int) -> None:
        """Ask every rank to stop the cell (returns at once)."""
        self.token.interrupt.remote(cell_id)

    @handles.calls_ray
    def idle_for(self) -> float:
        import ray

        return float(ray.get(self.token.idle_for.remote(), timeout=10))

    @handles.calls_ray
    def stop(self) -> None:
        """Tell every rank to leave its loop: the warm run ends."""
        import ray

        ray.get(self.token.stop.remote(), timeout=10)
