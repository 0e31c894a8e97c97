"""Speed of the Qwen2.5-1.5B notebook's training cell: under raynb (%%raytrain's path) or bare torchrun.

  python bench/qwen_speed.py --mode both --rounds 3 --workers 1 --out bench/results/NAME.json   # the comparison
  python bench/qwen_speed.py --mode raynb --workers 2 --env NCCL_P2P_DISABLE=1 --env NCCL_SHM_DISABLE=1  # one run

``--mode both`` runs raynb and bare torchrun in the same invocation, alternating, the order flipped every round, and
prints the ratio of the medians (the baseline measured in the same run).

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
NOTEBOOK = ROOT / "notebooks" / "qwen25_finetune_eks.ipynb"
DENSE_BF16_PEAK = {"H200": 989.4e12, "H100": 989.4e12, "L4": 121e12}


def notebook_cells() -> tuple[str, str]:
    """(helpers source, train cell body without its %%raytrain line)."""
    nb = json.loads(NOTEBOOK.read_text())
    helpers, body = [], None
    for c in nb["cells"]:
        tags = c.get("metadata", {}).get("tags", [])
        src = "".join(c["source"])
        if "helpers" in tags:
            helpers.append(src)
        if "train" in tags:
            body = src.split("\n", 1)[1]
    assert body is not None, "no cell tagged 'train' in the notebook"
    return "\n\n".join(helpers), body


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
    from raynb._cell import compile_cell

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
    return {
        "nccl": {k: nccl.get(k) for k in ("intra_node", "inter_node", "network", "severity", "fallback")},
        "call_to_end_s": time.time() - t0,
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
        peak = next((v for k, v in DENSE_BF16_PEAK.items() if k in name), None)
        layers, hidden = 28, 1536
        flops_per_token = 6 * t["params"] + 12 * layers * hidden * args.seq
        per_gpu = t["tokens_per_s"] / args.workers
        mm = matmul_tflops()
        out.update(
            gpu_name=name,
            tokens_per_s_per_gpu=per_gpu,
            flops_per_token=flops_per_token,
            mfu_vs_dense_peak=per_gpu * flops_per_token / peak if peak else None,
            measured_matmul_tflops=mm,
            mfu_vs_measured_matmul=per_gpu * flops_per_token / (mm * 1e12),
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["raynb", "torchrun", "both"], required=True)
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
    if args.mode != "both":
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
    text = json.dumps(out)
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    print("RESULT " + text)


if __name__ == "__main__":
    main()
