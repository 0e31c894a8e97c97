"""Benchmark raynb's metrics path on the embedded cluster; prints one JSON object.

  python bench/metrics_path.py [--scale-seconds 60] [--ranks 512] [--rate 10] [--over node|ray]

- report_cost: worker-side cost of raynb.report() (target p50 <= 1 ms), next to bare Ray Train's
  ray.train.report() per call; both measured inside real Ray Train workers (a raynb run and a bare TorchTrainer with
  Ray's defaults) in the same invocation. Bare calls block ~2 s each, so that side makes few calls.
- latency: worker -> notebook, record time to arrival in the driver (target p95 <= 250 ms).
- scale: simulated ranks x reports/s for N seconds into one notebook (a MetricStream and a live view redrawing at
  4 Hz), with the lag in the first and the last 10 s (target: no growth). Simulated means: --processes Ray worker
  processes each host ranks/processes logical ranks behind one Reporter, flushing every 100 ms (a real worker's
  period); the JSON says so under "simulated".
Numbers are machine-dependent: quote the ratios.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import ray
from machine import emit  # bench/machine.py, beside this script

import raynb
from raynb._client.run_channel import RunChannel
from raynb._client.spares import sink_actor
from raynb._remote import node_channel
from raynb._remote import report as metrics
from raynb._runs.stream import MetricStream

#: A real worker's flush period (run_on_worker's default).
FLUSH_S = 0.1


def _stream(sink: Any, pictures: str) -> MetricStream:
    """The notebook's stream of the sink's picture, as a run's; ``whole``: without asking for changes only."""
    stream = MetricStream(RunChannel("bench", None, None, sink))
    stream._deltas = pictures == "changes"
    return stream.start()


def _reporter(sink: Any, rank: int, over: str) -> metrics.Reporter:
    """A Reporter as run_on_worker sets one up: ``over`` "node", the sink's socket where the sink is on this node
    (what a real worker does), or "ray", a Ray call each flush (every worker before the node channel, and workers on
    other nodes)."""
    find = (lambda: node_channel.find(sink)) if over == "node" else None
    return metrics.Reporter(sink, rank, flush_interval=FLUSH_S, find_channel=find)


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q / 100 * len(xs)))] if xs else float("nan")


@ray.remote(num_cpus=0)
class ReportingWorker:
    """Stands in for a training worker: a Ray worker process with a Reporter, like run_on_worker sets up."""

    def steady(self, sink: Any, seconds: float, hz: float, over: str) -> int:
        rep = _reporter(sink, 0, over)
        metrics._set_reporter(rep)
        n, t_end = 0, time.time() + seconds
        while time.time() < t_end:
            metrics.report(loss=1.0, samples=32)
            n += 1
            time.sleep(1 / hz)
        rep.close()
        return n

    def simulate(self, sink: Any, ranks: list[int], seconds: float, rate: float, over: str) -> int:
        """Many logical ranks in one process, each reporting ``rate`` times a second through one flusher."""
        rep = _reporter(sink, ranks[0], over)
        steps = dict.fromkeys(ranks, 0)
        n, t0 = 0, time.time()
        tick = 1.0 / rate
        k = 0
        while time.time() - t0 < seconds:
            k += 1
            for r in ranks:
                steps[r] += 1
                rep.add({"loss": 1.0 / steps[r], "samples": 32, "step": steps[r]}, rank=r)
                n += 1
            delay = t0 + k * tick - time.time()
            if delay > 0:
                time.sleep(delay)
        rep.close(timeout=30)
        return n


@ray.remote(num_cpus=0)
class Collector:
    def __init__(self) -> None:
        self.v: list[float] = []

    def add(self, v: list[float]) -> None:
        self.v.extend(v)

    def get(self) -> list[float]:
        return self.v


def _raynb_cost_loop(config: dict) -> None:
    import time

    import ray
    import ray.train

    import raynb

    out = []
    for i in range(config["calls"]):
        t0 = time.perf_counter()
        raynb.report(loss=1.0 / (i + 1), samples=32)
        out.append((time.perf_counter() - t0) * 1e6)
    if ray.train.get_context().get_world_rank() == 0:
        ray.get(config["col"].add.remote(out))


def raynb_report_us(calls: int = 20_000) -> list[float]:
    """Per-call time of raynb.report() inside the workers of a real raynb run (rank 0's calls)."""
    col = Collector.remote()
    raynb.train(
        _raynb_cost_loop,
        workers=2,
        config={"calls": calls, "col": col},
        display=False,
        name=f"bench-raynb-report-{int(time.time())}",
    ).raise_for_status()
    return ray.get(col.get.remote())


