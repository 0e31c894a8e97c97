"""Speed of the Qwen2.5-1.5B notebook's training cell: under raynb (%%raytrain's path) or bare torchrun.

  python bench/qwen_speed.py --mode both --rounds 3 --workers 1 --out bench/results/NAME.json   # the comparison
  python bench/qwen_speed.py --mode raynb --workers 2 --env NCCL_P2P_DISABLE=1 --env NCCL_SHM_DISABLE=1  # one run
  python bench/qwen_speed.py --mode warm --workers 1 --out bench/results/NAME.json   # warm cells vs cold (issue 13)

``--mode both`` runs raynb and bare torchrun in the same invocation, alternating, the order flipped every round, and
prints the ratio of the medians (the baseline measured in the same run). ``--mode warm`` runs the cold training
cell, then the notebook's warm cells on one warm group (build, train, evaluate, train, train), then the cold cell again
if time allows; it reports each warm training cell's time from submission to its first step and the steady tokens/s
of the warm cells after the first (which compiles) against the cold runs'.

The cells come from notebooks/qwen25_finetune_eks.ipynb (tags "helpers" and "train"), so what is measured is the
notebook's own code. Random weights from the real config (nothing is downloaded): same compute as the pretrained
model. MFU = tokens/s per GPU x (6 N + 12 L d s) / peak, against the dense bf16 peak (989.4 TFLOP/s for H100/H200
SXM) and against an 8192^3 bf16 matmul measured in the same process.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from machine import machine  # noqa: E402 - bench/machine.py, beside this script

from raynb._shared.flops import dense_bf16_peak, mfu, transformer_flops_per_token  # noqa: E402 - pure arithmetic

NOTEBOOK = ROOT / "notebooks" / "qwen25_finetune_eks.ipynb"


def notebook_cells() -> tuple[str, str]:
    """(helpers source, train cell body without its %%raytrain line)."""
    cells = tagged_cells()
    helpers = "\n\n".join(body for tag, body in cells if tag == "helpers")
    body = next((body for tag, body in cells if tag == "train"), None)
    assert body is not None, "no cell tagged 'train' in the notebook"
    return helpers, body.split("\n", 1)[1]


def tagged_cells() -> list[tuple[str, str]]:
    """(tag, source) of every tagged code cell, in order (warm cells: tags warm-build, warm-train, warm-eval)."""
    nb = json.loads(NOTEBOOK.read_text())
    return [(t, "".join(c["source"])) for c in nb["cells"] for t in c.get("metadata", {}).get("tags", [])]


def matmul_tflops() -> float | None:
    import torch

    if not torch.cuda.is_available():
        return None
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(10):
        a @ b
    torch.cuda.synchronize()
    return 2 * 8192**3 * 10 / (time.perf_counter() - t0) / 1e12


def run_raynb(cfg: dict[str, Any], workers: int, env: dict[str, str]) -> dict[str, Any]:
    import raynb
    from raynb._runs.cell import compile_cell

    helpers, body = notebook_cells()
    ns: dict[str, Any] = {"__name__": "__main__"}
    exec(compile(helpers, "<qwen-notebook-helpers>", "exec"), ns)
    fn = compile_cell(body, ns, filename="<qwen-notebook-train-cell>")
    raynb.up(local=True, progress=lambda m: print(m, file=sys.stderr))
    t0 = time.time()
    run = raynb.train(
        fn, workers=workers, gpu=cfg["gpu"], config=cfg, env=env, display="text", name=f"qwen-bench-{int(t0)}"
    )
    run.raise_for_status()
    nccl = run.nccl.get(0, {})
    first = json.loads(Path(cfg["timing_file"]).read_text())["first_step_at"]
    return {
        "nccl": {k: nccl.get(k) for k in ("intra_node", "inter_node", "network", "severity", "fallback")},
        "call_to_first_step_s": first - t0,
        "call_to_end_s": time.time() - t0,
    }


def run_warm(cfg: dict[str, Any], workers: int, train_cells: int) -> dict[str, Any]:
    """The notebook's warm cells on one warm group: build once, then train / evaluate / train ... Each training
    cell's time from submission to its first step (synchronised) and its steady tokens/s."""
    import raynb

    helpers, _ = notebook_cells()
    cells = {tag: src.split("\n", 1)[1] for tag, src in tagged_cells() if tag.startswith("warm-")}
    ns: dict[str, Any] = {"__name__": "__main__", "TRAIN_CONFIG": cfg, "STEPS": cfg["steps"]}
    exec(compile(helpers, "<qwen-notebook-helpers>", "exec"), ns)
    raynb.up(local=True, progress=lambda m: print(m, file=sys.stderr))
    t0 = time.time()
    group = raynb.warm(workers=workers, gpu=cfg["gpu"])
    print(group.run_cell(cells["warm-build"], ns, display="text"), file=sys.stderr)
    out: dict[str, Any] = {"group_and_model_s": time.time() - t0, "train_cells": [], "eval_cells": []}
    for i in range(train_cells):
        t_submit = time.time()
        timing = group.run_cell(cells["warm-train"], ns, display="text")
        out["train_cells"].append(
            {
                "cell": i + 1,
                "submit_to_first_step_s": timing["first_step_at"] - t_submit,
                "cell_s": time.time() - t_submit,
                **{k: timing.get(k) for k in ("tokens_per_s", "seconds", "steps_done", "peak_mem_gb")},
            }
        )
        print(f"warm train cell {i + 1}: {out['train_cells'][-1]}", file=sys.stderr, flush=True)
        if i == 0:
            t_submit = time.time()
            ev = group.run_cell(cells["warm-eval"], ns, display=False)
            out["eval_cells"].append({"cell_s": time.time() - t_submit, **ev})
    out["status_line"] = repr(group)
    group.stop()
    return out


