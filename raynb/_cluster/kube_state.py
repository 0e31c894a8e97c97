"""In the kernel: pure Kubernetes state: RayCluster spec differences, readiness from conditions, pod and node rows for
status.

Functions of API dicts (as ``kubectl get -o json`` shows them), tested without a cluster; the calls that fetch those
dicts are in ``_cluster/kube_api.py``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

__all__ = [
    "RayClusterRef",
    "spec_differences",
    "readiness",
    "PodRow",
    "NodeRow",
    "KubeStatus",
    "pod_row",
    "node_row",
    "conditions",
]


@dataclass(frozen=True)
class RayClusterRef:
    name: str
    namespace: str


def spec_differences(wanted: Any, live: Any, path: str = "spec") -> list[str]:
    """Where ``live`` differs from ``wanted`` (fields only the server added are not differences)."""
    if isinstance(wanted, Mapping):
        if not isinstance(live, Mapping):
            return [f"{path}: {live!r} → {dict(wanted)!r}"]
        out: list[str] = []
        for k, v in wanted.items():
            out += spec_differences(v, live.get(k), f"{path}.{k}")
        return out
    if isinstance(wanted, list):
        if not isinstance(live, list) or len(live) != len(wanted):
            return [f"{path}: {_short(live)} → {_short(wanted)}"]
        out = []
        for i, (w, lv) in enumerate(zip(wanted, live, strict=False)):
            out += spec_differences(w, lv, f"{path}[{i}]")
        return out
    if str(wanted) != str(live):
        return [f"{path}: {live!r} → {wanted!r}"]
    return []


def _short(v: Any) -> str:
    s = repr(v)
    return s if len(s) < 80 else s[:77] + "..."


def conditions(rc: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {c.get("type", ""): c for c in (rc.get("status") or {}).get("conditions") or []}


def _desired_workers(rc: Mapping[str, Any]) -> int:
    st = rc.get("status") or {}
    if st.get("desiredWorkerReplicas") is not None:
        return int(st["desiredWorkerReplicas"])
    return sum(int(g.get("replicas", 0)) for g in rc.get("spec", {}).get("workerGroupSpecs", []))


def readiness(rc: Mapping[str, Any]) -> tuple[bool, str]:
    """(ready, one-line state) from ``status.conditions`` (KubeRay >= 1.3), else the deprecated ``status.state``."""
    conds = conditions(rc)
    st = rc.get("status") or {}
    ready_w, want_w = int(st.get("readyWorkerReplicas") or 0), _desired_workers(rc)
    if conds:
        head = conds.get("HeadPodReady", {}).get("status") == "True"
        prov = conds.get("RayClusterProvisioned", {}).get("status") == "True"
        line = f"head {'ready' if head else 'not ready'} · workers {ready_w}/{want_w} ready"
        return head and prov and ready_w >= want_w, line
    state = st.get("state") or "pending"
    return state == "ready" and ready_w >= want_w, f"state {state} · workers {ready_w}/{want_w} ready"


@dataclass(frozen=True)
class PodRow:
    name: str
    role: str
    phase: str
    ready: bool
    node: str
    gpus: str
    efa: str


@dataclass(frozen=True)
class NodeRow:
    name: str
    instance_type: str
    zone: str
    gpus: str  # allocatable nvidia.com/gpu
    efa: str  # allocatable vpc.amazonaws.com/efa
    ready: bool


@dataclass
class KubeStatus:
    ref: RayClusterRef
    state: str
    image: str
    pods: list[PodRow] = field(default_factory=list)
    nodes: list[NodeRow] = field(default_factory=list)
    #: when the RayCluster was created (epoch seconds): its GPU nodes bill from about then
    created_at: float | None = None


def kube_time(raw: Any) -> datetime | None:
    """A Kubernetes timestamp (RFC 3339 text, ``2026-12-03T16:48:52Z``, or the client's datetime) in UTC."""
    if isinstance(raw, datetime):
        return raw if raw.tzinfo else raw.replace(tzinfo=timezone.utc)
    try:
        return datetime.fromisoformat(str(raw).replace("Z", "+00:00")) if raw else None
    except ValueError:
        return None


def pod_row(p: Mapping[str, Any]) -> PodRow:
    req: dict[str, str] = {}
    for c in p.get("spec", {}).get("containers", []):
        req.update((c.get("resources") or {}).get("requests") or {})
    st = p.get("status") or {}
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in st.get("conditions") or [])
    phase = st.get("phase", "?")
    for cs in st.get("containerStatuses") or []:
        waiting = (cs.get("state") or {}).get("waiting")
        if waiting:
            phase = waiting.get("reason", phase)
    return PodRow(
        p["metadata"]["name"],
        p["metadata"].get("labels", {}).get("ray.io/node-type", "?"),
        phase,
        ready,
        p.get("spec", {}).get("nodeName") or "-",
        req.get("nvidia.com/gpu", "0"),
        req.get("vpc.amazonaws.com/efa", "0"),
    )


def node_row(n: Mapping[str, Any]) -> NodeRow:
    labels = n["metadata"].get("labels", {})
    alloc = (n.get("status") or {}).get("allocatable") or {}
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in (n.get("status") or {}).get("conditions") or []
    )
    return NodeRow(
        n["metadata"]["name"],
        labels.get("node.kubernetes.io/instance-type", "?"),
        labels.get("topology.kubernetes.io/zone", "?"),
        alloc.get("nvidia.com/gpu", "0"),
        alloc.get("vpc.amazonaws.com/efa", "0"),
        ready,
    )
