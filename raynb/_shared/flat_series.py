"""In any process: the picture's series as flat arrays of floats (``picture.py`` holds what they mean).

The picture crosses the wire up to four times a second (sink -> notebook). Held as a few ``array('d')`` it pickles
as bytes; held as thousands of tuples and lists it cost the sink and the kernel their CPU -- the kernel a full garbage
collection every few pictures -- while the run trains beside them (measured on 2 cores, issue 39: 1.37 -> 0.12 ms to
load a picture of 2 ranks alone, 4.86 -> 0.10 ms in a process that has imported torch). Pure, standard library only.
"""

from __future__ import annotations

import random
from array import array
from typing import Any

__all__ = ["Decimated", "StepCounts", "CountsTail", "Points", "Tail"]

Points = list[tuple[float, float]]


class Decimated:
    """A series held to at most ``cap`` points: past that, neighbours are averaged in pairs and later points are
    averaged in buckets twice as large. ``per_point`` says how many appended points one kept point stands for. The
    points live in one flat array (x0, y0, x1, y1, ...); ``points`` and ``view`` give them as pairs."""

    __slots__ = ("_acc", "_xy", "cap", "per_point", "uid")

    def __init__(self, cap: int = 1024) -> None:
        self.cap, self.per_point = cap, 1
        self._xy = array("d")
        self._acc = [0.0, 0.0, 0]
        #: which series this is, kept through pickling: a reader's copy and the sink's original share it
        self.uid = random.getrandbits(62)

    @property
    def points(self) -> Points:
        it = iter(self._xy)
        return list(zip(it, it, strict=True))

    def append(self, x: float, y: float) -> None:
        acc = self._acc
        acc[0] += x
        acc[1] += y
        acc[2] += 1
        if acc[2] >= self.per_point:
            self._xy.extend((acc[0] / acc[2], acc[1] / acc[2]))
            self._acc = [0.0, 0.0, 0]
            if len(self._xy) > 2 * self.cap:
                p = self._xy
                pairs = len(p) // 4  # whole pairs of points: x of the pair's mean from p[4j], p[4j+2]; y one later
                self._xy = array("d", [(p[2 * i - (i & 1)] + p[2 * i - (i & 1) + 2]) / 2 for i in range(2 * pairs)])
                if len(p) % 4:  # an odd point left over: it goes back into the bucket being filled
                    self._acc = [p[-2] * self.per_point, p[-1] * self.per_point, self.per_point]
                self.per_point *= 2

    def view(self) -> Points:
        acc = self._acc
        return self.points + ([(acc[0] / acc[2], acc[1] / acc[2])] if acc[2] else [])

    def __len__(self) -> int:
        return len(self._xy) // 2 + (1 if self._acc[2] else 0)

    def shape(self) -> tuple[int, int]:
        """(points per kept point, kept points): what a copy of this series holds, for :meth:`since`."""
        return self.per_point, len(self._xy) // 2

    def since(self, shape: tuple[int, int] | list[int]) -> Tail | None:
        """What this series added since a copy of ``shape`` was taken, or None where it has been decimated since
        (the copy's points are no longer its points). Kept points only ever append between decimations."""
        per_point, kept = shape
        if per_point != self.per_point or 2 * kept > len(self._xy):
            return None
        return Tail(self.uid, kept, self._xy[2 * kept :], list(self._acc))

    def __setstate__(self, state: tuple[None, dict[str, Any]]) -> None:
        """A series pickled by a sink of an earlier raynb holds its points as a list of pairs, and no uid."""
        slots = dict(state[1])
        if "points" in slots:
            slots["_xy"] = array("d", [v for xy in slots.pop("points") for v in xy])
        slots.setdefault("uid", random.getrandbits(62))
        for name, value in slots.items():
            setattr(self, name, value)


class Tail:
    """A series as sent to a reader who holds an earlier copy of it: the points after the copy's ``kept``, and the
    bucket being filled. :meth:`onto` the reader's copy gives the series as the sender holds it."""

    __slots__ = ("acc", "kept", "uid", "xy")

    def __init__(self, uid: int, kept: int, xy: array, acc: list[Any]) -> None:
        self.uid, self.kept, self.xy, self.acc = uid, kept, xy, acc

    def onto(self, copy: Decimated) -> Decimated:
        out = Decimated.__new__(Decimated)
        out.cap, out.per_point, out.uid = copy.cap, copy.per_point, copy.uid
        out._xy = copy._xy[: 2 * self.kept] + self.xy
        out._acc = self.acc
        return out


