"""In any process: how far a run is, when it will end, and whether it is stuck: pure functions of the run's picture
(``picture.Aggregate``), the time now and the run's settings. The live view, ``run.progress``, ``%raytrain ls`` and
the registry's stall guard (``--on-stall stop``) all read these, so they never disagree.

Steps count as the run reports them: a run whose first step is 0 has done ``step + 1`` steps, one that starts at 1 (a
``raynb.report`` without ``step=``, Hugging Face's ``global_step``) has done ``step``. Time left is an estimate from
the recent pace -- the newest step's last advances, never across a restart or a warm cell -- and says so; with no
total there is no fraction and no time left: nothing is invented."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["Progress", "Stall", "progress", "stall", "PACE_STEPS"]

#: the recent pace is measured over the newest step's last this many advances
PACE_STEPS = 20


@dataclass(frozen=True)
class Progress:
    #: steps done (the newest step any rank reached, counted from 1)
    done: float
    #: the run's total steps (None: not known)
    total: float | None
    #: done / total, at most 1 (None: no total)
    fraction: float | None
    #: the recent pace, steps a second (None: fewer than two advances yet)
    steps_per_s: float | None
    #: seconds left at that pace, an estimate (None: no total or no pace yet)
    left_s: float | None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _done(agg: Any) -> float:
    top = agg.top_step
    if top == float("-inf"):
        return 0.0
    return top + 1 if agg.first_step == 0 else top


def pace(agg: Any) -> float | None:
    """Steps a second over the newest segment's last ``PACE_STEPS`` advances (None: fewer than two)."""
    recent = agg.advances[-(PACE_STEPS + 1) :]
    if len(recent) < 2:
        return None
    (t0, s0), (t1, s1) = recent[0], recent[-1]
    return (s1 - s0) / (t1 - t0) if t1 > t0 else None


def progress(agg: Any, *, total: float | None = None, now: float | None = None) -> Progress:
    """Where the run is: ``total`` as the kernel gave it (``--steps``), else as the run reported it (``total=``, or
    the framework's own through raynb's hook). ``now`` (the run's clock): the estimate counts down from the last
    advance."""
    total = total or agg.total or None
    done = _done(agg)
    rate = pace(agg)
    fraction = min(done / total, 1.0) if total else None
    left = None
    if total and rate:
        left = max(total - done, 0.0) / rate
        if now is not None and agg.advances:
            left = max(left - max(now - agg.advances[-1][0], 0.0), 0.0)
    return Progress(done=done, total=total, fraction=fraction, steps_per_s=rate, left_s=left)


@dataclass(frozen=True)
class Stall:
    #: seconds since any rank's newest step advanced
    quiet_s: float
    #: how long a quiet run may be before it counts as stalled (``stall_factor`` x the recent step time, at least
    #: ``stall_min_s``)
    window_s: float
    #: each rank's last report: its step and how long ago
    ranks: dict[int, dict[str, float]]

    def text(self) -> str:
        last = ", ".join(
            f"rank {r} at step {x['step']:g} {x['ago_s']:.0f} s ago" for r, x in sorted(self.ranks.items())[:8]
        )
        return f"no new step for {self.quiet_s:.0f} s (over {self.window_s:.0f} s); last reports: {last}"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


#: a GPU whose utilisation moved more than this (percentage points) over the quiet time is working, not stuck
GPU_MOVED = 10.0


def stall(agg: Any, now: float, *, factor: float, min_s: float) -> Stall | None:
    """The stall verdict: no new step from any rank for longer than ``factor`` times the recent step time, and at
    least ``min_s`` (a floor for compiles, evaluations, checkpoints) -- with GPU utilisation flat where it is sampled
    (a GPU whose use moves is working: a long evaluation, not a hang). Never before the run's first two steps: the
    first step pays for start-up and compiles, whose length nothing measured yet predicts."""
    rate = pace(agg)
    if rate is None or not agg.advances:
        return None
    last_t = agg.advances[-1][0]
    quiet = now - last_t
    window = max(min_s, factor / rate) if rate > 0 else min_s
    if quiet <= window:
        return None
    for samples in agg.gpu_recent.values():
        utils = [u for t, u in samples if t >= last_t]
        if len(utils) >= 2 and max(utils) - min(utils) > GPU_MOVED:
            return None
    ranks = {r: {"step": s, "ago_s": now - t} for r, (t, s) in agg.last_seen.items()}
    return Stall(quiet_s=quiet, window_s=window, ranks=ranks)