def bare_train_report_ms(calls: int = 4) -> list[float]:
    """Per-call time of ray.train.report() inside a bare TorchTrainer with Ray's default settings."""
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    col = Collector.remote()

    def loop(config: dict) -> None:
        import ray.train as rt

        out = []
        for i in range(config["calls"]):
            t0 = time.perf_counter()
            rt.report({"loss": 1.0 / (i + 1)})
            out.append((time.perf_counter() - t0) * 1e3)
        ray.get(config["col"].add.remote(out))

    @ray.remote(num_cpus=0)
    def fit() -> None:
        TorchTrainer(
            loop,
            train_loop_config={"calls": calls, "col": col},
            scaling_config=ScalingConfig(num_workers=2),
            run_config=RunConfig(name=f"bench-bare-report-{int(time.time())}"),
        ).fit()

    ray.get(fit.remote())
    return ray.get(col.get.remote())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scale-seconds", type=float, default=60)
    ap.add_argument("--ranks", type=int, default=512)
    ap.add_argument("--rate", type=float, default=10)
    ap.add_argument("--processes", type=int, default=8, help="processes hosting the simulated ranks")
    ap.add_argument("--over", choices=("node", "ray"), default="node", help="the simulated workers' path (_reporter)")
    ap.add_argument(
        "--pictures",
        choices=("changes", "whole"),
        default="changes",
        help="the notebook asks for what changed since its copy (raynb's way), or for the whole picture every time",
    )
    ap.add_argument("--out", help="also write the JSON record to this file (bench/results/...)")
    args = ap.parse_args()
    raynb.up(local=True, progress=lambda m: print(m, file=sys.stderr))
    out: dict[str, Any] = {"ray": ray.__version__, "over": args.over, "pictures": args.pictures}

    # 1. worker-side cost of report(), both inside real Train workers
    cost_us = raynb_report_us()
    bare_ms = bare_train_report_ms()
    w = ReportingWorker.remote()
    out["report_cost"] = {
        "raynb_p50_us": statistics.median(cost_us),
        "raynb_p99_us": pct(cost_us, 99),
        "calls": len(cost_us),
        "bare_ray_train_report_p50_ms": statistics.median(bare_ms),
        "bare_calls": len(bare_ms),
        "ratio_bare_over_raynb": statistics.median(bare_ms) * 1000 / statistics.median(cost_us),
        "where": "rank 0 of a 2-worker run: raynb.train for raynb, a bare TorchTrainer for ray.train.report",
        "target_p50_us": 1000,
    }

    # 2. latency worker -> notebook at a steady 20 reports/s (sink up first, as in a run: Train takes longer to start)
    sink = sink_actor()
    ray.get(sink.read.remote(0, 0, 0.0))
    stream = _stream(sink, args.pictures)
    n = ray.get(w.steady.remote(sink, 10.0, 20.0, args.over))
    stream.stop()
    lat = [(a - newest) * 1000 for a, newest in stream.arrivals]
    out["latency_ms"] = {
        "what": "report time of the newest record in each new picture -> that picture in the notebook",
        "p50": statistics.median(lat),
        "p95": pct(lat, 95),
        "max": max(lat),
        "pictures": len(lat),
        "records": len(stream.records),
        "sent": n,
        "target_p95": 250,
    }

    # 3. scale: ranks x rate for scale-seconds into one notebook, with a live view redrawing
    from types import SimpleNamespace

    from raynb._shared.run_spec import RunSpec
    from raynb.display import LiveView

    sink = sink_actor()
    ray.get(sink.read.remote(0, 0, 0.0))
    stream = _stream(sink, args.pictures)
    fake_run = SimpleNamespace(
        name="scale",
        status="running",
        phase="running",
        events=[],
        error=None,
        # the run's real spec type, so the view reads every field it has (a namespace of a few lagged behind it)
        spec=RunSpec(
            workers=args.ranks,
            gpu=False,
            cpus_per_worker=1.0,
            config={},
            name="scale",
            worker_env={},
            storage_path=None,
        ),
        elapsed=0.0,
        records=[],
        step=0,
        attempt=1,
        nccl={},
        aborted_at_step=None,
    )

    class Handle:
        def update(self, obj: Any) -> None:
            obj._repr_mimebundle_()

    view = LiveView(fake_run, mode="html", hz=4)
    view._handle = Handle()
    per = args.ranks // args.processes
    sims = [ReportingWorker.remote() for _ in range(args.processes)]
    ray.get([s.steady.remote(sink, 0.0, 1.0, args.over) for s in sims])  # all processes up before the clock starts
    while stream.poll_once(timeout=0.5):  # the warm-up reports are in the picture before the clock starts
        pass
    warmup = stream.summary.get("records", 0)
    stream.arrivals.clear()
    t0 = time.time()
    refs = [
        s.simulate.remote(sink, list(range(i * per, (i + 1) * per)), args.scale_seconds, args.rate, args.over)
        for i, s in enumerate(sims)
    ]
    render_ms: list[float] = []
    while len(ray.wait(refs, num_returns=len(refs), timeout=0.25)[0]) < len(refs):
        fake_run.elapsed = time.time() - t0
        fake_run.picture = stream.picture
        t_r = time.perf_counter()
        view.refresh(force=True)
        render_ms.append((time.perf_counter() - t_r) * 1000)
    sent = sum(ray.get(refs))
    deadline = time.time() + 30
    while stream.summary.get("records", 0) < sent + warmup and time.time() < deadline:
        time.sleep(0.2)
    stream.stop(keep_records=False)
    received = stream.picture.records - warmup if stream.picture else 0
    start = min(newest for _a, newest in stream.arrivals)
    lags = [((newest - start), (a - newest) * 1000) for a, newest in stream.arrivals]
    end = max(t for t, _ in lags)
    first = [lg for t, lg in lags if t < 10]
    last = [lg for t, lg in lags if t > end - 10]
    out["scale"] = {
        "ranks": args.ranks,
        "reports_per_s_per_rank": args.rate,
        "seconds": args.scale_seconds,
        "processes": args.processes,
        "simulated": f"{args.processes} Ray worker processes x {args.ranks // args.processes} logical ranks each, one "
        f"Reporter per process flushing every {FLUSH_S * 1000:.0f} ms",
        "sent": sent,
        "received": received,
        "lag_is": "report time of the newest record in each new picture -> that picture in the notebook",
        "lag_p95_first_10s_ms": pct(first, 95),
        "lag_p95_last_10s_ms": pct(last, 95),
        "lag_growth_ratio_last_over_first": pct(last, 95) / max(pct(first, 95), 1e-9),
        "live_view_render_p50_ms": statistics.median(render_ms),
        "live_view_render_p95_ms": pct(render_ms, 95),
        "redraws": len(render_ms),
    }
    emit(out, args.out)


if __name__ == "__main__":
    main()
