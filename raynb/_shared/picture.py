"""In any process: the picture of a run, aggregated as records arrive: each record costs O(1) and the whole stays
bounded.

One :class:`Aggregate` lives in the run's metrics sink on the cluster (``_remote/sink.py``) and is what a notebook
fetches to draw: a day-long run of many ranks is a few thousand points, not millions of records. Records of one rank
arrive in step order (one Reporter per worker process keeps them in order), so per-rank series only append.
Cross-rank views (mean metric, total throughput) are per-step sums, kept open for the last ``OPEN_STEPS`` steps (a
slow rank may lag that far) and then folded into a decimated series. Per-rank lines are kept only for runs of up to
``RANK_LINES`` ranks -- beyond that the picture shows cross-rank views only.
"""

from __future__ import annotations

import copy
import io
import math
import pickle
from collections.abc import Callable
from typing import Any

from .flat_series import CountsTail, Decimated, Points, StepCounts, Tail
from .series import _COUNT_KEYS, Series, _num, pick_key, rate_of

__all__ = ["Aggregate", "Decimated", "dumps", "loads", "log_line"]

RANK_LINES = 8
OPEN_STEPS = 64
#: steps whose counts are kept for the current throughput (it looks at the last 10 s of them)
COUNT_STEPS = 1024


class _PerStep:
    """Per-step sums across ranks: open for the newest ``OPEN_STEPS`` steps, then folded into a decimated series
    (steps every rank reached only, when ``complete_only``). A report for a step already folded is dropped."""

    __slots__ = ("complete_only", "done", "folded_upto", "open")

    def __init__(self, complete_only: bool) -> None:
        self.open: dict[float, list[float]] = {}
        self.done = Decimated()
        self.folded_upto = float("-inf")
        self.complete_only = complete_only

    def add(self, step: float, value: float, ranks: int) -> None:
        if step <= self.folded_upto:
            return
        acc = self.open.setdefault(step, [0.0, 0])
        acc[0] += value
        acc[1] += 1
        if len(self.open) > 2 * OPEN_STEPS:
            keys = sorted(self.open)
            for k in keys[: len(keys) - OPEN_STEPS]:
                self._fold(k, self.open.pop(k), ranks)
                self.folded_upto = k

    def _fold(self, step: float, acc: list[float], ranks: int) -> None:
        if self.complete_only:
            if acc[1] == ranks:
                self.done.append(step, acc[0])
        else:
            self.done.append(step, acc[0] / acc[1])

    def view(self, ranks: int, *, mean: bool) -> Points:
        tail = [
            (x, s / n if mean else s) for x, (s, n) in sorted(self.open.items()) if not self.complete_only or n == ranks
        ]
        return self.done.view() + tail


#: GPU utilisation (NVML, %) under which a rank counts as idle, and the others' median that counts as busy
LOW_UTIL, BUSY_UTIL = 30.0, 60.0
#: the step advances kept for the recent pace (at least this many), and each rank's GPU samples (1 a second)
ADVANCES_KEPT, GPU_SAMPLES_KEPT = 64, 600


