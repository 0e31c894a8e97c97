"""In the kernel: what ``Cluster.status()`` answers: Ray's nodes and resources, the RayCluster's pods and nodes, the
warm group and what the GPU nodes cost. Plain data; ``display/cluster_view.py`` draws it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .._shared.cost import HourlyCost
    from .backend import BackendKind
    from .kube_state import KubeStatus

__all__ = ["ClusterStatus", "NodeInfo"]


@dataclass(frozen=True)
class NodeInfo:
    node_id: str
    address: str
    alive: bool
    is_head: bool
    cpus: float
    gpus: float
    memory_gb: float


@dataclass(frozen=True, repr=False)
class ClusterStatus:
    name: str
    kind: BackendKind
    address: str
    dashboard_url: str | None
    nodes: list[NodeInfo] = field(default_factory=list)
    total: dict[str, float] = field(default_factory=dict)
    available: dict[str, float] = field(default_factory=dict)
    #: Kubernetes clusters: the RayCluster's pods and the nodes they run on (GPUs and EFA per node).
    kube: KubeStatus | None = None
    #: this kernel's warm worker group, in words (it holds workers -- and GPUs -- between cells)
    warm: str | None = None
    #: what the GPU nodes cost per hour (Kubernetes clusters whose instance type has a price in the presets)
    cost: HourlyCost | None = None
    #: how this kernel reaches the cluster and why ("through Ray Jobs: kernel 3.12 / Ray 2.55.1, cluster ...")
    reached: str | None = None

    @property
    def cpus(self) -> float:
        return self.total.get("CPU", 0.0)

    @property
    def gpus(self) -> float:
        return self.total.get("GPU", 0.0)

    def text(self) -> str:
        from ..display.cluster_view import status_text

        return status_text(self)

    def html(self) -> str:
        from ..display.cluster_view import status_html

        return status_html(self)

    def __repr__(self) -> str:
        return self.text()

    def _repr_html_(self) -> str:
        return self.html()
