"""Will a run's workers fit the cluster: against what it has now, or, autoscaled, what it has at full size. Refused
at once when never, said when only once it has grown; nothing waits forever on a shape that cannot be placed."""

from __future__ import annotations

from ._current import current
from .errors import InsufficientResourcesError, not_connected

__all__ = ["check_resources"]


def check_resources(
    workers: int,
    gpu: bool,
    cpus_per_worker: float,
    total: dict[str, float] | None = None,
    grows_to: dict[str, float] | None = None,
) -> str | None:
    """Refuse a run the cluster can never place, instead of waiting forever. ``total``: the cluster's resources
    now; ``grows_to``: an autoscaled cluster's at full size (default for both: asked from the connected cluster).
    Returns what to tell the user when the run fits only once the cluster has grown (None: it fits now)."""
    if total is None:
        import ray

        if not ray.is_initialized():
            raise not_connected()
        total = ray.cluster_resources()
        cl = current()
        grows_to = cl.backend.grows_to() if cl is not None else None
    need_cpu = workers * cpus_per_worker
    now_cpu, now_gpu = total.get("CPU", 0.0), total.get("GPU", 0.0)
    have_cpu, have_gpu = max(now_cpu, (grows_to or {}).get("CPU", 0.0)), max(now_gpu, (grows_to or {}).get("GPU", 0.0))
    saw = f"cluster resources: {now_cpu:g} CPUs, {now_gpu:g} GPUs" + (
        f" now, {have_cpu:g} CPUs and {have_gpu:g} GPUs at full size (autoscaled)" if grows_to else ""
    )
    if gpu and workers > have_gpu:
        raise InsufficientResourcesError(
            f"{workers} GPU workers were asked for, but the cluster has {have_gpu:g} GPUs"
            + (" at full size." if grows_to else "."),
            saw=saw,
            fix=f"use --workers {int(have_gpu)}"
            if have_gpu >= 1
            else "drop --gpu to train on CPUs, or connect to a cluster with GPUs.",
        )
    if need_cpu > have_cpu:
        fit = int(have_cpu // cpus_per_worker) if cpus_per_worker else 0
        raise InsufficientResourcesError(
            f"{workers} workers x {cpus_per_worker:g} CPUs = {need_cpu:g} CPUs were asked for, "
            f"but the cluster has {have_cpu:g}" + (" at full size." if grows_to else "."),
            saw=saw,
            fix=(f"use --workers {fit}" if fit >= 1 else "lower --cpus-per-worker")
            + (" or --cpus-per-worker " + f"{have_cpu / workers:g}" if have_cpu / workers >= 0.1 else "")
            + ", or start a bigger cluster.",
        )
    short = (gpu and workers > now_gpu) or need_cpu > now_cpu
    if not short:
        return None
    return (
        f"the cluster has {now_gpu:g} GPUs and {now_cpu:g} CPUs now: its autoscaler adds worker nodes for this run "
        "(on EKS Karpenter or the Cluster Autoscaler provisions them and the image is pulled: minutes); the run "
        "starts once they join"
    )