class Aggregate:
    def __init__(self) -> None:
        self.seen = 0  # records consumed by update() from a growing list
        self.records = 0
        self.key: str | None = None
        self.unit = ""
        self.metric_ranks: set[int] = set()
        self.tput_ranks: set[int] = set()
        self.metric: dict[int, Decimated] = {}
        self.tput: dict[int, Decimated] = {}
        self._mean = _PerStep(complete_only=False)
        self._total = _PerStep(complete_only=True)
        self._prev_t: dict[int, float] = {}
        #: per rank, the (attempt, warm cell) of its latest record; rates never span two segments (a pause between)
        self._segment: dict[int, tuple[int, int]] = {}
        self._newest = (1, 0)
        #: per step: the counts every rank reported (samples/tokens), the latest time one arrived, how many ranks,
        #: the segment
        self._counts = StepCounts(keep=COUNT_STEPS)
        self._pending: list[dict[str, Any]] = []  # records seen before the plotted key is known (bounded)
        #: (step, attempt) where Ray Train started the workers again after a failure
        self.restarts: list[tuple[float, int]] = []
        self._attempt = 1
        #: per rank, its GPU's latest NVML sample (raynb/_remote/gpu_sampler.py), and since when it has been under LOW_UTIL
        self.gpu: dict[int, dict[str, Any]] = {}
        self._low_since: dict[int, float] = {}
        #: the model's training FLOPs per token, when the run reports it (``flops_per_token=``): MFU from tokens/s
        self.flops_per_token: float | None = None
        # how far the run is (``_shared/progress.py``): the total it reported (``total=``), the first step it reported
        # (0 or 1: how steps count), the newest step of the newest segment and (worker time, step) each time it grew
        self.total: float | None = None
        self.first_step: float | None = None
        self.top_step = -math.inf
        self.advances: list[tuple[float, float]] = []
        #: per rank, (time, step) of its latest report; per rank, its GPU's recent (time, utilisation) samples
        self.last_seen: dict[int, tuple[float, float]] = {}
        self.gpu_recent: dict[int, list[tuple[float, float]]] = {}

    def __setstate__(self, state: dict[str, Any]) -> None:
        """A picture pickled by a sink of an earlier raynb lacks what came later: those start empty (and held its
        counts as a dict)."""
        self.__init__()  # type: ignore[misc]
        self.__dict__.update(state)
        if isinstance(self._counts, dict):
            self._counts = StepCounts.from_dict(self._counts, keep=COUNT_STEPS)

    def update(self, records: list[dict[str, Any]]) -> Aggregate:
        """Consume what is new in a list that only grows."""
        self.add(records[self.seen :])
        self.seen = len(records)
        return self

    def add(self, records: list[dict[str, Any]]) -> Aggregate:
        for r in records:
            if r.get("kind") == "gpu":  # a GPU sample, not a step
                self._add_gpu(r)
                continue
            if r.get("kind") == "progress":  # the framework's own step count and total (_remote/framework_hooks.py)
                if self.first_step is None:
                    self.first_step = 1.0  # it counts steps done
                rank = int(r.get("rank", 0))
                at_step, t = float(r.get("at_step") or 0), _num(r.get("time"))
                self._progress(r, rank, at_step, t, self._segment_of(r, rank))
                continue
            self.records += 1
            rank = int(r.get("rank", 0))
            if (fpt := _num(r.get("flops_per_token"))) is not None:
                self.flops_per_token = fpt
            step = float(r.get("step", 0))
            t = _num(r.get("time"))
            attempt = int(r.get("attempt") or 1)
            if attempt > self._attempt:
                self._attempt = attempt
                self.restarts.append((step, attempt))
            if self.key is None:
                self.key = pick_key(r)
                if self.key is None:
                    self._pending = [*self._pending[-999:], r]
                else:
                    for p in self._pending:
                        self._add_metric(p)
                    self._pending.clear()
            if self.key is not None:
                self._add_metric(r)
            # a restart or a new warm cell starts a segment: the pause before it is not a step
            segment = self._segment_of(r, rank)
            self._progress(r, rank, step, t, segment)
            count = next((v for k, _u in _COUNT_KEYS if (v := _num(r.get(k))) is not None), None)
            if count is not None and t is not None:
                self._counts.add(step, count, t, segment)
            got = rate_of(r, self._prev_t.get(rank))
            if t is not None:
                self._prev_t[rank] = t
            if got is not None:
                rate, self.unit = got[0], self.unit or got[1]
                self._per_rank(self.tput, self.tput_ranks, rank, step, rate)
                self._total.add(step, rate, len(self.tput_ranks))
        return self

    def _segment_of(self, r: dict[str, Any], rank: int) -> tuple[int, int]:
        """The record's (attempt, warm cell); a rank's first record of a newer one starts its segment, and the run's
        steps (and their pace) start again with the newest."""
        segment = (int(r.get("attempt") or 1), int(r.get("cell") or 0))
        if self._segment.get(rank) != segment:
            if segment > self._newest:
                self.top_step, self.advances = -math.inf, []
            self._segment[rank], self._newest = segment, max(self._newest, segment)
            self._prev_t.pop(rank, None)
        return segment

    def _progress(self, r: dict[str, Any], rank: int, step: float, t: float | None, segment: tuple[int, int]) -> None:
        if self.first_step is None:
            self.first_step = step
        if (total := _num(r.get("total"))) is not None:
            self.total = total
        if t is None:
            return
        self.last_seen[rank] = (t, step)
        if segment == self._newest and step > self.top_step:
            self.top_step = step
            self.advances.append((t, step))
            if len(self.advances) > 2 * ADVANCES_KEPT:
                del self.advances[:ADVANCES_KEPT]

    def _add_gpu(self, r: dict[str, Any]) -> None:
        rank, t, util = int(r.get("rank", 0)), _num(r.get("time")) or 0.0, _num(r.get("gpu_util"))
        if util is not None:
            recent = self.gpu_recent.setdefault(rank, [])
            recent.append((t, util))
            if len(recent) > 2 * GPU_SAMPLES_KEPT:
                del recent[:GPU_SAMPLES_KEPT]
        self.gpu[rank] = {
            k: r.get(k) for k in ("gpu_util", "gpu_mem_gb", "gpu_mem_total_gb", "gpu_power_w", "gpu_name", "time")
        }
        if util is not None and util < LOW_UTIL:
            self._low_since.setdefault(rank, t)
        else:
            self._low_since.pop(rank, None)

    def idle_gpus(self, *, for_s: float = 30.0) -> list[tuple[int, float]]:
        """Ranks whose GPU has been under LOW_UTIL % for ``for_s`` seconds while the others' median is busy (input-bound
        ranks, a straggler), with their utilisation now."""
        if len(self.gpu) < 2:
            return []
        now = max((_num(g.get("time")) or 0.0) for g in self.gpu.values())
        low = {r for r, since in self._low_since.items() if now - since >= for_s}
        others = sorted(_num(g.get("gpu_util")) or 0.0 for r, g in self.gpu.items() if r not in low)
        if not low or not others or others[len(others) // 2] < BUSY_UTIL:
            return []
        return [(r, _num(self.gpu[r].get("gpu_util")) or 0.0) for r in sorted(low)]

    def mfu(self, tokens_per_s: float | None) -> tuple[float, str] | None:
        """(MFU, GPU name) from the cluster's tokens/s, the reported FLOPs per token and the GPUs' dense bf16 peak."""
        from .flops import dense_bf16_peak

        names = {str(g.get("gpu_name")) for g in self.gpu.values() if g.get("gpu_name")}
        if not tokens_per_s or not self.flops_per_token or len(names) != 1 or self.unit != "tokens/s":
            return None
        name = names.pop()
        peak = dense_bf16_peak(name)
        if peak is None:
            return None
        return tokens_per_s * self.flops_per_token / (len(self.gpu) * peak), name

    def _per_rank(self, lines: dict[int, Decimated], ranks: set[int], rank: int, step: float, v: float) -> None:
        ranks.add(rank)
        if len(ranks) > RANK_LINES:
            lines.clear()
            return
        lines.setdefault(rank, Decimated()).append(step, v)

    def _add_metric(self, r: dict[str, Any]) -> None:
        v = _num(r.get(self.key)) if self.key else None
        if v is None:
            return
        step = float(r.get("step", 0))
        self._per_rank(self.metric, self.metric_ranks, int(r.get("rank", 0)), step, v)
        self._mean.add(step, v, len(self.metric_ranks))

    # --- views ---------------------------------------------------------------------------------------------------
    @property
    def ranks(self) -> int:
        return max(len(self.tput_ranks), len(self.metric_ranks), 1)

    @property
    def steps_per_point(self) -> int:
        """How many reports one plotted point averages (1 until a long run is decimated)."""
        return max((s.per_point for s in [*self.metric.values(), *self.tput.values(), self._total.done]), default=1)

    def metric_series(self) -> Series:
        return {f"rank {k}": v.view() for k, v in sorted(self.metric.items())}

    def metric_mean(self) -> Points:
        return self._mean.view(len(self.metric_ranks), mean=True)

    def tput_series(self) -> Series:
        return {f"rank {k}": v.view() for k, v in sorted(self.tput.items())}

    @property
    def has_counts(self) -> bool:
        return len(self._counts) > 0

    def counted_rate(self, *, window_s: float = 10.0, min_span_s: float = 2.0, min_steps: int = 2) -> float | None:
        """Cluster throughput from reported counts: what all ranks counted over the last ``window_s`` seconds of
        complete steps of the newest segment (attempt, warm cell), divided by that time. Needs ``min_span_s`` of
        reports and ``min_steps`` complete steps: a burst of back-to-back reports has no time base, so None (shown as
        "–"), not a made-up rate."""
        ranks = len(self.tput_ranks) or 1
        steps = self._counts.complete(ranks, self._newest)
        if len(steps) < max(min_steps, 2):
            return None
        t_end = steps[-1][0]
        first = next(i for i, (t, _c) in enumerate(steps) if t >= t_end - window_s or i == len(steps) - 2)
        span = t_end - steps[first][0]
        if span < min_span_s or span <= 0:
            return None
        return sum(c for _t, c in steps[first + 1 :]) / span

    def tput_total(self) -> Points:
        """Cluster throughput per step, only for steps every reporting rank has reached."""
        return self._total.view(len(self.tput_ranks), mean=False)

    def shape(self) -> dict[int, tuple[int, int]]:
        """What this copy holds of each series, by the series' uid: what :func:`dumps` leaves out for its holder."""
        return {s.uid: s.shape() for s in self._series()}

    def _series(self) -> list[Decimated | StepCounts]:
        return [*self.metric.values(), *self.tput.values(), self._mean.done, self._total.done, self._counts]

    def _with_series(self, change: Callable[[Any], Any]) -> Aggregate:
        """A shallow copy with every series replaced by ``change(series)`` (this picture is left as it is)."""
        out = copy.copy(self)
        out._mean, out._total = copy.copy(self._mean), copy.copy(self._total)
        out._change_series(change)
        return out

    def _change_series(self, change: Callable[[Any], Any]) -> None:
        """Replace every series of this picture by ``change(series)``."""
        self.metric = {k: change(v) for k, v in self.metric.items()}
        self.tput = {k: change(v) for k, v in self.tput.items()}
        self._mean.done, self._total.done = change(self._mean.done), change(self._total.done)
        self._counts = change(self._counts)


#: where the picture's classes lived before the house by process (issue 36): a sink started by an earlier raynb (an embedded
#: head kept across an upgrade, a long-lived KubeRay head) still names them; drop after one release
_FORMER_HOMES = {"raynb.display.aggregate": __name__, "raynb.display.series": "raynb._shared.series"}


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        return super().find_class(_FORMER_HOMES.get(module, module), name)


def dumps(picture: Aggregate, since: dict[Any, Any] | None = None) -> bytes:
    """The picture pickled; where the reader holds a copy (``since``: its :meth:`Aggregate.shape`, also as JSON
    brought it, the Ray Jobs path's agent: keys as strings), each series that only grew since goes as what it added
    (:class:`Tail`; the per-step counts as the steps that changed, :class:`CountsTail`). A picture of two ranks at
    a 2-ranks' run's steady state: 156 KB whole; 8 KB as what 28 steps changed (a poll four times a second at 110
    steps/s), 0.3 ms to pickle where the whole took 1.3 (and 83 KB when the counts still went whole: past 100 KB
    Ray hands a call's answer through the object store, ~1.5 ms more CPU a call on 2 cores); every series a rank
    adds is ~16 KB more whole."""
    if since:
        held = {int(uid): shape for uid, shape in since.items()}
        picture = picture._with_series(lambda s: (s.since(held[s.uid]) if s.uid in held else None) or s)
    return pickle.dumps(picture, protocol=pickle.HIGHEST_PROTOCOL)


def loads(data: bytes, held: Aggregate | None = None) -> Aggregate:
    """A picture as :func:`dumps` pickled it (``held``: the reader's copy its series' tails go onto), by this raynb
    or by one from before the move."""
    picture: Aggregate = _Unpickler(io.BytesIO(data)).load()
    if not any(isinstance(s, (Tail, CountsTail)) for s in picture._series()):
        return picture
    mine = {s.uid: s for s in held._series()} if held is not None else {}

    def onto(s: Any) -> Any:
        copy = mine.get(getattr(s, "uid", -1))
        if isinstance(s, Tail) and isinstance(copy, Decimated):
            return s.onto(copy)
        if isinstance(s, CountsTail) and isinstance(copy, StepCounts):
            return s.onto(copy)
        if isinstance(s, (Tail, CountsTail)):
            raise ValueError("a picture's series came as what it added to a copy this reader does not hold")
        return s

    picture._change_series(onto)  # a picture just loaded is this reader's alone: no copy needed
    return picture


def log_line(x: dict[str, Any], ranks: bool) -> str:
    """One line a worker printed, as ``%raytrain logs``, the Ray Jobs path's echo and a run's own Ray Job show it."""
    prefix = (
        f"[rank {x['rank']}{', attempt ' + str(x['attempt']) if x.get('attempt', 1) > 1 else ''}] " if ranks else ""
    )
    return prefix + x["text"]
