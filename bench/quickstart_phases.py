"""The quickstart's phases through raynb against plain Ray doing the same work, in one invocation (issue 41).

  python bench/quickstart_phases.py [--rounds 2] [--out bench/results/NAME.json]

raynb: ``notebooks/quickstart.ipynb`` executed top to bottom in a real Jupyter kernel (nbclient, as ``make
quickstart`` runs it), each round with a ``RAYNB_HOME`` of its own so ``%raycluster up --local`` starts a new head;
a phase's seconds are its cell's, from the kernel's own messages as nbclient records them (``execute_input`` to
``execute_reply``).

Plain Ray: one fresh Python per round running the same work the way Ray's guides write it -- ``ray.init()``, a
``TorchTrainer`` whose loop is the notebook's training cell (the same ``make_spirals``, model, steps, batch and
learning rate; ``ray.train.report`` once, at the end: the least plain Ray needs to return a result, so raynb's
per-step reports and live view count against it -- reporting each step through Ray Train made the plain run
344 s against raynb's 47 s on this machine), a ``TorchTrainer`` whose rank 1 raises as the notebook's failing cell does (until ``fit()`` raises), and
``ray.shutdown()``.

Phases: ``up`` (``%raycluster up --local`` / ``ray.init``), ``train`` (the 2-worker run / ``fit()``), ``failure``
(the failing run until its error / until ``fit()`` raises), ``down`` (``%raycluster down`` / ``ray.shutdown()``).
The columns alternate (raynb first in even rounds, plain Ray first in odd ones) after an unrecorded round of
each that warms the page cache (``--warmup``), nothing else running. The issue's
target: each raynb phase within 1.10 x plain Ray's median.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import emit  # bench/machine.py, beside this script

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "quickstart.ipynb"
PHASES = ("up", "train", "failure", "down")


def _cells() -> dict[str, str]:
    """The quickstart's code cells by what they do (read from the notebook, so both columns run its code)."""
    import nbformat

    nb = nbformat.read(NOTEBOOK, as_version=4)
    code = [c.source for c in nb.cells if c.cell_type == "code"]
    found = {
        "parameters": next(s for s in code if s.startswith("# Parameters")),
        "up": next(s for s in code if "%raycluster up" in s),
        "helpers": next(s for s in code if "def make_spirals" in s),
        "train": next(s for s in code if s.startswith("%%raytrain") and "--out run" in s),
        "failure": next(s for s in code if s.startswith("%%raytrain") and "broken-run" in s),
        "down": next(s for s in code if "%raycluster down" in s),
    }
    return found


def plain_script() -> str:
    """The notebook's work as a plain Ray script that prints its phases' seconds."""
    cells = _cells()
    train_body = cells["train"].split("\n", 1)[1]
    last = [ln for ln in train_body.splitlines() if "raynb.report(" in ln]
    assert len(last) == 1, "the training cell reports once per step"
    train_body = train_body.replace(last[0], last[0].split("raynb.report(")[0] + "pass")
    train_body += '\nray.train.report({"loss": float(loss), "accuracy": float(accuracy)})\n'  # once, at the end
    train_body = train_body.replace("import raynb\n", "")
    failure_body = cells["failure"].split("\n", 1)[1]
    return "\n".join(
        [
            "import json, time",
            cells["parameters"],
            cells["helpers"],  # torch imported here, as the kernel does in the notebook's cell before training
            "def train_loop(config):\n" + textwrap.indent(train_body, "    "),
            "def failing_loop(config):\n" + textwrap.indent(failure_body, "    "),
            "out = {}",
            "t0 = time.perf_counter()",  # up: Ray imported and started (the notebook's cell imports raynb, then Ray)
            "import ray",
            "from ray.train import ScalingConfig",
            "from ray.train.torch import TorchTrainer",
            "ray.init()",
            "out['up'] = time.perf_counter() - t0",
            "t = time.perf_counter()",
            "TorchTrainer(train_loop, train_loop_config=dict(steps=STEPS, batch=BATCH, lr=LR),",
            "             scaling_config=ScalingConfig(num_workers=WORKERS)).fit()",
            "out['train'] = time.perf_counter() - t",
            "t = time.perf_counter()",
            "try:",
            "    TorchTrainer(failing_loop, scaling_config=ScalingConfig(num_workers=WORKERS)).fit()",
            "    raise SystemExit('the failing run did not fail')",
            "except Exception as e:",
            "    out['failure'] = time.perf_counter() - t",
            "    out['failure_error'] = type(e).__name__",
            "t = time.perf_counter()",
            "ray.shutdown()",
            "out['down'] = time.perf_counter() - t",
            "print('PHASES ' + json.dumps(out), flush=True)",
        ]
    )


