"""In the kernel: how a cluster's status shows itself: a text block and an HTML summary with node (and pod) tables."""

from __future__ import annotations

import html
import time

from .._shared.cost import usd
from .run_view import clock
from .tables import table
from .viewed_status import ViewedStatus

__all__ = ["status_text", "status_html", "cost_text"]


def cost_text(st: ViewedStatus, now: float | None = None) -> str | None:
    """``2 × g6.12xlarge ≈ $9.20/h (...) · up 1:12:00 ≈ $11.04 so far``; None where nothing is billed."""
    if st.cost is None:
        return None
    created = st.kube.created_at if st.kube is not None else None
    if created is None:
        return f"cost {st.cost.text()}"
    up = max((time.time() if now is None else now) - created, 0.0)
    if st.cost.min_nodes is not None:  # autoscaled: what runs now is known, not how long each node ran
        placed = sum(1 for p in st.kube.pods if p.role == "worker" and p.node != "-") if st.kube else 0
        return (
            f"cost {st.cost.text()} · {placed} on nodes now ≈ {usd(placed * st.cost.usd_per_node_hour)}/h · "
            f"up {clock(up)}, at most {usd(st.cost.usd_for(up))} so far"
        )
    return f"cost {st.cost.text()} · up {clock(up)} ≈ {usd(st.cost.usd_for(up))} so far"


def status_text(st: ViewedStatus) -> str:
    alive = sum(n.alive for n in st.nodes)
    lines = [
        f"{st.name} ({st.kind}) at {st.address}",
        f"  nodes {alive} alive · CPUs {st.available.get('CPU', 0):g}/{st.cpus:g} free · "
        f"GPUs {st.available.get('GPU', 0):g}/{st.gpus:g} free",
    ]
    if st.reached:
        lines.append(f"  {st.reached}")
    if st.warm:
        lines.append(f"  {st.warm}")
    for n in st.nodes:
        role = "head" if n.is_head else "worker"
        lines.append(
            f"  - {role} {n.address} {'alive' if n.alive else 'DEAD'}: {n.cpus:g} CPU, {n.gpus:g} GPU, "
            f"{n.memory_gb:.1f} GB"
        )
    if st.kube is not None:
        k = st.kube
        lines.append(f"  RayCluster {k.ref.namespace}/{k.ref.name}: {k.state} · image {k.image}")
        for p in k.pods:
            lines.append(
                f"  - pod {p.name} ({p.role}) {p.phase}{' ready' if p.ready else ''} on {p.node}: "
                f"{p.gpus} GPU, {p.efa} EFA"
            )
        for kn in k.nodes:
            lines.append(
                f"  - node {kn.name} {kn.instance_type} {kn.zone}{'' if kn.ready else ' NOT READY'}: "
                f"allocatable {kn.gpus} GPU, {kn.efa} EFA"
            )
    if (cost := cost_text(st)) is not None:
        lines.append(f"  {cost} (`%raycluster down` stops it)")
    if st.dashboard_url:
        lines.append(f"  dashboard {st.dashboard_url}")
    return "\n".join(lines)


def status_html(st: ViewedStatus) -> str:
    dash = f' · <a href="{html.escape(st.dashboard_url)}" target="_blank">Ray dashboard</a>' if st.dashboard_url else ""
    kube = ""
    if st.kube is not None:
        k = st.kube
        pods = table(
            ["pod", "role", "phase", "node", "GPU", "EFA"],
            [(p.name, p.role, p.phase + (" ✓" if p.ready else ""), p.node, p.gpus, p.efa) for p in k.pods],
            cls="raynb-pods",
        )
        nodes = (
            table(
                ["node", "instance", "zone", "GPU", "EFA", "state"],
                [
                    (n.name, n.instance_type, n.zone, n.gpus, n.efa, "ready" if n.ready else "NOT READY")
                    for n in k.nodes
                ],
                cls="raynb-nodes",
            )
            if k.nodes
            else ""
        )
        kube = (
            f'<div style="margin-top:4px">RayCluster <b>{html.escape(k.ref.namespace)}/'
            f"{html.escape(k.ref.name)}</b>: {html.escape(k.state)} · <code>{html.escape(k.image)}</code></div>"
            f"{pods}{nodes}"
        )
    if st.nodes:
        dead = ('<b style="color:#dc3545">dead</b>', True)
        nodes_t = table(
            ["node", "address", "state", "CPU", "GPU", "memory GB"],
            [
                (
                    "head" if n.is_head else "worker",
                    n.address,
                    "alive" if n.alive else dead,
                    f"{n.cpus:g}",
                    f"{n.gpus:g}",
                    f"{n.memory_gb:.1f}",
                )
                for n in st.nodes
            ],
            style="font-size:12px;margin-top:4px",
        )
        ray_part = (
            f'<br>CPUs <b>{st.available.get("CPU", 0):g}</b>/{st.cpus:g} free · GPUs '
            f'<b>{st.available.get("GPU", 0):g}</b>/{st.gpus:g} free'
            + (f'<br><span class="raynb-reached">{html.escape(st.reached)}</span>' if st.reached else "")
            + (f"<br>{html.escape(st.warm)}" if st.warm else "")
            + nodes_t
        )
    else:
        ray_part = "<br><i>Ray: not connected</i>"
    cost = cost_text(st)
    if cost is not None:
        ray_part += f'<div class="raynb-cost" style="margin-top:4px">{html.escape(cost)}</div>'
    return (
        f'<div class="raynb-cluster" data-kind="{st.kind}" style="font-family:sans-serif;font-size:13px">'
        f'<b>{html.escape(st.name)}</b> <span style="color:#555">({st.kind}, {html.escape(st.address)})</span>'
        f"{dash}{ray_part}{kube}</div>"
    )
