"""Incremental aggregation of a run's records for the live view: each redraw costs O(new records), not O(all).

Records of one rank arrive in step order (one Reporter per worker process keeps them in order), so per-rank series
only ever append. Cross-rank views (mean metric, total throughput) are kept as per-step sums.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from .series import _COUNT_KEYS, _NOT_PLOTTED, _RATE_KEYS, Series, _num

__all__ = ["Aggregate", "aggregate_of"]


class Aggregate:
    def __init__(self) -> None:
        self.seen = 0
        self.key: str | None = None
        self.unit = ""
        self.metric: dict[int, list[tuple[float, float]]] = defaultdict(list)
        self.metric_sum: dict[float, list[float]] = {}
        self.tput: dict[int, list[tuple[float, float]]] = defaultdict(list)
        self.tput_sum: dict[float, list[float]] = {}
        self._prev_t: dict[int, float] = {}
        self._pending: list[dict[str, Any]] = []  # records seen before the plotted key is known

    def _pick_key(self, rec: dict[str, Any]) -> str | None:
        if "loss" in rec:
            return "loss"
        for k, v in rec.items():
            if k not in _NOT_PLOTTED and _num(v) is not None:
                return k
        return None

    def update(self, records: list[dict[str, Any]]) -> Aggregate:
        new = records[self.seen :]
        self.seen = len(records)
        for r in new:
            rank = int(r.get("rank", 0))
            step = float(r.get("step", 0))
            t = _num(r.get("time"))
            if self.key is None:
                self.key = self._pick_key(r)
                if self.key is None:
                    self._pending.append(r)
                else:
                    for p in self._pending:
                        self._add_metric(p)
                    self._pending.clear()
            if self.key is not None:
                self._add_metric(r)
            rate = None
            for k, u in _RATE_KEYS:
                if (v := _num(r.get(k))) is not None:
                    rate, self.unit = v, self.unit or u
                    break
            else:
                for k, u in _COUNT_KEYS:
                    if (v := _num(r.get(k))) is not None:
                        prev = self._prev_t.get(rank)
                        if prev is not None and t is not None and t > prev:
                            rate, self.unit = v / (t - prev), self.unit or u
                        break
            if t is not None:
                self._prev_t[rank] = t
            if rate is not None:
                self.tput[rank].append((step, rate))
                acc = self.tput_sum.setdefault(step, [0.0, 0])
                acc[0] += rate
                acc[1] += 1
        return self

    def _add_metric(self, r: dict[str, Any]) -> None:
        v = _num(r.get(self.key)) if self.key else None
        if v is None:
            return
        step = float(r.get("step", 0))
        self.metric[int(r.get("rank", 0))].append((step, v))
        acc = self.metric_sum.setdefault(step, [0.0, 0])
        acc[0] += v
        acc[1] += 1

    # --- views ---------------------------------------------------------------------------------------------------
    def metric_series(self) -> Series:
        return {f"rank {k}": v for k, v in sorted(self.metric.items())}

    def metric_mean(self) -> list[tuple[float, float]]:
        return [(x, s / n) for x, (s, n) in sorted(self.metric_sum.items())]

    def tput_series(self) -> Series:
        return {f"rank {k}": v for k, v in sorted(self.tput.items())}

    def tput_total(self) -> list[tuple[float, float]]:
        """Cluster throughput per step, only for steps every reporting rank has reached."""
        ranks = len(self.tput)
        return [(x, s) for x, (s, n) in sorted(self.tput_sum.items()) if n == ranks]


def aggregate_of(run: Any) -> Aggregate:
    """The run's aggregate, brought up to date (kept on the run object between redraws)."""
    agg = getattr(run, "_raynb_aggregate", None)
    records = run.records
    if agg is None or agg.seen > len(records):
        agg = Aggregate()
        try:
            run._raynb_aggregate = agg
        except AttributeError:
            pass
    return agg.update(records)
