"""What a cluster's GPU nodes cost to keep: the instance presets' hourly prices x nodes x time. Pure: no I/O.

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
    nodes: int
    usd_per_node_hour: float

    @property
    def usd_per_hour(self) -> float:
        return self.nodes * self.usd_per_node_hour

    def usd_for(self, seconds: float) -> float:
        return self.usd_per_hour * max(seconds, 0.0) / 3600.0

    def text(self) -> str:
        """``2 x g6.12xlarge ≈ $9.20/h (on-demand list price, us-east-1)``."""
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
    return HourlyCost(itype, nodes, float(price))
