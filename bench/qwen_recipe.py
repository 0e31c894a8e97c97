"""The Qwen notebook's training recipe on one GPU, bare PyTorch (no Ray, no raynb run): its loss head as
Transformers computes it (full [batch, seq, vocab] logits) against Liger's fused linear cross-entropy, in one
invocation; prints JSON.

  python bench/qwen_recipe.py [--notebook PATH] [--steps 30] [--out bench/results/NAME.json]

Each variant runs in a process of its own (Liger patches Transformers' Qwen2 module), through the notebook's own
helpers (``build_training`` / ``train_steps``, tag "helpers") with ``config["loss_head"]`` set; the order brackets the
new recipe between two runs of the old one (default ``transformers,liger,transformers``; ``--order`` may add
``liger-kernels``: Liger's RMSNorm, SwiGLU and RoPE too), so a drift of the machine shows. With a Liger head the
decoder stack is compiled and the loss head runs as Liger's own Triton kernels (compiling through them crashed:
an illegal memory access in inductor's autotuning, torch 2.11). Same config as the notebook on one H200: random
weights from Qwen2.5-1.5B's config, bf16, torch.compile, batch 8 x 2048. ``same_batch_loss``: the loss of one batch under each head, same weights, no step
taken. MFU = tokens/s x (6 N + 12 L d s) / the GPU's dense bf16 peak, raynb's own arithmetic
(``raynb/_shared/flops.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from machine import emit  # noqa: E402 - bench/machine.py, beside this script

from raynb._shared.flops import dense_bf16_peak, flops_per_token, mfu  # noqa: E402 - pure arithmetic, no Ray needed

CONFIG = {
    "gpu": True,
    "model_id": "Qwen/Qwen2.5-1.5B",
    "pretrained": False,
    "tiny": False,
    "dataset": None,
    "seq_len": 2048,
    "batch": 8,
    "warmup": 10,
    "lr": 1e-5,
    "compile": True,
}


def helpers(notebook: Path) -> dict[str, Any]:
    nb = json.loads(notebook.read_text())
    src = "\n\n".join("".join(c["source"]) for c in nb["cells"] if "helpers" in c.get("metadata", {}).get("tags", []))
    ns: dict[str, Any] = {"__name__": "__main__"}
    exec(compile(src, "<qwen-notebook-helpers>", "exec"), ns)
    return ns


def _dist() -> None:
    import torch.distributed as dist

    if not dist.is_initialized():
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29517")
        dist.init_process_group("nccl", rank=0, world_size=1)


def one(variant: str, notebook: Path, steps: int) -> dict[str, Any]:
    import torch

    _dist()
    ns = helpers(notebook)
    # "liger@16": that head at batch 16; "+flag"s anywhere: "+autotune" (the child's inductor settings, see child()),
    # "+cudnn" (attention through cuDNN's fused kernel instead of FlashAttention-2, SDPA's default)
    flags = set(re.findall(r"\+(\w+)", variant))
    head, _, batch = re.sub(r"\+\w+", "", variant).partition("@")
    if "cudnn" in flags:
        torch.backends.cuda.enable_flash_sdp(False)
        torch.backends.cuda.enable_mem_efficient_sdp(False)
        torch.backends.cuda.enable_cudnn_sdp(True)
    cfg = {**CONFIG, "loss_head": head, "steps": steps, **({"batch": int(batch)} if batch else {})}
    t = ns["build_training"](cfg)
    timing = ns["train_steps"](t, cfg, steps)
    name = torch.cuda.get_device_name()
    return {
        "variant": variant,
        "batch": cfg["batch"],
        "tokens_per_s": timing["tokens_per_s"],
        "mfu": mfu(timing["tokens_per_s"], flops_per_token(t.model, cfg["seq_len"]), dense_bf16_peak(name)),
        "peak_mem_gb": timing["peak_mem_gb"],
        "first_step_s": timing["first_step_s"],
        "steps_timed": steps - cfg["warmup"],
        "gpu": name,
        "sdpa_backends": {
            k: getattr(torch.backends.cuda, f"{k}_sdp_enabled")() for k in ("flash", "mem_efficient", "cudnn")
        },
    }


def same_batch_loss(notebook: Path) -> dict[str, Any]:
    """One batch, the same random weights, no step: the loss under each head (uncompiled)."""
    import torch

    _dist()
    ns = helpers(notebook)
    out = {}
    for variant in ("transformers", "liger", "liger-kernels"):  # each patches more: transformers' must come first
        cfg = {**CONFIG, "loss_head": variant, "compile": False, "steps": 1}
        t = ns["build_training"](cfg)
        ids = next(t.data).to(t.device)
        with torch.no_grad():
            out[variant] = t.model(input_ids=ids, labels=ids).loss.float().item()
        del t
        torch.cuda.empty_cache()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--notebook", default=str(ROOT / "notebooks" / "qwen25_finetune_eks.ipynb"))
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--order", default="transformers,liger,transformers", help="variants, in the order run")
    ap.add_argument("--no-loss", action="store_true", help="skip the same-batch loss comparison")
    ap.add_argument("--out")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    nb = Path(args.notebook)
    if args.child:
        res = same_batch_loss(nb) if args.child == "loss" else one(args.child, nb, args.steps)
        print("RESULT " + json.dumps(res), flush=True)
        return

    def child(what: str) -> dict[str, Any]:
        t0 = time.time()
        # "+autotune": inductor autotunes its matmuls (Triton templates against cuBLAS) and tunes kernel launch
        # parameters; settings of the process, not of the recipe's code
        tune = {"TORCHINDUCTOR_MAX_AUTOTUNE_GEMM": "1", "TORCHINDUCTOR_COORDINATE_DESCENT_TUNING": "1"}
        p = subprocess.run(
            [sys.executable, __file__, "--notebook", str(nb), "--steps", str(args.steps), "--child", what],
            capture_output=True,
            text=True,
            env={**os.environ, **(tune if "+autotune" in what else {})},
        )
        lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
        if not lines:  # recorded, not fatal: the other variants still run
            sys.stderr.write(p.stdout[-3000:] + p.stderr[-6000:])
            return {"variant": what, "error": (p.stderr.strip().splitlines() or ["?"])[-1][:500], "tokens_per_s": None}
        print(f"{what}: {lines[0][7:]} ({time.time() - t0:.0f} s)", file=sys.stderr, flush=True)
        return json.loads(lines[0][7:])

    runs = [child(v) for v in args.order.split(",")]
    base_variant = runs[0]["variant"]  # the ratios are against the first variant (and its repeats)
    base = [r["tokens_per_s"] for r in runs if r["variant"] == base_variant and r["tokens_per_s"]]
    out = {
        "config": {**CONFIG, "steps": args.steps},
        "order": [r["variant"] for r in runs],
        "runs": runs,
        "same_batch_loss": child("loss") if not args.no_loss else None,
        "tokens_per_s_over_first_variant_mean": {
            r["variant"]: r["tokens_per_s"] / (sum(base) / len(base))
            for r in runs
            if r["variant"] != base_variant and r["tokens_per_s"] and base
        },
    }
    emit(out, args.out)


if __name__ == "__main__":
    main()
