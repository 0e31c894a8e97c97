"""The kernel's side of the seam: the one place kernel code starts and asks raynb's actors on the cluster (the run
registry, the spare launcher and sink kept warm for the next run). Imports ``_shared`` and ``_remote`` (the
classes it starts there)."""

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # mypy holds the one implementation to the seam's Protocol
    from .._shared.seam import ClusterSide
    from . import cluster_side

    _implements: ClusterSide = cluster_side
