"""Warm vs cold: from a cell's submission to its first line running on every rank; prints JSON.

  python bench/warm_cells.py [--warm-cells 30] [--cold-cells 3] [--workers 2] [--out bench/results/NAME.json]

On the embedded cluster, in the same invocation: a warm group (``raynb.warm(workers=2)``, started once, not
counted) runs ``--warm-cells`` cells whose first line notes the time on each rank; the baseline is a cold
``raynb.train`` of the same first line (a new Ray Train run per cell, as a plain ``%%raytrain`` cell). Targets
(issue 13): warm p50 <= 0.5 s, p95 <= 1 s.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from machine import emit  # bench/machine.py, beside this script

import raynb


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q / 100 * len(xs)))]


def first_line(_config: dict) -> None:
    import time

    import raynb

    raynb.report(first_line=time.time())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--warm-cells", type=int, default=30)
    ap.add_argument("--cold-cells", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out")
    args = ap.parse_args()
    raynb.up(local=True, progress=lambda m: print(m, file=sys.stderr))
    t = time.time()
    group = raynb.warm(workers=args.workers)
    group.run_cell("pass", {}, display=False)  # the group is up: not counted
    start_s = time.time() - t
    print(f"warm group up in {start_s:.1f} s", file=sys.stderr, flush=True)
    warm = []
    for _ in range(args.warm_cells):
        t0 = time.time()
        group.run_cell("import time\nt_first = time.time()", {}, display=False)
        warm.append(max(group.pull("t_first", rank=r) for r in range(args.workers)) - t0)
        print(f"warm cell {len(warm)}: {warm[-1]:.3f} s", file=sys.stderr, flush=True)
    group.stop()
    cold = []
    for i in range(args.cold_cells):
        t0 = time.time()
        run = raynb.train(first_line, workers=args.workers, display=False, name=f"cold-cell-{int(t0)}-{i}")
        cold.append(float(run.metrics["first_line"].max()) - t0)
        print(f"cold cell {len(cold)}: {cold[-1]:.1f} s", file=sys.stderr, flush=True)
    out = {
        "what": "cell submitted -> its first line running on every rank (max over ranks)",
        "workers": args.workers,
        "warm_group_start_s": round(start_s, 2),
        "warm_s": {"p50": round(statistics.median(warm), 3), "p95": round(pct(warm, 95), 3), "n": len(warm)},
        "cold_s": {"p50": round(statistics.median(cold), 2), "n": len(cold)},
        "ratio_cold_over_warm_p50": round(statistics.median(cold) / statistics.median(warm), 1),
        "target": {"warm_p50_s": 0.5, "warm_p95_s": 1.0},
    }
    emit(out, args.out)
    raynb.down(force=True)


if __name__ == "__main__":
    main()