class StepCounts:
    """Per step: what the ranks counted (samples/tokens), the latest time one of them reported it, how many ranks
    did, the segment (attempt, warm cell) and when it last changed (a count of changes) -- the newest ``keep`` to
    ``2 * keep`` steps. Kept as a dict where records arrive (the sink); pickled as columns, and read from the
    columns where it is only looked at (the notebook). A reader holding a copy gets what changed since
    (:meth:`since`, :class:`CountsTail`): ~76 KB of a 2-rank picture's 83 KB went whole to every poll."""

    __slots__ = ("_cols", "_seq", "_steps", "keep", "uid")

    def __init__(self, keep: int) -> None:
        self.keep = keep
        #: step -> [count, time, ranks, segment, the change that last touched it]
        self._steps: dict[float, list[Any]] = {}
        #: (step, count, time, ranks, attempt, cell, change) as arrays, when unpickled and not added to since
        self._cols: tuple[array, ...] | None = None
        self._seq = 0  # changes so far
        self.uid = random.getrandbits(62)

    def add(self, step: float, count: float, t: float, segment: tuple[int, int]) -> None:
        steps = self._dict()
        self._seq += 1
        acc = steps.setdefault(step, [0.0, 0.0, 0, segment, 0])
        acc[0] += count
        acc[1] = max(acc[1], t)
        acc[2] += 1
        acc[4] = self._seq
        if len(steps) > 2 * self.keep:
            for k in list(steps)[: -self.keep]:  # the oldest steps (dicts keep arrival order)
                del steps[k]

    def __len__(self) -> int:
        return len(self._cols[0]) if self._cols is not None else len(self._steps)

    def complete(self, ranks: int, segment: tuple[int, int]) -> list[tuple[float, float]]:
        """(latest report time, count) of each step that ``ranks`` ranks reported in ``segment``, by time."""
        if self._cols is None:
            return sorted((t, c) for c, t, n, seg, _ in self._steps.values() if n >= ranks and seg == segment)
        _s, count, time, n, attempt, cell, _c = self._cols
        want = tuple(segment)
        return sorted((time[i], count[i]) for i in range(len(n)) if n[i] >= ranks and (attempt[i], cell[i]) == want)

    def shape(self) -> tuple[int, int]:
        """(changes, steps held): what a copy holds, for :meth:`since`."""
        return self._seq, len(self)

    def since(self, shape: tuple[int, int] | list[int]) -> CountsTail | None:
        """The steps changed since a copy of ``shape`` was taken (new ones and those more ranks reported), and the
        oldest step still held; None where the copy is not an earlier state of this one."""
        seq = shape[0]
        if seq > self._seq:
            return None
        steps = self._dict()
        rows = [(k, *v) for k, v in steps.items() if v[4] > seq]  # in the order the steps came: the copy's too
        return CountsTail(self.uid, self._seq, next(iter(steps), None), rows)

    def _dict(self) -> dict[float, list[Any]]:
        """The steps as the dict :meth:`add` changes (made from the columns once, where it was unpickled)."""
        if self._cols is not None:
            self._steps, self._cols = self.as_dict(), None
        return self._steps

    def as_dict(self) -> dict[float, list[Any]]:
        """The steps as a dict, this object left as it is (another thread may be reading it)."""
        if self._cols is None:
            return dict(self._steps)
        step, count, time, n, attempt, cell, seq = self._cols
        return {step[i]: [count[i], time[i], n[i], (attempt[i], cell[i]), seq[i]] for i in range(len(step))}

    def __getstate__(self) -> tuple[int, tuple[array, ...], int, int]:
        if self._cols is not None:
            return self.keep, self._cols, self.uid, self._seq
        cols: list[Any] = [[] for _ in range(7)]
        for k, (count, time, n, (attempt, cell), seq) in self._steps.items():
            for col, v in zip(cols, (k, count, time, n, attempt, cell, seq), strict=True):
                col.append(v)
        return (
            self.keep,
            tuple(array(code, col) for code, col in zip("dddqqqq", cols, strict=True)),
            self.uid,
            self._seq,
        )

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        """``(keep, columns, uid, changes)``; a sink of an earlier raynb pickled ``(keep, columns)`` with no column
        of changes."""
        self.keep, cols = state[0], state[1]
        if len(cols) == 6:
            cols = (*cols, array("q", [0] * len(cols[0])))
        self._cols, self._steps = cols, {}
        self.uid, self._seq = state[2:4] if len(state) >= 4 else (random.getrandbits(62), 0)

    @classmethod
    def from_dict(cls, steps: dict[float, list[Any]], keep: int) -> StepCounts:
        """The dict an earlier raynb's picture held (``Aggregate._counts``)."""
        out = cls(keep)
        out._steps = {k: [a[0], a[1], a[2], tuple(a[3]), 0] for k, a in steps.items()}
        return out


class CountsTail:
    """Per-step counts as sent to a reader who holds an earlier copy: the steps changed since (whole rows), and the
    oldest step the sender still holds. :meth:`onto` the copy gives the counts as the sender holds them."""

    __slots__ = ("first", "rows", "seq", "uid")

    def __init__(self, uid: int, seq: int, first: float | None, rows: list[tuple[Any, ...]]) -> None:
        self.uid, self.seq, self.first, self.rows = uid, seq, first, rows

    def onto(self, copy: StepCounts) -> StepCounts:
        steps = copy.as_dict()  # new rows replace the copy's lists, never change them (a view may be reading)
        for k, count, time, n, segment, seq in self.rows:
            steps[k] = [count, time, n, tuple(segment), seq]
        for k in list(steps):  # the steps the sender no longer holds went first (the same arrival order)
            if k == self.first or self.first not in steps:
                break
            del steps[k]
        out = StepCounts(copy.keep)
        out.uid, out._seq, out._steps = copy.uid, self.seq, steps
        return out