def plain_round(script: Path) -> dict[str, float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_ADDRESS")}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=1200)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("PHASES ")]
    if done.returncode != 0 or not lines:
        raise SystemExit(f"the plain Ray script failed ({done.returncode}):\n{done.stderr[-3000:]}")
    found: dict[str, float] = json.loads(lines[-1][len("PHASES ") :])
    return found


def _seconds(cell: Any) -> float:
    ex = cell.metadata["execution"]
    start = datetime.fromisoformat(ex["iopub.execute_input"].replace("Z", "+00:00"))
    end = datetime.fromisoformat(ex["shell.execute_reply"].replace("Z", "+00:00"))
    return (end - start).total_seconds()


def raynb_round(work: Path) -> dict[str, float]:
    import nbformat

    from raynb.notebook import execute

    home = work / "raynb-home"
    os.environ["RAYNB_HOME"] = str(home)  # a head of this round's own (the kernel inherits it)
    out = work / "quickstart.ipynb"
    execute(NOTEBOOK, out, cwd=work)
    nb = nbformat.read(out, as_version=4)
    cells = _cells()
    found = {}
    for phase in PHASES:
        (cell,) = [c for c in nb.cells if c.cell_type == "code" and c.source == cells[phase]]
        found[phase] = _seconds(cell)
    return found


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", help="also write the JSON record to this file (bench/results/...)")
    ap.add_argument(
        "--warmup",
        type=int,
        default=1,
        help="rounds of both columns run first and not recorded: a freshly booted machine reads Python, Jupyter, "
        "torch and Ray from disk once, and the first column of round 0 paid it (raynb's up 33 s on a fresh machine)",
    )
    args = ap.parse_args()
    say = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    results: dict[str, dict[str, list[float]]] = {c: {p: [] for p in PHASES} for c in ("raynb", "plain")}
    with tempfile.TemporaryDirectory(prefix="raynb-quickstart-bench-") as tmp:
        script = Path(tmp) / "plain_quickstart.py"
        script.write_text(plain_script())
        for i in range(args.warmup):
            for column in ("raynb", "plain"):
                work = Path(tmp) / f"warmup-{column}-{i}"
                work.mkdir()
                phases = raynb_round(work) if column == "raynb" else plain_round(script)
                say(f"warm-up {i} (not recorded) {column}: " + ", ".join(f"{p} {phases[p]:.1f} s" for p in PHASES))
        for i in range(args.rounds):
            for column in ("raynb", "plain") if i % 2 == 0 else ("plain", "raynb"):
                work = Path(tmp) / f"{column}-{i}"
                work.mkdir()
                phases = raynb_round(work) if column == "raynb" else plain_round(script)
                for p in PHASES:
                    results[column][p].append(round(phases[p], 2))
                say(f"round {i} {column}: " + ", ".join(f"{p} {phases[p]:.1f} s" for p in PHASES))
    out: dict[str, Any] = {
        "what": "the quickstart's phases: raynb (the notebook in a real kernel, each cell's seconds) against plain "
        "Ray doing the same work in one Python (ray.init, TorchTrainer.fit, a failing fit, ray.shutdown)",
        "rounds": args.rounds,
        "order": "alternating: raynb first in even rounds, plain Ray first in odd ones",
        "warmup_rounds": args.warmup,
        "raynb_s": results["raynb"],
        "plain_s": results["plain"],
    }
    ratios = {}
    for p in PHASES:
        mine, theirs = statistics.median(results["raynb"][p]), statistics.median(results["plain"][p])
        ratios[p] = {
            "raynb_median_s": mine,
            "plain_median_s": theirs,
            "ratio": round(mine / theirs, 3) if theirs else None,
            "raynb_spread_s": [min(results["raynb"][p]), max(results["raynb"][p])],
            "plain_spread_s": [min(results["plain"][p]), max(results["plain"][p])],
        }
    out["phases"] = ratios
    out["total_raynb_over_plain"] = round(
        sum(r["raynb_median_s"] for r in ratios.values()) / sum(r["plain_median_s"] for r in ratios.values()), 3
    )
    out["target"] = "each raynb phase <= 1.10 x plain Ray's median (issue 41)"
    emit(out, args.out)


if __name__ == "__main__":
    main()
