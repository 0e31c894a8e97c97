"""In any process: what one NCCL process saw, as data: the documented JSON fields and one line for a person."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

__all__ = ["NcclSummary"]


@dataclass
class NcclSummary:
    """What one NCCL process saw. ``to_json()`` gives the documented fields; ``evidence`` holds the lines used."""

    nccl_version: str | None = None
    ranks: int | None = None
    nodes: int | None = None
    intra_node: str | None = None
    inter_node: str | None = None
    network: str | None = None
    gdr: bool | None = None
    fallback: bool = False
    severity: str = "ok"
    messages: list[str] = field(default_factory=list)
    evidence: list[str] = field(default_factory=list)
    provider: str | None = None
    ofi_version: str | None = None
    local_ranks: int | None = None
    rank: int | None = None

    def to_json(self, evidence: bool = False) -> dict[str, object]:
        keys = [
            "nccl_version",
            "ranks",
            "nodes",
            "intra_node",
            "inter_node",
            "network",
            "gdr",
            "fallback",
            "severity",
            "messages",
        ]
        d = asdict(self)
        out = {k: d[k] for k in keys}
        if evidence:
            out["evidence"] = d["evidence"]
        return out

    def verdict(self) -> str:
        """One line for a person."""
        parts = []
        if self.intra_node:
            parts.append(f"intra-node {self.intra_node.upper()}")
        if self.inter_node:
            parts.append(f"inter-node {self.inter_node.upper()}" + (" +GDR" if self.gdr else ""))
        if not parts:
            parts.append("no transport seen yet" if self.ranks is None else "single rank")
        where = f"{self.ranks} ranks" if self.ranks else "ranks ?"
        if self.nodes:
            where += f" on {self.nodes} node{'s' if self.nodes > 1 else ''}"
        head = f"{self.severity.upper()}: {', '.join(parts)} ({where}; NCCL {self.nccl_version or '?'})"
        if self.fallback:
            head += " -- FALLBACK"
        return head + (f" -- {self.messages[0]}" if self.messages and self.severity != "ok" else "")
