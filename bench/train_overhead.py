"""raynb's cost around a training function vs a bare TorchTrainer.fit() of the same function; prints JSON.

  python bench/train_overhead.py [--rounds 4] [--steps 3200] [--no-report] [--pin] [--out bench/results/NAME.json]

Both run on the same embedded cluster, over the same Ray Client connection. One warm-up round of each mode comes
first and is not counted (the first fit() of a process imports Ray Train; raynb's launcher is pre-warmed); then the
modes alternate, and the order flips every round (bare, raynb / raynb, bare / ...), so neither always runs second.
- start_to_first_step_s: from the call (cell start) to the end of the first training step on rank 0.
  Target: raynb <= bare + 1 s.
- steps_per_s: steady state, after 20 warm-up steps (each row says how long its steady window was: >= 20 s on 2
  cores with the default steps). Target: raynb / bare >= 0.98 in every paired round.
- window_cpu_cores: every process's CPU over the steady window itself, read from /proc by rank 0 as the window opens
  and closes, grouped by what the process is (Ray's title for a worker process, else its program), in cores; and
  steal_cores, the time the host's hypervisor took from this machine meanwhile: where each round's CPU went.
- raynb_processes_cpu_s: CPU seconds that raynb's processes on the head (its sinks, launchers and registry, those
  started during the run included) and this driver (the notebook's place: it follows the picture) spent from the
  call to its return, from /proc -- what raynb takes from a machine whose cores train, less dependent on the host's
  speed than a rate. The bare run's row is the same processes idle.
raynb's run reports loss and samples every step (what a user does); the bare run reports nothing.
--pin puts each rank's process on a core of its own in both modes. Unpinned, runs of one mode spread by their
placement alone: bare fit() 108-121 steps/s in four runs, 125-132 pinned (by hand, 2026-12-07, the 2-core host),
each run's own 400-step windows within a few percent -- a spread wider than the 2 % margin, the same for both modes.
Pinned, the bench's own pairs spread no less (-07g: bare 110-123 steps/s, ratios 0.90-1.04).
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import ray
from machine import emit  # bench/machine.py, beside this script

import raynb

WARMUP = 20
#: raynb's own processes on the head, by the title Ray gives an actor's process
RAYNB_TITLES = ("ray::MetricsSink", "ray::Launcher", "ray::RunRegistry")


def cpu_table() -> dict[int, tuple[str, float]]:
    """Every process's CPU seconds so far, by pid, with what it is: Ray's title for a Ray worker process
    (``ray::MetricsSink``), a Python program's script (``dashboard.py``), else the program (``raylet``)."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[int, tuple[str, float]] = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().decode(errors="replace").split("\0")
            fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if not argv[0]:  # a kernel thread
            continue
        if argv[0].startswith("ray::"):
            what = argv[0].split(".")[0].split()[0]
        else:
            args = [a for a in argv[1:] if a]
            what = os.path.basename(argv[0].split()[0])
            if "python" in what and args:  # the script, or the module after -m
                module = args[args.index("-m") + 1] if "-m" in args[:-1] else None
                what = os.path.basename(next((a for a in args if a.endswith(".py")), module or what))
        out[int(proc.name)] = (what, (int(fields[11]) + int(fields[12])) / tick)  # utime + stime (proc(5): 14, 15)
    return out


def raynb_cpu_s() -> dict[int, float]:
    """CPU seconds so far of raynb's actor processes on this machine (the embedded head), by pid, and of this
    process (under pid 0)."""
    out = {0: time.process_time()}
    out.update({pid: cpu for pid, (what, cpu) in cpu_table().items() if what in RAYNB_TITLES})
    return out


def cpu_spent(before: dict[int, float], after: dict[int, float]) -> float:
    """What the processes spent between two readings: those that started meanwhile count whole; those that ended
    meanwhile (an idle spare leaving) count nothing -- their last seconds are not readable, so this is a floor."""
    return sum(t - before.get(pid, 0.0) for pid, t in after.items())


def steal_s() -> float:
    """CPU time the hypervisor has taken from this machine so far (/proc/stat's steal), in CPU seconds."""
    with open("/proc/stat") as f:
        return int(f.readline().split()[8]) / os.sysconf("SC_CLK_TCK")


