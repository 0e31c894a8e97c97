"""In the kernel: will a run's workers fit the cluster: against what it has now, or, autoscaled, what it has at full
size; and each worker on a node of its own size (Ray places a worker on one node: 2 workers of 6 CPUs never fit two
4-CPU nodes, though 8 CPUs is more than 12 is not). Refused at once when never, said when only once it has grown;
nothing waits forever on a shape that cannot be placed."""

from __future__ import annotations

from .._current import current
from ..errors import InsufficientResourcesError, not_connected

__all__ = ["check_resources", "place_run", "gpu_worker_cpus", "HEAD_KEEPS_CPUS"]

#: CPUs a GPU worker's share leaves to the head node's own processes (GCS, raylet, dashboard, raynb's actors).
HEAD_KEEPS_CPUS = 1.0


def gpu_worker_cpus(nodes: list[dict[str, float]]) -> float | None:
    """A GPU worker's share of its node: the node's CPUs (less :data:`HEAD_KEEPS_CPUS` on the head) divided among
    its GPUs, whole CPUs, the smallest over the nodes with GPUs (a worker may land on any), at least 1. None where no
    node has a GPU now (an autoscaled cluster at zero: its workers get 1 CPU each, as Ray Train's default)."""
    shares = [
        (n.get("CPU", 0.0) - (HEAD_KEEPS_CPUS if "node:__internal_head__" in n else 0.0)) // n["GPU"]
        for n in nodes
        if n.get("GPU", 0.0) >= 1
    ]
    return max(1.0, min(shares)) if shares else None


def place_run(workers: int, gpu: bool, cpus_per_worker: float | None) -> tuple[float, str | None]:
    """The CPUs each worker of this run reserves (``cpus_per_worker``, or by default 1 for a CPU worker and
    :func:`gpu_worker_cpus` for a GPU worker), checked against the connected cluster as :func:`check_resources` does;
    with what to tell the user when the run fits only once the cluster has grown."""
    from .._client import side

    if not side().connected():
        raise not_connected()
    now = side().resources()
    nodes = [dict(n.get("Resources") or {}) for n in now["nodes"] if n.get("Alive")]
    cpus = cpus_per_worker
    if cpus is None:
        cpus = (gpu_worker_cpus(nodes) if gpu else None) or 1.0
    cl = current()
    grows_to = cl.backend.grows_to() if cl is not None else None
    return cpus, check_resources(workers, gpu, cpus, total=now["total"], grows_to=grows_to, nodes=nodes)


def check_resources(
    workers: int,
    gpu: bool,
    cpus_per_worker: float,
    total: dict[str, float],
    grows_to: dict[str, float] | None = None,
    nodes: list[dict[str, float]] | None = None,
) -> str | None:
    """Refuse a run the cluster can never place, instead of waiting forever. ``total``: the cluster's resources
    now; ``grows_to``: an autoscaled cluster's at full size; ``nodes``: each live node's resources. Returns what to
    tell the user when the run fits only once the cluster has grown (None: it fits now)."""
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
    if nodes and not grows_to:  # an autoscaled cluster's future nodes are not here to measure
        _check_per_node(workers, gpu, cpus_per_worker, nodes)
    short = (gpu and workers > now_gpu) or need_cpu > now_cpu
    if not short:
        return None
    return (
        f"the cluster has {now_gpu:g} GPUs and {now_cpu:g} CPUs now: its autoscaler adds worker nodes for this run "
        "(on EKS Karpenter or the Cluster Autoscaler provisions them and the image is pulled: minutes); the run "
        "starts once they join"
    )


def workers_that_fit(gpu: bool, cpus_per_worker: float, node: dict[str, float]) -> int:
    """How many workers of this shape one node holds."""
    fits = int(node.get("CPU", 0.0) // cpus_per_worker) if cpus_per_worker > 0 else 10**6
    return min(fits, int(node.get("GPU", 0.0))) if gpu else fits


def _check_per_node(workers: int, gpu: bool, cpus_per_worker: float, nodes: list[dict[str, float]]) -> None:
    shape = f"{cpus_per_worker:g} CPUs" + (" and 1 GPU" if gpu else "")
    fit = sum(workers_that_fit(gpu, cpus_per_worker, n) for n in nodes)
    if fit >= workers:
        return
    largest = max(nodes, key=lambda n: (n.get("GPU", 0.0), n.get("CPU", 0.0)) if gpu else n.get("CPU", 0.0))
    sizes = ", ".join(f"{n.get('CPU', 0.0):g} CPUs" + (f" {n.get('GPU', 0.0):g} GPUs" if gpu else "") for n in nodes)
    what = (
        f"a worker needs {shape} on one node, but the largest node has {largest.get('CPU', 0.0):g} CPUs"
        + (f" and {largest.get('GPU', 0.0):g} GPUs" if gpu else "")
        if fit == 0
        else f"{workers} workers of {shape} were asked for, but the nodes hold {fit} of that size"
    )
    # the most CPUs a worker can ask for with all of them placed, as CPUs split evenly on some node
    cands = [n.get("CPU", 0.0) / k for n in nodes for k in range(1, workers + 1)]
    per = max((c for c in cands if c >= 0.1 and sum(workers_that_fit(gpu, c, n) for n in nodes) >= workers), default=0)
    options = ([f"use --workers {fit}"] if fit >= 1 else []) + ([f"--cpus-per-worker {per:g}"] if per else [])
    raise InsufficientResourcesError(
        what + " (Ray places each worker on a single node).",
        saw=f"nodes: {sizes}",
        fix=" or ".join(options) + (", or " if options else "") + "nodes of a bigger size.",
    )
