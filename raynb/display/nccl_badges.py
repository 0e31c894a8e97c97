"""In the kernel: NCCL transport badges: one per node (and per link kind where they differ), green / amber / red, each
expanding to the verdict's sentences and the log lines it rests on. A socket fallback gets a red banner."""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .viewed_run import ViewedRun

__all__ = ["badges_html", "badge_label"]

_COLORS = {"ok": ("#198754", "#e8f5ee"), "warn": ("#b86e00", "#fff4e0"), "error": ("#dc3545", "#fdecee")}


def badge_label(s: dict[str, Any]) -> str:
    parts = []
    if s.get("intra_node"):
        parts.append(f"intra-node {s['intra_node'].upper()}")
    if s.get("inter_node"):
        parts.append(f"inter-node {s['inter_node'].upper()}" + (" +GDR" if s.get("gdr") else ""))
    if not parts:
        parts.append(f"network {s['network']}" if s.get("network") else "waiting for the first collective")
    return " · ".join(parts)


def badges_html(run: ViewedRun) -> str:
    per_rank = getattr(run, "nccl", None)
    if not per_rank:
        return ""
    by_node: dict[str, list[tuple[int, dict[str, Any]]]] = {}
    for rank, s in sorted(per_rank.items()):
        by_node.setdefault(s.get("node") or "?", []).append((rank, s))
    badges, banner = [], ""
    for node, items in by_node.items():
        variants: dict[tuple[str, str], tuple[list[int], dict[str, Any]]] = {}
        for rank, s in items:
            key = (badge_label(s), s.get("severity", "ok"))
            variants.setdefault(key, ([], s))[0].append(rank)
        for (label, sev), (ranks, s) in variants.items():
            fg, bg = _COLORS.get(sev, _COLORS["warn"])
            who = f"ranks {ranks[0]}-{ranks[-1]}" if len(ranks) > 1 else f"rank {ranks[0]}"
            msgs = "".join(f"<li>{html.escape(m)}</li>" for m in s.get("messages", []))
            ev = html.escape("\n".join(s.get("evidence", [])[:12]))
            badges.append(
                f'<details class="raynb-nccl" data-severity="{sev}" data-intra="{s.get("intra_node") or ""}" '
                f'data-inter="{s.get("inter_node") or ""}" style="display:inline-block;vertical-align:top;'
                f'margin:2px 6px 2px 0"><summary style="cursor:pointer;list-style:none;border:1px solid {fg};'
                f'background:{bg};color:{fg};border-radius:10px;padding:1px 8px">NCCL {html.escape(label)} '
                f'<span style="color:#666">({html.escape(node)}, {who})</span></summary>'
                f'<ul style="margin:4px 0;font-size:12px">{msgs}</ul><pre style="font-size:11px;max-width:850px;'
                f'white-space:pre-wrap;background:#f7f7f7;padding:4px">{ev}</pre></details>'
            )
            if s.get("fallback") and sev == "error" and not banner:
                first = (s.get("messages") or ["NCCL fell back to a slower network."])[0]
                banner = (
                    f'<div class="raynb-nccl-banner" style="background:#dc3545;color:white;padding:4px 8px;'
                    f'border-radius:4px;margin:4px 0">NCCL fell back: {html.escape(first)}</div>'
                )
    return f'<div class="raynb-nccl-badges" style="margin-top:4px">{banner}{"".join(badges)}</div>'
