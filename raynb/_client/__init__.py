"""In the kernel, and on the head inside raynb's agent: the kernel's side of the seam: the one place kernel code starts
and asks raynb's actors on the cluster (the run registry, the spare launcher and sink kept warm for the next run).
Imports ``_shared`` and ``_remote`` (the classes it starts there).

Two implementations of the seam's ``ClusterSide``: ``cluster_side`` over Ray Client handles (the kernel's Python and
Ray match the cluster's), ``over_jobs.JobsSide`` over HTTP to raynb's agent, a Ray Job on the head (they do not).
Kernel code asks :func:`side` for the connection's one; the cluster's ``connect`` chooses it with :func:`use`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import cluster_side

if TYPE_CHECKING:  # mypy holds both implementations to the seam's Protocol
    from .._shared.seam import ClusterSide
    from .over_jobs import JobsSide

    _implements: ClusterSide = cluster_side
    _implements_too: type[ClusterSide] = JobsSide

__all__ = ["side", "use"]

_chosen: ClusterSide | None = None


def side() -> ClusterSide:
    """This kernel's way to raynb's side of the connected cluster (Ray Client's unless a connection chose another)."""
    return _chosen if _chosen is not None else cluster_side


def use(chosen: ClusterSide | None) -> None:
    """The connection's way to the cluster (None: Ray Client's, the default)."""
    global _chosen
    _chosen = chosen
