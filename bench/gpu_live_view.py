"""The live view's GPU strip and MFU from a real run: the Qwen notebook's recipe (its own helpers) through
``raynb.train`` on the embedded cluster, one GPU worker; writes the finished run's view (the HTML a notebook shows)
and a JSON record of what the GPU columns of ``run.metrics`` held.

  RAYNB_LOCAL_DASHBOARD=0 python bench/gpu_live_view.py --out-dir DIR [--steps 120]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from machine import emit  # noqa: E402
from qwen_recipe import CONFIG, helpers  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--notebook", default=str(ROOT / "notebooks" / "qwen25_finetune_eks.ipynb"))
    ap.add_argument("--steps", type=int, default=120)
    ap.add_argument("--out-dir", required=True)
    args = ap.parse_args()
    import raynb
    from raynb.display import render_bundle

    ns = helpers(Path(args.notebook))
    build, train_steps = ns["build_training"], ns["train_steps"]
    cfg = {**CONFIG, "loss_head": "transformers", "steps": args.steps}

    def loop(config: dict) -> None:
        t = build(config)
        train_steps(t, config, config["steps"])

    raynb.up(local=True, num_gpus=1)
    run = raynb.train(loop, workers=1, gpu=True, config=cfg, name="qwen-gpu-view", display=False)
    out = Path(args.out_dir)
    (out / "gpu_live_view.html").write_text(render_bundle(run)["text/html"])
    df = run.metrics
    gpu = df[df["kind"] == "gpu"] if "kind" in df else df.iloc[0:0]
    emit(
        {
            "bench": "gpu_live_view",
            "status": run.status,
            "steps": int(run.step),
            "gpu_samples": len(gpu),
            "gpu_util_median": float(gpu["gpu_util"].median()) if len(gpu) else None,
            "gpu_mem_gb_max": float(gpu["gpu_mem_gb"].max()) if len(gpu) else None,
            "gpu_power_w_median": float(gpu["gpu_power_w"].median()) if len(gpu) else None,
            "gpu_name": str(gpu["gpu_name"].iloc[-1]) if len(gpu) else None,
            "text_view": render_bundle(run)["text/plain"],
            "tokens_per_s_steady": run.rate("tokens", skip_steps=cfg["warmup"]),
        },
        str(out / "gpu_live_view.json"),
    )
    raynb.down()


if __name__ == "__main__":
    main()
