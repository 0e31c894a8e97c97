"""In any process: model FLOPs utilisation (MFU): FLOPs a training step needs per token, and the GPU's dense bf16 peak.

Pure arithmetic, importable anywhere (kernel, workers): nothing here touches a GPU.

    F = 6 N + 12 L d s   per token, forward and backward

(PaLM, Chowdhery et al. 2022, appendix B): ``N`` parameters, each a multiply-add forward and two backward (the LM
head included: with tied embeddings the matrix is counted once, and it is a real matmul); ``12 L d s`` the attention
scores and their weighted sum over ``s`` positions in ``L`` layers of width ``d``, counted without the causal mask's
saving, as PaLM does. MFU = tokens/s per GPU x F / peak. Recomputation (activation checkpointing) is work the
formula does not count: MFU, not hardware FLOPs utilisation.
"""

from __future__ import annotations

from typing import Any

__all__ = ["flops_per_token", "transformer_flops_per_token", "dense_bf16_peak", "mfu", "DENSE_BF16_PEAK"]

#: Dense (no sparsity) bf16 tensor-core peak, FLOP/s, by a substring of the device name NVML / CUDA reports.
#: Sources: NVIDIA H100 datasheet (SXM 989.4 TFLOPS, PCIe 756 TFLOPS: the sheet's sparsity figures halved), H200
#: datasheet (989.4, same SXM tensor cores), A100 datasheet (312), L4 datasheet (121, half of 242 with sparsity),
#: L40S datasheet (362.05, half of 733), L40 datasheet (181.05, half of 362), A10G (AWS g5; NVIDIA A10 datasheet
#: 125). Checked 2026-12-03. Longer names first: "H100 PCIe" must win over "H100", "L40S" and "L40" over "L4".
DENSE_BF16_PEAK: dict[str, float] = {
    "H100 PCIe": 756e12,
    "H100": 989.4e12,
    "H200": 989.4e12,
    "A100": 312e12,
    "L40S": 362.05e12,
    "L40": 181.05e12,
    "L4": 121e12,
    "A10G": 125e12,
}


def flops_per_token(model: Any, seq_len: int) -> float:
    """``6 N + 12 L d s`` for a PyTorch module (``N``: its parameters, each counted once) or a Transformers model
    (``L``, ``d`` from its config: ``num_hidden_layers``, ``hidden_size``); a plain module without such a config
    counts ``6 N`` only."""
    n = sum(p.numel() for p in model.parameters())  # parameters() yields a tied weight once
    cfg = getattr(model, "config", None)
    return transformer_flops_per_token(n, getattr(cfg, "num_hidden_layers", 0), getattr(cfg, "hidden_size", 0), seq_len)


def transformer_flops_per_token(params: int, layers: int, width: int, seq_len: int) -> float:
    """``6 N + 12 L d s`` from the numbers alone (where the model itself is in another process)."""
    return 6.0 * params + 12.0 * layers * width * seq_len


def dense_bf16_peak(device_name: str) -> float | None:
    """The table's peak for this device name (e.g. ``NVIDIA H200``), or None for a device it does not know."""
    for key, peak in DENSE_BF16_PEAK.items():
        if key.lower() in device_name.lower():
            return peak
    return None


def mfu(tokens_per_s_per_gpu: float, flops_per_token: float, peak: float | None) -> float | None:
    """The fraction of ``peak`` the run's useful FLOPs reach; None without a peak."""
    if not peak or tokens_per_s_per_gpu <= 0:
        return None
    return tokens_per_s_per_gpu * flops_per_token / peak
