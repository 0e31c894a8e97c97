"""On each node (Ray tasks): what the kernel ships to the cluster as plain functions: the all-reduce sweep each worker
of ``raynb.bench`` runs, and the doctor's node tasks (a node's facts; the storage round trip's write and read). Ray
pickles a module-level function by its module's name, so whatever runs one imports this module: it holds only cluster
code."""

from __future__ import annotations

from typing import Any

__all__ = ["sweep", "node_facts", "write_file", "read_file"]


def sweep(config: dict[str, Any]) -> None:
    """train_loop_per_worker: time all_reduce of float32 tensors of each size; rank 0's numbers are reported."""
    import time

    import ray.train
    import ray.train.torch
    import torch
    import torch.distributed as dist

    from .report import report

    ctx = ray.train.get_context()
    world = ctx.get_world_size()
    if config.get("fake_hosts"):
        # Pretend the ranks live on `fake_hosts` machines (e.g. 2 x 4 GPUs on one 8-GPU box): NCCL reads
        # NCCL_HOSTID when its first communicator starts, which is the first collective below.
        import os

        os.environ["NCCL_HOSTID"] = f"raynb-fake-host-{ctx.get_world_rank() * config['fake_hosts'] // world}"
    dev = ray.train.torch.get_device() if config.get("gpu") else torch.device("cpu")
    cuda = dev.type == "cuda"

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize(dev)

    def timed(x: torch.Tensor, iters: int) -> float:
        sync()
        t0 = time.perf_counter()
        for k in range(1, iters + 1):
            dist.all_reduce(x)
            if k % 5 == 0:
                sync()
        sync()
        return time.perf_counter() - t0

    budget = config.get("seconds_per_size", 1.0)
    min_iters, max_iters = config.get("min_iters", 5), config.get("max_iters", 200)
    for i, size in enumerate(config["sizes"], start=1):
        x = torch.ones(size // 4, dtype=torch.float32, device=dev)
        for _ in range(config.get("warmup", 3)):
            dist.all_reduce(x)
        # Every rank must run the same number of collectives: a rank that stops by its own clock while another goes
        # on is a collective mismatch (gloo aborts the process, NCCL hangs). Rank 0's estimate decides for all.
        per_iter = timed(x, min_iters) / min_iters
        agreed = torch.tensor([min(max_iters, max(min_iters, int(budget / per_iter)))], dtype=torch.int64, device=dev)
        dist.broadcast(agreed, src=0)
        n = int(agreed.item())
        dt = timed(x, n) / n
        algbw = size / dt / 1e9
        report(
            step=i,
            busbw_gbps=algbw * 2 * (world - 1) / max(world, 1),
            algbw_gbps=algbw,
            size_bytes=size,
            time_us=dt * 1e6,
            iters=n,
        )
        del x
        if cuda:
            torch.cuda.empty_cache()


def node_facts() -> dict[str, Any]:
    """On a node (the doctor's task): its Ray and Python, /dev/shm, the GPUs the machine has, its name."""
    import os
    import platform
    import shutil

    import ray

    from .._shared.host import count_gpus

    shm = shutil.disk_usage("/dev/shm").total if os.path.isdir("/dev/shm") else 0
    return {
        "ray": ray.__version__,
        "python": platform.python_version(),
        "shm_bytes": shm,
        "gpus_seen": count_gpus(respect_visible=False),
        "host": platform.node(),
    }


def write_file(storage_path: str, key: str, text: str) -> str | None:
    """On a node: write ``text`` under the storage path; the error, in words, or None."""
    import platform

    try:
        from pyarrow import fs

        filesystem, base = fs.FileSystem.from_uri(storage_path)
        filesystem.create_dir(f"{base}/.raynb-doctor", recursive=True)
        with filesystem.open_output_stream(f"{base}/.raynb-doctor/{key}") as f:
            f.write(text.encode())
        return None
    except Exception as e:  # noqa: BLE001 - any failure is the check's answer
        return f"{type(e).__name__} on {platform.node()}: {e}"


def read_file(storage_path: str, key: str, remove: bool) -> tuple[str | None, str | None]:
    """On a node: (what the file says, None) or (None, the error in words)."""
    import platform

    try:
        from pyarrow import fs

        filesystem, base = fs.FileSystem.from_uri(storage_path)
        path = f"{base}/.raynb-doctor/{key}"
        with filesystem.open_input_stream(path) as f:
            text = f.read().decode()
        if remove:
            filesystem.delete_file(path)
        return text, None
    except Exception as e:  # noqa: BLE001
        return None, f"{type(e).__name__} on {platform.node()}: {e}"
