"""In the kernel: preflight checks with a fix for each failure; reads the cluster, never changes it.

On the embedded cluster it checks what applies there: notebook vs cluster Ray/Python, the dashboard, GPUs the
machine has vs GPUs the cluster offers, /dev/shm, the runs' storage (a file written on a worker node and read on the
head, and back: ``_doctor/storage.py``), and NVLink multicast kept off for workers. On Kubernetes it adds the
EFA checklist (``_cluster/kube_doctor.py``): EFA requested, nodes advertising GPUs and EFA, device plugins ready,
one availability zone, the NCCL/EFA variables, /dev/shm, and the image's versions.
"""

from __future__ import annotations

import sys

from .._checks import Check, Checklist
from .._client import side
from .._cluster.cluster import Cluster, current_cluster
from .._cluster.session import dashboard_get
from .._current import resolve_settings
from .._remote.tasks import node_facts
from .._runs.storage import every_nodes_mounts
from .._shared.worker_env import WORKER_ENV_DEFAULTS
from ..errors import not_connected
from .storage import storage_check

__all__ = ["doctor"]


def doctor() -> Checklist:
    """Run the checks against the current cluster: Ray-side checks when connected, Kubernetes/EFA checks on a
    Kubernetes cluster (those need no Ray connection)."""
    cl = current_cluster()
    if cl is None:
        raise not_connected()
    backend_checks = cl.backend.doctor_checks()  # Kubernetes' need no Ray connection
    connected = side().connected()  # over Ray Client or through Ray Jobs
    if not connected and not backend_checks.needs_no_ray:
        raise not_connected()
    out = Checklist()
    if connected:
        out.checks += _ray_checks(cl)
    out.checks += backend_checks.checks
    return out


def _ray_checks(cl: Cluster) -> list[Check]:
    import ray

    out: list[Check] = []
    facts = side().run_task(node_facts)
    here_py = ".".join(map(str, sys.version_info[:3]))
    same = facts["ray"] == ray.__version__ and facts["python"].rsplit(".", 1)[0] == here_py.rsplit(".", 1)[0]
    jobs = not side().code_crosses  # nothing crosses but JSON: the versions need not match
    out.append(
        Check(
            "Ray and Python versions",
            "ok" if same or jobs else "fail",
            f"notebook Ray {ray.__version__} / Python {here_py}; cluster Ray {facts['ray']} / Python {facts['python']}"
            + ("; through Ray Jobs, which needs no match" if jobs and not same else ""),
            ""
            if same or jobs
            else f'pip install "ray[client,train,default]=={facts["ray"]}" in a Python '
            f'{facts["python"].rsplit(".", 1)[0]} kernel',
        )
    )
    dash_ok = dashboard_get(cl.dashboard_url, "/api/version", timeout=5) is not None
    out.append(
        Check(
            "Ray dashboard",
            "ok" if dash_ok else "warn",
            cl.dashboard_url or "the head runs without a dashboard",
            ""
            if dash_ok
            else 'install "ray[default]" where the head runs, and '
            + (
                "start it with its dashboard (not --no-dashboard / RAYNB_LOCAL_DASHBOARD=0)"
                if cl.kind == "local"
                else "give `up` its dashboard_url (%raycluster up --address ... --dashboard-url URL)"
                if cl.kind == "address"
                else "keep the head's dashboard (port 8265) on"
            ),
        )
    )
    cluster_gpus = int(side().resources()["total"].get("GPU", 0))
    if facts["gpus_seen"] and cluster_gpus < facts["gpus_seen"]:
        out.append(
            Check(
                "GPUs",
                "warn",
                f"the machine has {facts['gpus_seen']} GPUs, the cluster offers {cluster_gpus}",
                _gpu_fix(cl.kind, facts["gpus_seen"]),
            )
        )
    else:
        out.append(
            Check(
                "GPUs",
                "ok",
                f"cluster offers {cluster_gpus} GPUs (nvidia-smi on {facts['host']} sees {facts['gpus_seen']})",
            )
        )
    if cl.backend.head_shm_matters:  # on Kubernetes the pod spec's /dev/shm volume is checked instead
        shm_gb = facts["shm_bytes"] / 2**30
        out.append(
            Check(
                "/dev/shm",
                "ok" if shm_gb >= 1 else "warn",
                f"{shm_gb:.1f} GiB on {facts['host']}",
                ""
                if shm_gb >= 1
                else "give the machine (or its container) a /dev/shm of a few GiB, e.g. `docker run --shm-size=8g`: "
                "NCCL SHM and Ray's object store use it",
            )
        )
    nodes, mounts = cl.backend.storage_reach()
    settings = resolve_settings()
    shared = every_nodes_mounts(mounts, settings.shared_mount_path)
    out.append(storage_check(settings.storage_path, nodes, shared, cl.kind))
    nvls = WORKER_ENV_DEFAULTS.get("NCCL_NVLS_ENABLE")
    out.append(Check("NVLink multicast off for workers", "ok" if nvls == "0" else "warn", f"NCCL_NVLS_ENABLE={nvls}"))
    return out


def _gpu_fix(kind: str, seen: int) -> str:
    """How a cluster of ``kind`` comes to offer the ``seen`` GPUs its node has."""
    if kind == "local":
        return f"restart with %raycluster up --local --num-gpus {seen}"
    if kind == "address":
        return f"start Ray on that node with `ray start ... --num-gpus {seen}` (or check its CUDA_VISIBLE_DEVICES)"
    return "request the GPUs in the pod spec (GPU_PER_NODE in the values file), then `%raycluster up --recreate`"
