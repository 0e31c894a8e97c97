"""What reaching a cluster through Ray Jobs (raynb's agent, HTTP) costs against Ray Client, in one invocation.

  python bench/jobs_path.py [--rounds 2] [--out bench/results/NAME.json]

One embedded head; this process is the kernel, connected through Ray Client (``via="client"``) or through Ray Jobs
(``via="jobs"``: the same Python and Ray, the path forced), the order flipped every round, ``SETTLE_S`` between turns. Each round and path: one
cold 2-worker run whose function reports a step every 0.2 s for 40 steps. Measured from this process:

- ``first_step_s``: from the ``raynb.train`` call to the first step seen here (the cell's pickle or its source
  crossing, the launch, the workers' start, the first report's way back);
- ``seen_after_report_ms``: for every step, when this process first saw it (its live picture's step, polled every
  10 ms) less when the worker reported it (the record's own timestamp; one machine, one clock) -- the way from a
  worker to the notebook, p50 and p95 over all steps;
- ``warm_cell_s``: a warm group's next cell (``x = 1``; the group started once per round and path, not counted),
  from ``run_cell`` called to its answer, 10 cells;
- ``attach_s``: ``raynb.attach`` of a finished run of ``--records`` records (2 ranks; filled once, as
  bench/attach_replay.py fills one) until its picture is drawn.

The issue's targets (37): first step through Ray Jobs within 1 s of Ray Client's, worker -> notebook p95 <= 250 ms,
warm next cell p50 <= 0.5 s, attach to a 1M-record run <= 2 s.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from machine import emit  # bench/machine.py, beside this script

import raynb


def train_fn(config: dict[str, Any]) -> None:
    import time

    import raynb

    for step in range(config["steps"]):
        raynb.report(step=step, loss=1.0 / (step + 1))
        time.sleep(config["every_s"])


def _one_run(tag: str) -> tuple[float, list[float]]:
    t0 = time.time()
    run = raynb.train(train_fn, workers=2, config={"steps": 40, "every_s": 0.2}, display=False, name=tag, wait=False)
    seen: dict[int, float] = {}

    def watch() -> None:
        while not run.done():
            picture = run.picture
            if picture is not None and picture.records:  # a step seen (before any, run.step says 0 too)
                seen.setdefault(run.step, time.time())
            time.sleep(0.01)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    run.wait()
    watcher.join()
    run.raise_for_status()
    first = min(r["time"] for r in run.records)
    reported = {}
    for r in run.records:  # the step's first report, of any rank
        reported[r["step"]] = min(reported.get(r["step"], r["time"]), r["time"])
    lat = [(seen[s] - reported[s]) * 1000 for s in sorted(seen) if s in reported and s > 0]
    first_seen = min((t for s, t in seen.items() if s in reported), default=first)
    return first_seen - t0, lat


#: after a path's turn, before the other's: a Ray Client session's end keeps the head's server busy for seconds
#: (seen as +2 s on the next path's first step, a Jobs round after a Client one, in both records before this wait)
SETTLE_S = 10.0


def _warm_cells(n: int = 10) -> list[float]:
    group = raynb.warm(workers=2)
    group.run_cell("pass", {}, display=False)  # the group is up
    took = []
    for _ in range(n):
        t0 = time.perf_counter()
        group.run_cell("x = 1", {}, display=False)
        took.append(time.perf_counter() - t0)
    group.stop()
    return took


def _long_finished_run(records: int) -> str:
    """A finished run of ``records`` records in the cluster's registry (through Ray Client, as attach_replay)."""
    from attach_replay import finished_run

    name = f"bench-attach-{int(time.time())}"
    finished_run(name, 2, records)
    return name


def _attach(name: str, records: int) -> float:
    from raynb.display import render_bundle

    t0 = time.perf_counter()
    run = raynb.attach(name, display=False)
    render_bundle(run)
    took = time.perf_counter() - t0
    assert run.picture is not None and run.picture.records == records, run.picture
    return took


def _p(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--records", type=int, default=1_000_000, help="of the run attached to")
    ap.add_argument("--out", help="also write the JSON record to this file (bench/results/...)")
    args = ap.parse_args()
    say = lambda m: print(m, file=sys.stderr)  # noqa: E731
    results: dict[str, dict[str, list[Any]]] = {
        p: {"first_step_s": [], "latency_ms": [], "warm_cell_s": [], "attach_s": []} for p in ("client", "jobs")
    }
    long_run = None
    for i in range(args.rounds + 1):  # round 0 warms both paths (the head, Ray Train's import, the agent): not counted
        for via in ("client", "jobs") if i % 2 == 0 else ("jobs", "client"):
            raynb.up(local=True, num_cpus=2, via=via, progress=say)
            if long_run is None:  # round 0, Ray Client
                long_run = _long_finished_run(args.records)
            first, lat = _one_run(f"bench-{via}-{i}")
            warm = _warm_cells()
            attach = _attach(long_run, args.records)
            raynb.current().disconnect()
            time.sleep(SETTLE_S)
            say(
                f"round {i} {via}: first step {first:.2f} s, seen after report p50 {_p(lat, 0.5):.0f} ms, "
                f"warm cell p50 {statistics.median(warm):.3f} s, attach {attach:.2f} s"
            )
            if i > 0:
                results[via]["first_step_s"].append(first)
                results[via]["latency_ms"] += lat
                results[via]["warm_cell_s"] += warm
                results[via]["attach_s"].append(attach)
    raynb.down(force=True)
    out: dict[str, Any] = {
        "what": "a cold 2-worker run's first step and each step's way from worker to notebook: Ray Client against "
        "Ray Jobs (raynb's agent), one embedded head, this process the kernel",
        "rounds": args.rounds,
        "order": "alternating, flipped every round; round 0 (warm-up of both paths) not counted",
    }
    for via, r in results.items():
        out[via] = {
            "first_step_s": r["first_step_s"],
            "first_step_median_s": statistics.median(r["first_step_s"]),
            "seen_after_report_ms_p50": _p(r["latency_ms"], 0.5),
            "seen_after_report_ms_p95": _p(r["latency_ms"], 0.95),
            "steps_measured": len(r["latency_ms"]),
            "warm_cell_s_p50": statistics.median(r["warm_cell_s"]),
            "warm_cell_s_p95": _p(r["warm_cell_s"], 0.95),
            "attach_s": r["attach_s"],
        }
    out["jobs_minus_client_first_step_s"] = out["jobs"]["first_step_median_s"] - out["client"]["first_step_median_s"]
    out["records_attached"] = args.records
    out["targets"] = (
        "jobs first step within 1 s of client's; worker -> notebook p95 <= 250 ms; warm next cell p50 <= 0.5 s; "
        "attach to a 1M-record run <= 2 s (issue 37)"
    )
    emit(out, args.out)


if __name__ == "__main__":
    main()
