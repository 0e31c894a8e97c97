"""In each Train worker: each training worker's GPU, read through NVML about once a second: utilisation, memory used and
total, power.

Worker side: the standard library and NVML's Python bindings only: nvidia-ml-py (``pynvml``) where installed, else
the copy Ray itself ships and counts GPUs with (``ray._private.thirdparty.pynvml``), so every install that has Ray
samples. Without NVML (no driver, a CPU worker) nothing is sampled and nothing fails; on a GPU worker the reason is
kept (``why_off``) and the view says it once. The samples travel with the rank's metrics as records of their own
(``kind: "gpu"``), so ``run.metrics`` has the columns and the live view a per-rank strip.
"""

from __future__ import annotations

import os
from typing import Any

__all__ = ["GpuSampler", "GPU_KEYS", "nvml_module"]

#: the columns a sample adds to run.metrics
GPU_KEYS = ("gpu_util", "gpu_mem_gb", "gpu_mem_total_gb", "gpu_power_w", "gpu_name")


def _visible(local_rank: int) -> str | None:
    """The NVML index or UUID of this worker's GPU: Ray Train shows a node's workers all of their GPUs
    (CUDA_VISIBLE_DEVICES) and each takes its local rank's."""
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    if not visible:
        return None
    return visible[local_rank] if local_rank < len(visible) else visible[0]


def nvml_module() -> Any:
    """NVML's Python bindings: nvidia-ml-py where the user installed it (newer), else Ray's vendored copy."""
    import importlib

    try:
        return importlib.import_module("pynvml")
    except ImportError:
        return importlib.import_module("ray._private.thirdparty.pynvml")


class GpuSampler:
    """One GPU, one ``sample()`` per ``period_s`` (the reporter's flush thread calls ``due`` and ``sample``)."""

    def __init__(self, local_rank: int, period_s: float = 1.0, nvml: Any = None) -> None:
        self.period_s = period_s
        self._next = 0.0
        self._nvml: Any = None
        self._handle: Any = None
        self.name: str | None = None
        #: on a GPU worker where NVML cannot be read: why (the live view says it, instead of showing no strip)
        self.why_off: str | None = None
        device = _visible(local_rank)
        if device is None:
            return
        try:
            nvml = nvml if nvml is not None else nvml_module()
            nvml.nvmlInit()
            if device.startswith(("GPU-", "MIG-")):
                handle = nvml.nvmlDeviceGetHandleByUUID(device)
            else:
                handle = nvml.nvmlDeviceGetHandleByIndex(int(device))
            name = nvml.nvmlDeviceGetName(handle)
        except Exception as e:  # noqa: BLE001 -- no NVML here: no samples, never an error
            self.why_off = f"NVML could not read GPU {device}: {type(e).__name__}: {e}"[:300]
            return
        self._nvml, self._handle = nvml, handle
        self.name = name.decode() if isinstance(name, bytes) else str(name)

    @property
    def available(self) -> bool:
        return self._handle is not None

    def due(self, now: float) -> bool:
        if not self.available or now < self._next:
            return False
        self._next = now + self.period_s
        return True

    def sample(self) -> dict[str, Any] | None:
        nvml, h = self._nvml, self._handle
        try:
            util = nvml.nvmlDeviceGetUtilizationRates(h).gpu
            mem = nvml.nvmlDeviceGetMemoryInfo(h)
        except Exception:  # noqa: BLE001 -- a GPU that went away mid-run: stop sampling
            self._handle = None
            return None
        try:
            power: float | None = nvml.nvmlDeviceGetPowerUsage(h) / 1000.0
        except Exception:  # noqa: BLE001 -- not every GPU reports power (some vGPUs)
            power = None
        return {
            "kind": "gpu",
            "gpu_util": float(util),
            "gpu_mem_gb": mem.used / 1e9,
            "gpu_mem_total_gb": mem.total / 1e9,
            "gpu_power_w": power,
            "gpu_name": self.name,
        }
