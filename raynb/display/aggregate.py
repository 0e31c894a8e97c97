"""Incremental aggregation of a run's records for the live view: each redraw costs O(new records), not O(all).

Records of one rank arrive in step order (one Reporter per worker process keeps them in order), so per-rank series
only ever append. Cross-rank views (mean metric, total throughput) are kept as per-step sums.
"""

from __future__ import annotations

import weakref
from collections import defaultdict
from typing import TYPE_CHECKING, Any

from .series import _COUNT_KEYS, Series, _num, pick_key, rate_of

if TYPE_CHECKING:
    from .viewed_run import ViewedRun

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
        #: per step: the counts every rank reported (samples/tokens) and the latest time one of them arrived
        self._counts: dict[float, list[float]] = {}
        self._pending: list[dict[str, Any]] = []  # records seen before the plotted key is known

    def update(self, records: list[dict[str, Any]]) -> Aggregate:
        new = records[self.seen :]
        self.seen = len(records)
        for r in new:
            rank = int(r.get("rank", 0))
            step = float(r.get("step", 0))
            t = _num(r.get("time"))
            if self.key is None:
                self.key = pick_key(r)
                if self.key is None:
                    self._pending.append(r)
                else:
                    for p in self._pending:
                        self._add_metric(p)
                    self._pending.clear()
            if self.key is not None:
                self._add_metric(r)
            count = next((v for k, _u in _COUNT_KEYS if (v := _num(r.get(k))) is not None), None)
            if count is not None and t is not None:
                acc_c = self._counts.setdefault(step, [0.0, 0.0, 0])
                acc_c[0] += count
                acc_c[1] = max(acc_c[1], t)
                acc_c[2] += 1
            got = rate_of(r, self._prev_t.get(rank))
            if t is not None:
                self._prev_t[rank] = t
            if got is not None:
                rate, self.unit = got[0], self.unit or got[1]
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

    @property
    def has_counts(self) -> bool:
        return bool(self._counts)

    def counted_rate(self, *, window_s: float = 10.0, min_span_s: float = 2.0) -> float | None:
        """Cluster throughput from reported counts: what all ranks counted over the last ``window_s`` seconds of
        complete steps, divided by that time. Needs ``min_span_s`` of reports: a burst of back-to-back reports has no
        time base, so None (shown as "–"), not a made-up rate."""
        ranks = len(self.tput) or 1
        steps = sorted((c[1], c[0]) for c in self._counts.values() if c[2] >= ranks)  # (time, count) per step
        if len(steps) < 2:
            return None
        t_end = steps[-1][0]
        first = next(i for i, (t, _c) in enumerate(steps) if t >= t_end - window_s or i == len(steps) - 2)
        span = t_end - steps[first][0]
        if span < min_span_s:
            return None
        return sum(c for _t, c in steps[first + 1 :]) / span

    def tput_total(self) -> list[tuple[float, float]]:
        """Cluster throughput per step, only for steps every reporting rank has reached."""
        ranks = len(self.tput)
        return [(x, s) for x, (s, n) in sorted(self.tput_sum.items()) if n == ranks]


#: One aggregate per run object, dropped with the run (the display keeps a cache, never the run).
_CACHE: weakref.WeakKeyDictionary[Any, Aggregate] = weakref.WeakKeyDictionary()


def aggregate_of(run: ViewedRun) -> Aggregate:
    """The run's aggregate, brought up to date (cached between redraws while the run object lives)."""
    records = run.records
    try:
        agg = _CACHE.get(run)
    except TypeError:  # not weak-referenceable: aggregate from scratch
        return Aggregate().update(records)
    if agg is None or agg.seen > len(records):
        agg = _CACHE[run] = Aggregate()
    return agg.update(records)
