"""The GPU strip, the idle-rank note and live MFU, from records shaped as raynb/_remote/gpu_sampler.py writes them (the
sampler itself reads NVML on the lent GPU: bench/gpu_sampling.py); no NVML, no strip."""

from __future__ import annotations

import re
import sys
from types import SimpleNamespace

from raynb._remote.gpu_sampler import GpuSampler, nvml_module
from raynb._shared.picture import Aggregate
from raynb.display import render_bundle
from tests.unit.fake_run import fake_run

SEQ = 2048
FPT = 6 * 1_543_714_304 + 12 * 28 * 1536 * SEQ  # Qwen2.5-1.5B at 2048 (tests/unit/test_flops.py)


def _run(records: list[dict], events: list[dict] | None = None, workers: int = 2) -> SimpleNamespace:
    return fake_run(records, name="gpu-run", events=events or [], workers=workers, gpu=True)


def _steps(ranks: int, steps: int, tokens: int = 16384, dt: float = 0.35) -> list[dict]:
    return [
        {"rank": r, "step": s, "time": 1000.0 + s * dt, "loss": 5.0 / s, "tokens": tokens, "flops_per_token": FPT}
        for s in range(1, steps + 1)
        for r in range(ranks)
    ]


def _gpu(rank: int, t: float, util: float, name: str = "NVIDIA H200") -> dict:
    return {
        "kind": "gpu",
        "rank": rank,
        "step": 1,
        "time": t,
        "gpu_util": util,
        "gpu_mem_gb": 61.2,
        "gpu_mem_total_gb": 143.8,
        "gpu_power_w": 690.0,
        "gpu_name": name,
    }


def test_no_nvml_no_samples_and_no_strip(monkeypatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")  # a GPU is named, but this machine has no NVML
    assert not GpuSampler(0).available and GpuSampler(0).sample is not None
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert not GpuSampler(0).available  # a CPU worker
    b = render_bundle(_run(_steps(2, 40)))
    assert (
        "raynb-gpus" not in b["text/html"]
        and "MFU" not in b["text/html"]
        and not re.search(r"GPU \d+%", b["text/plain"])
    )


def test_nvml_comes_with_ray_when_nvidia_ml_py_is_not_installed(monkeypatch) -> None:
    """pyproject does not pull nvidia-ml-py in; Ray ships the same bindings (it counts GPUs with them)."""
    monkeypatch.setitem(sys.modules, "pynvml", None)  # as on an install without nvidia-ml-py
    nvml = nvml_module()
    assert nvml.__name__ == "ray._private.thirdparty.pynvml" and callable(nvml.nvmlDeviceGetUtilizationRates)


def test_a_gpu_worker_without_nvml_says_why_once_in_the_view(monkeypatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")  # a GPU is named, but this machine has no NVIDIA driver
    why = GpuSampler(0).why_off
    assert why and why.startswith("NVML could not read GPU 0: NVMLError"), why
    events = [{"kind": "worker_started", "rank": r, "gpu": "0", "gpu_sampling_off": why} for r in (1, 0)]
    html = render_bundle(_run(_steps(2, 40), events))["text/html"]
    assert html.count("GPU sampling is off") == 1 and "on rank 0, 1: NVML could not read GPU 0" in html, html
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert GpuSampler(0).why_off is None  # a CPU worker: nothing to say


def test_strip_per_rank_and_mfu_beside_throughput() -> None:
    records = _steps(1, 60) + [_gpu(0, 1000.0 + t, 97.0) for t in range(21)]
    agg = Aggregate().update(records)
    assert agg.records == 60  # samples are not steps
    rate = agg.counted_rate()
    value, name = agg.mfu(rate)
    assert name == "NVIDIA H200" and abs(value - rate * FPT / 989.4e12) < 1e-12
    b = render_bundle(_run(records, workers=1))
    html = b["text/html"]
    assert 'class="raynb-gpus"' in html and 'data-util="97"' in html and "61/144 GB · 690 W" in html
    assert "MFU " in html and "of NVIDIA H200 dense bf16" in html and "GPU 97%" in b["text/plain"]


def test_an_idle_rank_is_named_after_30_s_while_the_others_are_busy() -> None:
    records = _steps(4, 20)
    for t in range(0, 41, 2):
        records += [_gpu(0, 1000.0 + t, 95.0), _gpu(1, 1000.0 + t, 96.0), _gpu(2, 1000.0 + t, 93.0)]
        records.append(_gpu(3, 1000.0 + t, 12.0))
    agg = Aggregate().update(records)
    assert agg.idle_gpus() == [(3, 12.0)]
    assert "rank 3: GPU 12 % — input-bound?" in render_bundle(_run(records, workers=4))["text/html"]
    short = Aggregate().update([r for r in records if r.get("kind") != "gpu" or r["time"] <= 1020.0])
    assert short.idle_gpus() == []  # 20 s under: not yet
    everyone = Aggregate().update([{**r, "gpu_util": 10.0} if r.get("kind") == "gpu" else r for r in records])
    assert everyone.idle_gpus() == []  # all low: the run is slow, not one rank


def test_beyond_eight_ranks_one_cell_per_node() -> None:
    records = _steps(16, 5)
    records += [_gpu(r, 1010.0, 90.0 + r % 8) for r in range(16)]
    events = [{"kind": "worker_started", "rank": r, "node": f"node-{r // 8}"} for r in range(16)]
    html = render_bundle(_run(records, events, workers=16))["text/html"]
    assert html.count('class="raynb-gpu"') == 2 and "8 GPUs, min 90%" in html and "node-1" in html
