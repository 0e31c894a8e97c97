"""What a benchmark ran on, recorded by the benchmark itself (a record in bench/results/ is what a script wrote):
cores, memory, CPU model, load when it started, GPUs, and the versions that matter; and ``emit``, which stamps a
record with it, prints it and writes it where the benchmark was told to."""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

__all__ = ["machine", "emit"]

#: the load when the benchmark started (this module is imported at its start): a busy machine shows here
_LOAD_AT_START = os.getloadavg() if hasattr(os, "getloadavg") else None


def _version(dist: str) -> str | None:
    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def _cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo") as f:
            return next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), None)
    except OSError:
        return platform.processor() or None


def _memory_gib() -> float | None:
    try:
        with open("/proc/meminfo") as f:
            kb = next(int(ln.split()[1]) for ln in f if ln.startswith("MemTotal:"))
        return round(kb / 2**20, 1)
    except (OSError, StopIteration, ValueError):
        return None


def _gpus() -> list[str]:
    if shutil.which("nvidia-smi") is None:
        return []
    p = subprocess.run(
        ["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    return [ln.strip() for ln in p.stdout.splitlines() if ln.strip()] if p.returncode == 0 else []


def machine() -> dict[str, Any]:
    """The machine and software of this benchmark run, as the run saw them."""
    load = _LOAD_AT_START
    return {
        "cores": os.cpu_count(),
        "memory_gib": _memory_gib(),
        "cpu": _cpu_model(),
        "load_avg_1m_at_start": round(load[0], 2) if load else None,
        "gpus": _gpus(),
        "python": platform.python_version(),
        "ray": _version("ray"),
        "torch": _version("torch"),
        "platform": f"{sys.platform}-{platform.machine()}",
    }


def emit(record: dict[str, Any], path: str | None = None) -> None:
    """Add ``machine`` to the record, print it as JSON and, given ``path``, write those same bytes there."""
    record["machine"] = machine()
    text = json.dumps(record, indent=1)
    print(text)
    if path:
        Path(path).write_text(text + "\n")


if __name__ == "__main__":
    import json

    print(json.dumps(machine(), indent=1))
