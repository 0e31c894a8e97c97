"""The kernel stays responsive while a background run streams metrics into it (a real Jupyter kernel).

  python bench/background_responsiveness.py [--seconds 60] [--ranks 512] [--rate 10] [--out bench/results/NAME.json]

In one kernel on the embedded cluster: first the baseline -- round trips of a trivial cell (`6 * 7`) with nothing
running; then a `%%raytrain --background` run whose worker reports for ``--ranks`` simulated ranks ``--rate`` times
a second each (one Reporter, as bench/metrics_path.py simulates; the JSON says so), while the same trivial cell runs
every 100 ms. Target: p95 round trip <= 100 ms during the run. Prints JSON; quote the ratio.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from machine import emit  # noqa: E402 - bench/machine.py, beside this script

from tests.notebook.kernels import errors, kernel, run, text  # noqa: E402

CELL = """%%raytrain --workers 1 --background --out bg --name responsiveness --no-name-check
import time
from raynb._remote import report
rep = report.current_reporter()
t_end = time.time() + {seconds}
while time.time() < t_end:
    for r in range({ranks}):
        rep.add({{"loss": 1.0, "samples": 32}}, rank=r)
    time.sleep(1 / {rate})
"""


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q / 100 * len(xs)))]


def round_trips(kc: object, seconds: float) -> list[float]:
    out, t_end = [], time.monotonic() + seconds
    while time.monotonic() < t_end:
        t0 = time.monotonic()
        msgs = run(kc, "6 * 7", timeout=30, others=[])
        out.append((time.monotonic() - t0) * 1000)
        assert "42" in text(msgs)
        time.sleep(0.1)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--ranks", type=int, default=512)
    ap.add_argument("--rate", type=float, default=10)
    ap.add_argument("--out")
    args = ap.parse_args()
    home = tempfile.mkdtemp(prefix="raynb-bench-")
    with kernel(env={"RAYNB_HOME": home, "PYTHONPATH": str(ROOT)}) as (_km, kc):
        up = run(kc, "%load_ext raynb\n%raycluster up --local", timeout=300)
        assert not errors(up), text(up)
        idle = round_trips(kc, min(20.0, args.seconds / 3))
        started = run(kc, CELL.format(seconds=args.seconds, ranks=args.ranks, rate=args.rate), timeout=300)
        assert not errors(started), text(started)
        while "running" not in text(run(kc, "print(bg.phase)", timeout=30)):
            time.sleep(0.2)
        busy = round_trips(kc, args.seconds * 0.8)
        done = run(kc, "bg.wait(600)\nprint(bg.status, len(bg.records))", timeout=700)
        status, records = text(done).split()[-2:]
        run(kc, "%raycluster down --force", timeout=120)
    out = {
        "what": "round trip of a trivial cell in a real kernel: idle vs during a background run streaming metrics",
        "simulated": f"{args.ranks} ranks reported by one worker's Reporter ({args.rate:g}/s each), not real workers",
        "ranks": args.ranks,
        "rate_per_rank": args.rate,
        "run_status": status,
        "records_received": int(records),
        "idle_ms": {"p50": round(statistics.median(idle), 1), "p95": round(pct(idle, 95), 1), "n": len(idle)},
        "during_run_ms": {"p50": round(statistics.median(busy), 1), "p95": round(pct(busy, 95), 1), "n": len(busy)},
        "ratio_p95_during_over_idle": round(pct(busy, 95) / pct(idle, 95), 2),
        "target_p95_ms": 100,
    }
    emit(out, args.out)


if __name__ == "__main__":
    main()
