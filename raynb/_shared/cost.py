"""In any process: what a cluster's GPU nodes cost to keep: the instance presets' hourly prices x nodes x time. Pure: no
I/O.

The prices in ``presets.yaml`` are on-demand Linux list prices in us-east-1 (the file names the source and its date).
Another region, a Savings Plan or Spot changes them, so raynb says "about" and names the basis. Only the GPU nodes
count: the head runs on a system node that the EKS cluster keeps anyway. The embedded cluster costs nothing to keep.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["HourlyCost", "PRICE_BASIS", "hourly_cost", "usd"]

PRICE_BASIS = "on-demand list price, us-east-1"


@dataclass(frozen=True)
class HourlyCost:
    instance_type: str
    #: the GPU nodes the cluster has (autoscaled: the most it grows to)
    nodes: int
    usd_per_node_hour: float
    #: autoscaled clusters: the fewest GPU nodes, kept when idle (None: a fixed size)
    min_nodes: int | None = None

    @property
    def usd_per_hour(self) -> float:
        """At full size (autoscaled clusters cost less while they run fewer nodes)."""
        return self.nodes * self.usd_per_node_hour

    def usd_for(self, seconds: float) -> float:
        return self.usd_per_hour * max(seconds, 0.0) / 3600.0

    def text(self) -> str:
        """``2 × g6.12xlarge ≈ $9.20/h (on-demand list price, us-east-1)``; autoscaled:
        ``0–2 × g6.12xlarge, up to $9.20/h (...)``."""
        if self.min_nodes is not None:
            return (
                f"{self.min_nodes}–{self.nodes} × {self.instance_type}, up to {usd(self.usd_per_hour)}/h "
                f"({usd(self.usd_per_node_hour)} per node-hour, {PRICE_BASIS})"
            )
        return f"{self.nodes} × {self.instance_type} ≈ {usd(self.usd_per_hour)}/h ({PRICE_BASIS})"


def usd(amount: float) -> str:
    """Dollars as people read them: cents below $100, whole dollars above."""
    return f"${amount:,.2f}" if amount < 100 else f"${amount:,.0f}"


def hourly_cost(values: Mapping[str, str], presets: Mapping[str, Mapping[str, Any]]) -> HourlyCost | None:
    """The GPU nodes' price per hour from the values a cluster was made with; None where no price is known."""
    itype = values.get("GPU_NODE_TYPE") or ""
    try:
        nodes = int(values.get("GPU_NODE_COUNT") or 0)
    except ValueError:
        return None
    price = (presets.get(itype) or {}).get("usd_per_hour")
    if not itype or nodes <= 0 or price is None:
        return None
    least = values.get("GPU_MIN_NODES") if values.get("AUTOSCALING") == "true" else None
    return HourlyCost(itype, nodes, float(price), int(least) if least and least.isdigit() else None)
