"""Do two cold Ray Train runs at once cost two runs' time on this machine? The gate for running the test suite in two
lanes (tests/BUDGET.md, issue 35): one lane's cold start overlaps the other's only if a cold start leaves cores idle.

  python bench/concurrent_runs.py [--rounds 2] [--out bench/results/NAME.json]

On one embedded head with 4 logical CPUs (room for two 2-worker runs), over one Ray Client connection: each round
times one cold 2-worker run alone and two started together (``wait=False``), the order flipped every round. A run's
seconds are from the call to its end (cold workers, 30 trivial steps, each a raynb.report). The record's
``ratio_two_over_one`` is the wall of the pair over the wall of one: 1.0 is a free overlap, 2.0 none at all.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from machine import emit  # bench/machine.py, beside this script

import raynb


def train_fn(config: dict[str, Any]) -> None:
    import torch

    import raynb

    model = torch.nn.Linear(8, 1)
    for _ in range(config["steps"]):
        loss = model(torch.ones(4, 8)).pow(2).mean()
        loss.backward()
        raynb.report(loss=loss)


def _runs(n: int, tag: str) -> float:
    t0 = time.monotonic()
    runs = [
        raynb.train(train_fn, workers=2, config={"steps": 30}, display=False, name=f"{tag}-{i}", wait=False)
        for i in range(n)
    ]
    for r in runs:
        r.wait()
        r.raise_for_status()
    return time.monotonic() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", help="also write the JSON record to this file (bench/results/...)")
    args = ap.parse_args()
    raynb.up(local=True, num_cpus=4, progress=lambda m: print(m, file=sys.stderr))
    _runs(1, "warm-up")  # the driver's first run imports Ray Train: not counted
    one: list[float] = []
    two: list[float] = []
    for i in range(args.rounds):
        for n in (1, 2) if i % 2 == 0 else (2, 1):
            (one if n == 1 else two).append(_runs(n, f"r{i}-n{n}"))
            print(f"round {i}: {n} run(s) at once {(one if n == 1 else two)[-1]:.1f} s", file=sys.stderr)
    raynb.down()
    ratios = [b / a for a, b in zip(one, two, strict=True)]
    emit(
        {
            "what": "wall of two cold 2-worker raynb runs started together over the wall of one alone",
            "rounds": args.rounds,
            "order": "alternating, flipped every round",
            "one_s": one,
            "two_s": two,
            "ratio_two_over_one": statistics.median(ratios),
            "ratios": ratios,
            "gate": "two lanes pay when the ratio is <= 1.5 (suite-plan.md section 4)",
        },
        args.out,
    )


if __name__ == "__main__":
    main()
