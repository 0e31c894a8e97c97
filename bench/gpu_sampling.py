"""What raynb's GPU sampling costs a training step on one GPU: the Qwen notebook's recipe through its own helpers
(``build_training`` / ``train_steps``, bare PyTorch, no Ray), one compiled model, windows of steps alternating
without and with a thread doing what raynb's reporter thread does (``raynb/_remote/gpu_sampler.py``: checked every flush
interval of 0.1 s, an NVML sample once a second); prints JSON with each pair's ratio.

  python bench/gpu_sampling.py [--pairs 4] [--steps 80] [--out bench/results/NAME.json]

Pairs run in ABBA order (off/on, on/off, ...) so a drift of the GPU's clocks falls on both sides.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from machine import emit  # noqa: E402 - bench/machine.py, beside this script
from qwen_recipe import CONFIG, _dist, helpers  # noqa: E402 - the same recipe and set-up

from raynb._remote.gpu_sampler import GpuSampler  # noqa: E402
from raynb._shared.flops import dense_bf16_peak, flops_per_token, mfu  # noqa: E402


class Sampling:
    """The reporter thread's GPU part: ``due`` every 0.1 s, a sample when it is."""

    def __init__(self) -> None:
        import time

        self.sampler = GpuSampler(0)
        self.samples: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._clock = time.monotonic
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.wait(0.1):
            if self.sampler.due(self._clock()) and (s := self.sampler.sample()):
                self.samples.append(s)

    def __enter__(self) -> Sampling:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def main() -> None:
    import os

    import torch

    ap = argparse.ArgumentParser()
    ap.add_argument("--notebook", default=str(ROOT / "notebooks" / "qwen25_finetune_eks.ipynb"))
    ap.add_argument("--pairs", type=int, default=4)
    ap.add_argument("--steps", type=int, default=80, help="steps per window (the first `warmup` are not timed)")
    ap.add_argument("--out")
    args = ap.parse_args()
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "0")  # as Ray Train sets it for a worker
    _dist()
    ns = helpers(Path(args.notebook))
    cfg = {**CONFIG, "loss_head": "transformers", "steps": args.steps}
    t = ns["build_training"](cfg)
    ns["train_steps"](t, cfg, cfg["warmup"] + 5)  # compile and warm up once
    name = torch.cuda.get_device_name()
    fpt = flops_per_token(t.model, cfg["seq_len"])
    windows: list[dict[str, Any]] = []
    last_sample: dict[str, Any] | None = None
    for i in range(2 * args.pairs):
        on = (i % 2 == 1) == (i // 2 % 2 == 0)  # ABBA: off on, on off, off on, ...
        if on:
            with Sampling() as s:
                timing = ns["train_steps"](t, cfg, args.steps)
            samples = s.samples
        else:
            timing, samples = ns["train_steps"](t, cfg, args.steps), []
        windows.append({"sampling": on, "tokens_per_s": timing["tokens_per_s"], "samples": len(samples)})
        if samples:
            last_sample = samples[-1]
    pairs = [
        {"off": a["tokens_per_s"] if not a["sampling"] else b["tokens_per_s"],
         "on": a["tokens_per_s"] if a["sampling"] else b["tokens_per_s"]}
        for a, b in zip(windows[::2], windows[1::2], strict=True)
    ]  # fmt: skip
    ratios = [p["on"] / p["off"] for p in pairs]
    off = statistics.median(p["off"] for p in pairs)
    emit(
        {
            "bench": "gpu_sampling",
            "what": "tokens/s of the Qwen notebook's recipe (bf16, compiled, batch 8 x 2048) with raynb's NVML "
            "sampling thread on vs off, one process, windows in ABBA order",
            "gpu": name,
            "steps_per_window": args.steps,
            "timed_steps_per_window": args.steps - cfg["warmup"],
            "windows": windows,
            "pairs": pairs,
            "on_over_off": ratios,
            "on_over_off_median": statistics.median(ratios),
            "spread": [min(ratios), max(ratios)],
            "mfu_off_median": mfu(off, fpt, dense_bf16_peak(name)),
            "a_sample": last_sample,
        },
        args.out,
    )


if __name__ == "__main__":
    main()
