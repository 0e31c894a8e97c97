"""Attaching to a long run: time from `raynb.attach(name)` to the full picture, on the embedded cluster.

  python bench/attach_replay.py [--records 1000000] [--ranks 8] [--out bench/results/NAME.json]

A run's sink is filled with ``--records`` records (ranks x steps, loss and samples each, as raynb.report sends them;
past 200,000 records the sink spills the oldest to its file, as in a day-long run). Then, in the same invocation:
- attach: ``raynb.attach(name, display=False)`` and drawing the picture (the live view's HTML, from the decimated
  series the sink keeps) -- what a user waits for after a kernel restart (target <= 2 s for 1M);
- table: then ``run.metrics``, every record as a DataFrame (read from the sink and its spill file on demand);
- baseline: the picture drawn the way it was before the sink kept it: aggregating every record in this process
  (records already here, no transfer).
Prints JSON; quote the ratio and the absolute time with the machine.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import ray
from machine import emit  # bench/machine.py, beside this script

import raynb
from raynb._client.spares import registry, sink_actor
from raynb._remote.launcher import Launcher
from raynb.display import render_bundle

VIEWED = ("name", "status", "phase", "step", "attempt", "elapsed", "events", "nccl", "error", "spec")


def fill(sink: object, ranks: int, steps: int, batch: int = 20_000) -> int:
    t0, n, pending = time.time() - steps * 0.1, 0, []
    buf = []
    for step in range(1, steps + 1):
        for rank in range(ranks):
            buf.append({"rank": rank, "step": step, "time": t0 + step * 0.1, "loss": 1.0 / step, "samples": 32})
            if len(buf) >= batch:
                pending.append(sink.push.remote(buf))  # type: ignore[attr-defined]
                n, buf = n + len(buf), []
    if buf:
        pending.append(sink.push.remote(buf))  # type: ignore[attr-defined]
        n += len(buf)
    ray.get(pending)
    return n


def finished_run(name: str, ranks: int, records: int) -> tuple[int, float, Any]:
    """A finished run ``name`` in the cluster's registry whose sink holds ``records`` records (``ranks`` x steps),
    filled as raynb.report sends them, no fit(): the records filled, the seconds filling took, and the sink."""
    reg, sink = registry(), sink_actor()
    spec = {"workers": ranks, "gpu": False, "cpus_per_worker": 1.0, "config": {}, "name": name}
    spec |= {"worker_env": {}, "storage_path": None}
    launcher = ray.remote(num_cpus=0)(Launcher).remote()  # idle: the run is marked finished below, no fit()
    assert ray.get(reg.register.remote(name, {"spec": spec, "user": "bench"}, launcher, sink)) is None
    t = time.perf_counter()
    n = fill(sink, ranks, records // ranks)
    fill_s = time.perf_counter() - t
    ray.get(reg.finished.remote(name, {"status": "succeeded"}))
    return n, fill_s, sink


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--out")
    args = ap.parse_args()
    raynb.up(local=True, progress=lambda m: print(m, file=sys.stderr))
    name = f"attach-bench-{int(time.time())}"
    n, fill_s, sink = finished_run(name, args.ranks, args.records)
    summary = ray.get(sink.summary.remote())

    t = time.perf_counter()
    run = raynb.attach(name, display=False)
    bundle = render_bundle(run)
    attach_s = time.perf_counter() - t
    assert run.picture is not None and run.picture.records == n, run.picture
    t = time.perf_counter()
    df = run.metrics
    table_s = time.perf_counter() - t
    assert len(df) == n and df.step.min() == 1, (len(df), n)

    records = run.records
    t = time.perf_counter()
    render_bundle(SimpleNamespace(**{k: getattr(run, k) for k in VIEWED}, records=records, picture=None))
    draw_s = time.perf_counter() - t
    out = {
        "what": "raynb.attach(name) of a finished run until its picture is drawn; run.metrics (every record) timed apart",
        "records": n,
        "ranks": args.ranks,
        "sink_records": summary["records"],
        "sink_memory_limit_records": 200_000,
        "fill_s": round(fill_s, 2),
        "attach_to_picture_s": round(attach_s, 3),
        "metrics_table_s": round(table_s, 3),
        "baseline_picture_from_records_in_memory_s": round(draw_s, 3),
        "ratio_attach_over_baseline": round(attach_s / draw_s, 4) if draw_s else None,
        "picture_html_bytes": len(bundle["text/html"]),
        "target_s": 2.0,
    }
    ray.get(registry().remove.remote(name))
    emit(out, args.out)
    raynb.down(force=True)


if __name__ == "__main__":
    main()
