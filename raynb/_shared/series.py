"""In any process: pure derivations from metric records: loss per rank and throughput. No I/O, no Ray."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = [
    "metric_series",
    "throughput_series",
    "differ",
    "downsample",
    "latest_throughput",
    "median",
    "rate_of",
    "steady_rate",
    "pick_key",
    "primary_metric",
    "Series",
]

Series = dict[str, list[tuple[float, float]]]

_RATE_KEYS = (("tokens_per_s", "tokens/s"), ("samples_per_s", "samples/s"), ("throughput", "items/s"))
_COUNT_KEYS = (("tokens", "tokens/s"), ("samples", "samples/s"))
#: Reported keys that are bookkeeping or counts, never the curve to plot.
_NOT_PLOTTED = {
    "rank", "step", "time", "samples", "tokens", "samples_per_s", "tokens_per_s", "throughput", "epoch", "flops_per_token",
    "total",
}  # fmt: skip


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    f = float(v)
    return f if math.isfinite(f) else None


def pick_key(record: dict[str, Any]) -> str | None:
    """The metric to plot from one record: ``loss`` if reported, else its first numeric key that is not a count or
    a rate."""
    if "loss" in record:
        return "loss"
    for k, v in record.items():
        if k not in _NOT_PLOTTED and _num(v) is not None:
            return k
    return None


def primary_metric(records: Sequence[dict[str, Any]]) -> str | None:
    """The metric a run's chart shows: ``loss`` if any of the first records has it, else :func:`pick_key`'s."""
    head = records[:50]
    if any("loss" in r for r in head):
        return "loss"
    return next((k for r in head if (k := pick_key(r)) is not None), None)


def rate_of(record: dict[str, Any], prev_time: float | None) -> tuple[float, str] | None:
    """(throughput, unit) of one rank's record: a reported rate, else a count over the time since that rank's previous
    record; None when neither can be read."""
    for k, u in _RATE_KEYS:
        if (v := _num(record.get(k))) is not None:
            return v, u
    t = _num(record.get("time"))
    for k, u in _COUNT_KEYS:
        if (v := _num(record.get(k))) is not None:
            if prev_time is not None and t is not None and t > prev_time:
                return v / (t - prev_time), u
            return None
    return None


def median(values: Iterable[float]) -> float | None:
    """The upper median (one value of the data, robust to one slow step); None for no values."""
    ys = sorted(values)
    return ys[len(ys) // 2] if ys else None


def metric_series(records: Iterable[dict[str, Any]], key: str = "loss") -> Series:
    """``{"rank 0": [(step, value), ...], ...}`` for records carrying a numeric ``key``."""
    out: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for r in records:
        v = _num(r.get(key))
        if v is not None:
            out[int(r.get("rank", 0))].append((float(r.get("step", 0)), v))
    return {f"rank {k}": sorted(v) for k, v in sorted(out.items())}


def throughput_series(records: Sequence[dict[str, Any]]) -> tuple[str, Series]:
    """Throughput per rank by step, and its unit. Uses a rate key when reported, else counts over time deltas."""
    unit = ""
    per_rank: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        per_rank[int(r.get("rank", 0))].append(r)
    out: Series = {}
    for rank, recs in sorted(per_rank.items()):
        recs = sorted(recs, key=lambda r: (r.get("step", 0), r.get("time", 0)))
        pts: list[tuple[float, float]] = []
        prev_t: float | None = None
        for r in recs:
            got = rate_of(r, prev_t)
            if (t := _num(r.get("time"))) is not None:
                prev_t = t
            if got is not None:
                unit = unit or got[1]
                pts.append((float(r.get("step", 0)), got[0]))
        if pts:
            out[f"rank {rank}"] = pts
    return unit, out


def total(series: Series) -> list[tuple[float, float]]:
    """Sum across ranks at each step (the cluster's throughput)."""
    acc: dict[float, float] = defaultdict(float)
    seen: dict[float, int] = defaultdict(int)
    for pts in series.values():
        for x, y in pts:
            acc[x] += y
            seen[x] += 1
    ranks = len(series)
    # a step that not every rank has reported yet would read low: leave it out until it is complete
    return sorted((x, y) for x, y in acc.items() if seen[x] == ranks)


def differ(series: Series, tolerance: float = 0.05) -> bool:
    """True when ranks report noticeably different values (then each rank gets its own line)."""
    if len(series) < 2:
        return False
    by_step: dict[float, list[float]] = defaultdict(list)
    for pts in series.values():
        for x, y in pts[-50:]:
            by_step[x].append(y)
    for ys in by_step.values():
        if len(ys) > 1:
            lo, hi = min(ys), max(ys)
            scale = max(abs(lo), abs(hi), 1e-12)
            if (hi - lo) / scale > tolerance:
                return True
    return False


def mean_series(series: Series) -> list[tuple[float, float]]:
    acc: dict[float, list[float]] = defaultdict(list)
    for pts in series.values():
        for x, y in pts:
            acc[x].append(y)
    return [(x, sum(ys) / len(ys)) for x, ys in sorted(acc.items())]


def downsample(points: list[tuple[float, float]], max_points: int = 300) -> list[tuple[float, float]]:
    """At most ``max_points``: bucket means, keeping the first and the last point exactly."""
    n = len(points)
    if n <= max_points:
        return points
    size = n / (max_points - 2)
    out = [points[0]]
    for b in range(max_points - 2):
        chunk = points[1 + int(b * size) : 1 + int((b + 1) * size)]
        if chunk:
            out.append((sum(p[0] for p in chunk) / len(chunk), sum(p[1] for p in chunk) / len(chunk)))
    out.append(points[-1])
    return out


def latest_throughput(series: Series, window: int = 10) -> float | None:
    """Median of the last ``window`` cluster-total points (robust to one slow step)."""
    return median(y for _, y in total(series)[-window:])


def smoothing_window(n: int) -> int:
    """Points averaged for a displayed throughput curve of ``n`` points: one in ten, between 1 and 50."""
    return max(1, min(50, n // 10))


def smooth(points: list[tuple[float, float]], window: int | None = None) -> list[tuple[float, float]]:
    """Trailing rolling mean over ``window`` points (default :func:`smoothing_window`)."""
    n = len(points)
    w = window or smoothing_window(n)
    if w <= 1:
        return points
    out, acc = [], 0.0
    for i, (x, y) in enumerate(points):
        acc += y
        if i >= w:
            acc -= points[i - w][1]
        out.append((x, acc / min(i + 1, w)))
    return out


def steady_rate(records: Sequence[dict[str, Any]], key: str, skip_steps: int | None = None) -> float:
    """The sum over ranks of a reported count (``tokens``, ``samples``) per second of wall time after the first
    ``skip_steps`` steps (default: a tenth of the run): the steady state, without compile, warm-up and start-up."""
    recs = [r for r in records if key in r and "time" in r]
    if not recs:
        return 0.0
    last = max(int(r.get("step", 0)) for r in recs)
    skip = max(1, last // 10) if skip_steps is None else skip_steps
    base = [r for r in recs if int(r.get("step", 0)) <= skip]
    after = [r for r in recs if int(r.get("step", 0)) > skip]
    if not base or not after:
        return 0.0
    t0, t1 = max(r["time"] for r in base), max(r["time"] for r in after)
    return float(sum(r[key] for r in after) / (t1 - t0)) if t1 > t0 else 0.0