def window_cpu(
    before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]], seconds: float
) -> dict[str, float]:
    """Cores each kind of process used between two :func:`cpu_table` readings (a process that started meanwhile
    counts whole); kinds under 0.005 cores are left out."""
    cores: dict[str, float] = {}
    for pid, (what, cpu) in after.items():
        spent = cpu - (before[pid][1] if pid in before else 0.0)
        cores[what] = cores.get(what, 0.0) + spent / seconds
    return {k: round(v, 3) for k, v in sorted(cores.items(), key=lambda kv: -kv[1]) if v >= 0.005}


@ray.remote(num_cpus=0)
class Timings:
    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def put(self, row: dict[str, Any]) -> None:
        self.rows.append(row)

    def take(self) -> list[dict[str, Any]]:
        rows, self.rows = self.rows, []
        return rows


def train_fn(config: dict[str, Any]) -> None:
    import time

    import ray
    import ray.train
    import ray.train.torch
    import torch

    import raynb

    rank = ray.train.get_context().get_world_rank()
    if config["pin"]:  # each rank on a core of its own, in both modes (--pin)
        cores = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cores[rank % len(cores)]})
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = ray.train.torch.prepare_model(
        torch.nn.Sequential(
            torch.nn.Linear(256, 512),
            torch.nn.ReLU(),
            torch.nn.Linear(512, 512),
            torch.nn.ReLU(),
            torch.nn.Linear(512, 10),
        )
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(128, 256), torch.randint(0, 10, (128,))
    t_first = t_warm = steal0 = 0.0
    rank0 = rank == 0
    cpu0: dict[int, tuple[str, float]] = {}
    for step in range(config["steps"]):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if config["report"]:
            raynb.report(loss=loss, samples=len(x))
        if step == 0:
            t_first = time.time()
        if step == config["warmup"] - 1:
            if rank0:
                cpu0, steal0 = cpu_table(), steal_s()
            t_warm = time.time()
    t_end = time.time()
    if rank0:
        cpu1, steal1 = cpu_table(), steal_s()
        ray.get(
            ray.get_actor("bench-timings", namespace="raynb").put.remote(
                {
                    "t_first": t_first,
                    "steps_per_s": (config["steps"] - config["warmup"]) / (t_end - t_warm),
                    "steady_s": t_end - t_warm,
                    "window_cpu_cores": window_cpu(cpu0, cpu1, t_end - t_warm),
                    "steal_cores": round((steal1 - steal0) / (t_end - t_warm), 3),
                }
            )
        )


def bare(steps: int) -> dict[str, float]:
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    t0 = time.time()
    handler = signal.getsignal(signal.SIGINT)
    try:
        TorchTrainer(
            train_fn,
            train_loop_config={"steps": steps, "warmup": WARMUP, "report": False, "pin": PIN},
            scaling_config=ScalingConfig(num_workers=2),
            run_config=RunConfig(name=f"bench-bare-{int(t0)}"),
        ).fit()
    finally:
        # fit() on the main thread leaves its SIGINT handler behind, and the handler holds the controller's handle:
        # the ended run's controller and DatasetManager stayed alive until the next fit() -- through the raynb run
        # after it (two idle processes, ~0.016 cores of this host's 2). A script's fit() ends with its process.
        signal.signal(signal.SIGINT, handler)
    return {"t0": t0}


REPORT = True
PIN = False


def with_raynb(steps: int) -> dict[str, float]:
    t0 = time.time()
    run = raynb.train(
        train_fn,
        workers=2,
        config={"steps": steps, "warmup": WARMUP, "report": REPORT, "pin": PIN},
        display=False,
        name=f"bench-raynb-{int(t0)}",
    )
    run.raise_for_status()
    return {"t0": t0}


def _verdict(paired: list[float], meets: Any) -> str:
    """``met`` only when every paired round meets the target, ``missed`` when none does; otherwise the spread is
    wider than the margin: ``not resolved``."""
    hits = [bool(meets(v)) for v in paired]
    return "met" if all(hits) else "missed" if not any(hits) else "not resolved"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--steps", type=int, default=3200)
    ap.add_argument("--no-report", action="store_true", help="raynb run without raynb.report (isolates its cost)")
    ap.add_argument(
        "--pin",
        action="store_true",
        help="each rank's process on a core of its own, in both modes: the scheduler's placement, which spreads "
        "one mode's runs as much as the other's, out of the comparison",
    )
    ap.add_argument("--out", help="also write the JSON record to this file (bench/results/...)")
    args = ap.parse_args()
    global REPORT, PIN
    REPORT, PIN = not args.no_report, args.pin
    raynb.up(local=True, progress=lambda m: print(m, file=sys.stderr))
    timings = Timings.options(name="bench-timings", namespace="raynb", get_if_exists=True).remote()
    rows: dict[str, list[dict[str, float]]] = {"bare": [], "raynb": []}
    modes = {"bare": bare, "raynb": with_raynb}
    for fn in modes.values():  # warm-up round, not counted
        fn(min(args.steps, 60))
        ray.get(timings.take.remote())
    for i in range(args.rounds):
        for mode in ("bare", "raynb") if i % 2 == 0 else ("raynb", "bare"):
            cpu0 = raynb_cpu_s()
            start = modes[mode](args.steps)
            cpu_s = cpu_spent(cpu0, raynb_cpu_s())
            (row,) = ray.get(timings.take.remote())
            rows[mode].append(
                {
                    "round": i,
                    "start_to_first_step_s": row["t_first"] - start["t0"],
                    "steps_per_s": row["steps_per_s"],
                    "steady_window_s": row["steady_s"],
                    "window_cpu_cores": row["window_cpu_cores"],
                    "steal_cores": row["steal_cores"],
                    "raynb_processes_cpu_s": cpu_s,
                }
            )

    def med(mode: str, key: str) -> float:
        return statistics.median(r[key] for r in rows[mode])

    # each round's raynb run against the bare run beside it: the spread says whether the difference is resolved
    first_diff = [
        r["start_to_first_step_s"] - b["start_to_first_step_s"]
        for r, b in zip(rows["raynb"], rows["bare"], strict=True)
    ]
    ratios = [r["steps_per_s"] / b["steps_per_s"] for r, b in zip(rows["raynb"], rows["bare"], strict=True)]

    out = {
        "ray": ray.__version__,
        "workers": 2,
        "raynb_reports_every_step": REPORT,
        "workers_pinned": PIN,
        "rounds": args.rounds,
        "warmup_round": True,
        "order": "alternating, flipped every round",
        "steps": args.steps,
        "raw": rows,
        "start_to_first_step_s": {
            "bare": med("bare", "start_to_first_step_s"),
            "raynb": med("raynb", "start_to_first_step_s"),
            "raynb_minus_bare": med("raynb", "start_to_first_step_s") - med("bare", "start_to_first_step_s"),
            "target_max_extra_s": 1.0,
        },
        "steps_per_s": {
            "bare": med("bare", "steps_per_s"),
            "raynb": med("raynb", "steps_per_s"),
            "ratio_raynb_over_bare": med("raynb", "steps_per_s") / med("bare", "steps_per_s"),
            "target_min_ratio": 0.98,
        },
    }
    out["raynb_processes_cpu_s"] = {
        "bare": med("bare", "raynb_processes_cpu_s"),
        "raynb": med("raynb", "raynb_processes_cpu_s"),
        "what": "median over rounds: raynb's sinks, launchers and registry on the head plus this driver, per run",
    }
    out["window_cpu_cores_median"] = {
        mode: {
            what: round(statistics.median(r["window_cpu_cores"].get(what, 0.0) for r in rows[mode]), 3)
            for what in sorted({w for r in rows[mode] for w in r["window_cpu_cores"]})
        }
        for mode in rows
    }
    out["paired"] = {
        "first_step_raynb_minus_bare_s": first_diff,
        "first_step_verdict": _verdict(first_diff, lambda d: d <= 1.0),
        "steps_per_s_ratio": ratios,
        "steps_per_s_ratio_spread": [min(ratios), max(ratios)],
        "steps_per_s_verdict": _verdict(ratios, lambda r: r >= 0.98),
    }
    emit(out, args.out)


if __name__ == "__main__":
    main()
