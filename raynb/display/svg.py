"""In the kernel: a small, dependency-free SVG line chart: renders in JupyterLab, VS Code, SageMaker Studio and nbviewer
alike, and weighs a few kilobytes however long the run was."""

from __future__ import annotations

import html
import math
from collections.abc import Sequence

from .._shared.series import Series, downsample

__all__ = ["line_chart", "PALETTE"]

PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")


def _nice_ticks(lo: float, hi: float, n: int = 4) -> list[float]:
    if hi <= lo:
        return [lo]
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    start = math.ceil(lo / step) * step
    ticks, t = [], start
    while t <= hi + step * 1e-9:
        ticks.append(round(t, 12))
        t += step
    return ticks


def _fmt(v: float) -> str:
    a = abs(v)
    if a >= 1e6:
        return f"{v / 1e6:.3g}M"
    if a >= 1e4:
        return f"{v / 1e3:.3g}k"
    if a >= 100 or v == int(v):
        return f"{v:.0f}"
    return f"{v:.3g}"


def line_chart(
    series: Series,
    *,
    title: str,
    width: int = 400,
    height: int = 200,
    unit: str = "",
    chart_id: str = "",
    max_points: int = 300,
    empty_text: str = "waiting for the first report",
    marks: Sequence[tuple[float, str]] = (),
) -> str:
    """An SVG chart of ``{label: [(x, y), ...]}``; ``data-points`` counts the points it was given (for tests).
    ``marks``: labelled vertical lines at x positions (a restart after a worker failed)."""
    npoints = sum(len(v) for v in series.values())
    left, right, top, bottom = 52, 12, 24, 28
    pw, ph = width - left - right, height - top - bottom
    head = (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" class="raynb-chart" data-chart="{html.escape(chart_id)}" '
        f'data-points="{npoints}" font-family="sans-serif" font-size="11">'
        f'<rect x="0" y="0" width="{width}" height="{height}" fill="white"/>'
        f'<text x="{left}" y="15" font-size="12" font-weight="bold" fill="#333">{html.escape(title)}'
        f'{" (" + html.escape(unit) + ")" if unit else ""}</text>'
    )
    if npoints == 0:
        return (
            head + f'<text x="{left + pw / 2}" y="{top + ph / 2}" text-anchor="middle" fill="#999">'
            f'{html.escape(empty_text)}</text></svg>'
        )
    pts_all = [p for v in series.values() for p in v]
    x0, x1 = min(p[0] for p in pts_all), max(p[0] for p in pts_all)
    y0, y1 = min(p[1] for p in pts_all), max(p[1] for p in pts_all)
    if x1 == x0:
        x1 = x0 + 1
    if y1 == y0:
        y0, y1 = y0 - (abs(y0) * 0.1 or 1), y1 + (abs(y1) * 0.1 or 1)
    pad = (y1 - y0) * 0.05
    y0, y1 = y0 - pad, y1 + pad

    def sx(x: float) -> float:
        return left + (x - x0) / (x1 - x0) * pw

    def sy(y: float) -> float:
        return top + ph - (y - y0) / (y1 - y0) * ph

    parts = [head]
    for t in _nice_ticks(y0, y1):
        y = sy(t)
        parts.append(
            f'<line x1="{left}" y1="{y:.1f}" x2="{left + pw}" y2="{y:.1f}" stroke="#eee"/>'
            f'<text x="{left - 4}" y="{y + 3.5:.1f}" text-anchor="end" fill="#666">{_fmt(t)}</text>'
        )
    for t in _nice_ticks(x0, x1):
        x = sx(t)
        parts.append(f'<text x="{x:.1f}" y="{top + ph + 16}" text-anchor="middle" fill="#666">{_fmt(t)}</text>')
    parts.append(
        f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#ccc"/>'
        f'<text x="{left + pw}" y="{height - 2}" text-anchor="end" fill="#999">step</text>'
    )
    for x, text in marks:
        if x0 <= x <= x1:
            parts.append(
                f'<line class="raynb-mark" x1="{sx(x):.1f}" y1="{top}" x2="{sx(x):.1f}" y2="{top + ph}" '
                f'stroke="#dc3545" stroke-dasharray="4 3"/><text x="{sx(x) + 3:.1f}" y="{top + 10}" fill="#dc3545" '
                f'font-size="10">{html.escape(text)}</text>'
            )
    for i, (label, pts) in enumerate(series.items()):
        color = PALETTE[i % len(PALETTE)]
        d = downsample(pts, max_points)
        coords = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in d)
        if len(d) == 1:
            x, y = d[0]
            parts.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="2.5" fill="{color}"/>')
        else:
            parts.append(
                f'<polyline fill="none" stroke="{color}" stroke-width="1.6" points="{coords}" '
                f'data-series="{html.escape(label)}"/>'
            )
        if len(series) > 1 and i < 10:
            lx = left + 8 + (i % 5) * 70
            ly = top + 12 + (i // 5) * 13
            parts.append(
                f'<rect x="{lx}" y="{ly - 7}" width="10" height="3" fill="{color}"/>'
                f'<text x="{lx + 13}" y="{ly - 3}" fill="#444">{html.escape(label)}</text>'
            )
    parts.append("</svg>")
    return "".join(parts)