def warm_vs_cold(cfg: dict[str, Any], args: Any, timing: Path, gpu: bool) -> dict[str, Any]:
    """Cold (a %%raytrain run of the training cell), the warm cells, cold again if time allows: one invocation."""
    import statistics

    t_start = time.time()
    cold = [] if args.warm_first else [one_run("raynb", cfg, args, {}, timing, gpu)]
    warm = run_warm(cfg, args.workers, args.warm_train_cells)
    if not cold or time.time() - t_start < args.second_cold_within_s:
        cold.append(one_run("raynb", cfg, args, {}, timing, gpu))
    later = warm["train_cells"][1:]  # after the first training cell (which compiles)
    cold_tps = statistics.median(c["tokens_per_s"] for c in cold)
    warm_tps = statistics.median(c["tokens_per_s"] for c in later)
    return {
        "label": args.label,
        "what": "the Qwen notebook's training cell: cold (%%raytrain: a new Ray Train run) vs the notebook's warm "
        "cells on one warm group (build once, train, evaluate, train ...), one invocation",
        "workers": args.workers,
        "order": "warm group first, then cold" if args.warm_first else "cold first, then the warm group",
        "config": {k: cfg[k] for k in ("seq_len", "batch", "steps", "warmup", "compile", "tiny")},
        "cold": cold,
        "warm": warm,
        "cold_call_to_first_step_s": [c["call_to_first_step_s"] for c in cold],
        "warm_later_cells_submit_to_first_step_s": [c["submit_to_first_step_s"] for c in later],
        "tokens_per_s_median": {"cold": cold_tps, "warm_later_cells": warm_tps},
        "ratio_warm_over_cold_tokens_per_s": warm_tps / cold_tps,
        "target": {"warm_later_cell_first_step_s_max": 3.0, "min_ratio_warm_over_cold": 0.98},
    }


def run_torchrun(cfg: dict[str, Any], workers: int, env: dict[str, str]) -> dict[str, Any]:
    helpers, body = notebook_cells()
    script = (
        helpers + "\n\n\ndef train_loop_per_worker(config):\n" + textwrap.indent(body, "    ") + "\n\n"
        "if __name__ == '__main__':\n"
        "    import json, sys\n    import torch.distributed as dist\n"
        "    cfg = json.loads(sys.argv[1])\n"
        "    dist.init_process_group('nccl' if cfg['gpu'] else 'gloo')\n"
        "    train_loop_per_worker(cfg)\n    dist.destroy_process_group()\n"
    )
    path = Path(tempfile.mkdtemp()) / "qwen_torchrun.py"
    path.write_text(script)
    t0 = time.time()
    full_env = {**os.environ, "NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", **env}
    subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc-per-node={workers}",
            str(path),
            json.dumps(cfg),
        ],
        env=full_env,
        check=True,
    )
    return {"call_to_end_s": time.time() - t0}


