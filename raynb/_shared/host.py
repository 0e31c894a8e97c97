"""In any process: this machine's side of the embedded head's protocol, shared by the kernel, the head's supervisor and
the launcher actor: the leases a run keeps on the head (files in the head's state dir), and the GPUs this host has.
Standard library only."""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from pathlib import Path

__all__ = ["lease", "leases_active", "count_gpus", "cpus_pinned", "usable_cpus"]


def lease(leases_dir: str, key: str, seconds: float) -> None:
    """Keep the head up for ``seconds`` more on behalf of ``key`` (a run): a run's launcher renews its lease while
    the run goes, so a detached run outlives the kernel that started it. Called from the launcher actor."""
    d = Path(leases_dir)
    d.mkdir(parents=True, exist_ok=True)
    tmp = d / f".{key}.tmp"
    tmp.write_text(str(time.time() + seconds))
    tmp.replace(d / key)


def leases_active(d: Path) -> list[str]:
    now, out = time.time(), []
    for p in (d / "leases").glob("[!.]*"):
        try:
            if float(p.read_text()) > now:
                out.append(p.name)
            else:
                p.unlink()
        except (OSError, ValueError):
            pass
    return out


def count_gpus(*, respect_visible: bool = True) -> int:
    """GPUs this process may use (``CUDA_VISIBLE_DEVICES`` first), or that the machine has (``respect_visible=False``:
    what ``nvidia-smi -L`` lists)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if respect_visible and visible is not None:
        return len([v for v in visible.split(",") if v.strip() and v.strip() != "-1"])
    with contextlib.suppress(Exception):
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=5)
        if out.returncode == 0:
            return len([ln for ln in out.stdout.splitlines() if ln.startswith("GPU ")])
    return 0


def usable_cpus() -> float:
    """The CPUs this process may use: the smaller of its affinity and its cgroup's CPU quota."""
    quota = _cgroup_cpu_quota()
    allowed = len(os.sched_getaffinity(0))
    return min(allowed, quota) if quota is not None else allowed


def cpus_pinned() -> tuple[int, int] | None:
    """``(usable, machine)`` where this process may run on fewer CPUs than the machine has (its affinity: ``taskset``,
    a scheduler's cpuset), else None. Ray reads a cgroup's quota and cpuset, not a process's affinity; ``usable`` is
    the smaller of the affinity and the cgroup's CPU quota, so it never offers more than Ray would."""
    machine = os.cpu_count() or 1
    if len(os.sched_getaffinity(0)) >= machine:
        return None
    return max(1, int(usable_cpus())), machine


def _cgroup_cpu_quota() -> float | None:
    """This process's cgroup CPU quota in CPUs (cgroup v2's cpu.max, else v1's cfs quota), None where unlimited."""
    with contextlib.suppress(OSError, ValueError):
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()
        return None if quota == "max" else int(quota) / int(period)
    with contextlib.suppress(OSError, ValueError):
        v1 = Path("/sys/fs/cgroup/cpu")
        quota_us = int((v1 / "cpu.cfs_quota_us").read_text())
        return None if quota_us <= 0 else quota_us / int((v1 / "cpu.cfs_period_us").read_text())
    return None
