"""Preflight checks with a fix for each failure; reads the cluster, never changes it.

On the embedded cluster it checks what applies there: notebook vs cluster Ray/Python, the dashboard, GPUs the
machine has vs GPUs the cluster offers, /dev/shm, and NVLink multicast kept off for workers. On Kubernetes it adds the
EFA checklist (kube_checks.py): EFA requested, nodes advertising GPUs and EFA, device plugins ready, one availability
zone, the NCCL/EFA variables, /dev/shm, and the image's versions.
"""

from __future__ import annotations

import html
import sys
from dataclasses import dataclass, field
from typing import Any

from .errors import NotConnectedError

__all__ = ["Check", "Checklist", "doctor"]

_MARK = {"ok": "✓", "warn": "!", "fail": "✗", "n/a": "–"}
_COLOR = {"ok": "#198754", "warn": "#b86e00", "fail": "#dc3545", "n/a": "#888"}


@dataclass
class Check:
    name: str
    state: str  # ok | warn | fail | n/a
    detail: str
    fix: str = ""


@dataclass
class Checklist:
    checks: list[Check] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c.state in ("ok", "warn", "n/a") for c in self.checks)

    def __repr__(self) -> str:
        lines = []
        for c in self.checks:
            lines.append(f"{_MARK[c.state]} {c.name}: {c.detail}" + (f"\n    fix: {c.fix}" if c.fix else ""))
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        rows = "".join(
            f'<tr data-state="{c.state}"><td style="color:{_COLOR[c.state]};font-weight:bold">{_MARK[c.state]}</td>'
            f"<td>{html.escape(c.name)}</td><td>{html.escape(c.detail)}</td>"
            f"<td>{html.escape(c.fix)}</td></tr>" for c in self.checks)
        return (f'<table class="raynb-doctor" style="font-size:12px"><tr><th></th><th>check</th><th>seen</th>'
                f"<th>fix</th></tr>{rows}</table>")


def _node_facts() -> dict[str, Any]:
    import os
    import platform
    import shutil
    import subprocess

    import ray

    shm = shutil.disk_usage("/dev/shm").total if os.path.isdir("/dev/shm") else 0
    gpus = 0
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=10)
        gpus = len([ln for ln in out.stdout.splitlines() if ln.startswith("GPU ")]) if out.returncode == 0 else 0
    except (OSError, subprocess.SubprocessError):
        pass
    return {"ray": ray.__version__, "python": platform.python_version(), "shm_bytes": shm, "gpus_seen": gpus,
            "host": platform.node()}


def doctor() -> Checklist:
    """Run the checks against the current cluster: Ray-side checks when connected, Kubernetes/EFA checks on a
    Kubernetes cluster (those need no Ray connection)."""
    import ray

    from .cluster import current

    cl = current()
    if cl is None:
        raise NotConnectedError("This kernel has no cluster.", fix="run `%raycluster up` first.")
    out = Checklist()
    if ray.is_initialized():
        out.checks += _ray_checks(cl)
    elif cl.kube is None:
        raise NotConnectedError("This kernel is not connected to a Ray cluster.",
                                fix="run `%raycluster up --local` first.")
    if cl.kube is not None:
        from .kube_checks import kube_checks

        out.checks += kube_checks(cl.kube.target, cl.kube.ref, cl.kube.values)
    else:
        for name in ("EFA requested by worker pods", "GPU nodes advertise EFA and GPUs",
                     "EFA and NVIDIA device plugins ready", "GPU nodes in one availability zone",
                     "NCCL/EFA variables on workers"):
            out.checks.append(Check(name, "n/a", "applies to Kubernetes clusters; this is the embedded cluster"))
    return out


def _ray_checks(cl: Any) -> list[Check]:
    import ray

    from .session import dashboard_get, worker_env_defaults

    out: list[Check] = []
    facts = ray.get(ray.remote(num_cpus=0)(_node_facts).remote())
    here_py = ".".join(map(str, sys.version_info[:3]))
    same = facts["ray"] == ray.__version__ and facts["python"].rsplit(".", 1)[0] == here_py.rsplit(".", 1)[0]
    out.append(Check(
        "Ray and Python versions", "ok" if same else "fail",
        f"notebook Ray {ray.__version__} / Python {here_py}; cluster Ray {facts['ray']} / Python {facts['python']}",
        "" if same else f'pip install "ray[client,train,default]=={facts["ray"]}" in a Python '
                        f'{facts["python"].rsplit(".", 1)[0]} kernel'))
    dash_ok = dashboard_get(cl.dashboard_url, "/api/version", timeout=5) is not None
    out.append(Check("Ray dashboard", "ok" if dash_ok else "warn",
                     cl.dashboard_url or "the head runs without a dashboard",
                     "" if dash_ok else 'install "ray[default]" where the head runs (and do not start it with '
                     "--no-dashboard / RAYNB_LOCAL_DASHBOARD=0)"))
    cluster_gpus = int(ray.cluster_resources().get("GPU", 0))
    if facts["gpus_seen"] and cluster_gpus < facts["gpus_seen"]:
        out.append(Check("GPUs", "warn", f"the machine has {facts['gpus_seen']} GPUs, the cluster offers "
                         f"{cluster_gpus}", "restart with %raycluster up --local --num-gpus "
                         f"{facts['gpus_seen']}"))
    else:
        out.append(Check("GPUs", "ok", f"cluster offers {cluster_gpus} GPUs "
                         f"(nvidia-smi on {facts['host']} sees {facts['gpus_seen']})"))
    if cl.kube is None:  # on Kubernetes the pod spec's /dev/shm volume is checked instead (the head has none)
        shm_gb = facts["shm_bytes"] / 2**30
        out.append(Check("/dev/shm", "ok" if shm_gb >= 1 else "warn", f"{shm_gb:.1f} GiB on {facts['host']}",
                         "" if shm_gb >= 1 else "mount a memory-backed /dev/shm (emptyDir medium: Memory) of a "
                         "few GiB: NCCL SHM and Ray's object store use it"))
    nvls = worker_env_defaults().get("NCCL_NVLS_ENABLE")
    out.append(Check("NVLink multicast off for workers", "ok" if nvls == "0" else "warn",
                     f"NCCL_NVLS_ENABLE={nvls}"))
    return out