def one_run(mode: str, cfg: dict[str, Any], args: Any, env: dict[str, str], timing: Path, gpu: bool) -> dict[str, Any]:
    import torch

    timing.unlink(missing_ok=True)
    extra = run_raynb(cfg, args.workers, env) if mode == "raynb" else run_torchrun(cfg, args.workers, env)
    t = json.loads(timing.read_text())
    out: dict[str, Any] = {
        "label": args.label,
        "mode": mode,
        "workers": args.workers,
        "env": env,
        "config": {k: cfg[k] for k in ("seq_len", "batch", "steps", "warmup", "compile", "tiny")},
        **t,
        **extra,
    }
    if gpu:
        name = torch.cuda.get_device_name(0)
        flops_per_token = transformer_flops_per_token(t["params"], 28, 1536, args.seq)  # Qwen2.5-1.5B: L, d
        per_gpu = t["tokens_per_s"] / args.workers
        mm = matmul_tflops()
        out.update(
            gpu_name=name,
            tokens_per_s_per_gpu=per_gpu,
            flops_per_token=flops_per_token,
            mfu_vs_dense_peak=mfu(per_gpu, flops_per_token, dense_bf16_peak(name)),
            measured_matmul_tflops=mm,
            mfu_vs_measured_matmul=per_gpu * flops_per_token / (mm * 1e12),
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["raynb", "torchrun", "both", "warm"], required=True)
    ap.add_argument("--warm-train-cells", type=int, default=3, help="with --mode warm: training cells on the group")
    ap.add_argument(
        "--warm-first",
        action="store_true",
        help="with --mode warm: the warm group before the cold run (its first training cell then pays a full compile)",
    )
    ap.add_argument(
        "--second-cold-within-s", type=float, default=420, help="with --mode warm: a second cold run if time allows"
    )
    ap.add_argument("--rounds", type=int, default=3, help="with --mode both: rounds of (raynb, torchrun)")
    ap.add_argument("--out", help="also write the JSON record to this file (bench/results/...)")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--tiny", action="store_true", help="a tiny Qwen2 on CPU (to check the bench itself)")
    ap.add_argument("--env", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--label", default="")
    args = ap.parse_args()
    env = dict(e.split("=", 1) for e in args.env)
    import torch

    gpu = torch.cuda.is_available() and not args.tiny
    timing = Path(tempfile.mkdtemp()) / "timing.json"
    cfg = {
        "gpu": gpu,
        "model_id": "Qwen/Qwen2.5-1.5B",
        "pretrained": False,
        "tiny": args.tiny,
        "dataset": None,
        "seq_len": args.seq,
        "batch": args.batch,
        "steps": args.steps,
        "warmup": args.warmup,
        "lr": 2e-5,
        "compile": not args.no_compile,
        "output_dir": None,
        "timing_file": str(timing),
    }
    if args.mode == "warm":
        out = warm_vs_cold(cfg, args, timing, gpu)
    elif args.mode != "both":
        out = one_run(args.mode, cfg, args, env, timing, gpu)
    else:
        import statistics

        runs: list[dict[str, Any]] = []
        for i in range(args.rounds):
            for mode in ("raynb", "torchrun") if i % 2 == 0 else ("torchrun", "raynb"):
                runs.append({"round": i, **one_run(mode, cfg, args, env, timing, gpu)})
        med = {m: statistics.median(r["tokens_per_s"] for r in runs if r["mode"] == m) for m in ("raynb", "torchrun")}
        out = {
            "label": args.label,
            "what": "the Qwen notebook's training cell under raynb (%%raytrain's path) and bare torchrun, alternating, "
            "order flipped every round, one invocation",
            "workers": args.workers,
            "rounds": args.rounds,
            "runs": runs,
            "tokens_per_s_median": med,
            "ratio_raynb_over_torchrun": med["raynb"] / med["torchrun"],
            "target_min_ratio": 0.98,
        }
    out["machine"] = machine()
    text = json.dumps(out)
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    print("RESULT " + text)


if __name__ == "__main__":
    main()
