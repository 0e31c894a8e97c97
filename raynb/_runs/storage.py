"""In the kernel: where a run's checkpoints go, and whether every node of the cluster can reach it. Pure.

Ray Train (V2) refuses to persist a checkpoint to a path local to one node once the run spans several ("A local path
on the head node is not accessible by worker nodes"), after all the training steps; AWS's Ray Train DLC docs say the
same of multi-node runs on node-local storage. raynb says it before any worker starts.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import PurePosixPath

from ..errors import UsageError

__all__ = ["is_node_local", "check_reachable_by_every_node", "run_dir", "shared_storage_fix"]

#: URI schemes pyarrow's filesystems serve from anywhere (Ray Train's storage layer).
SHARED_SCHEMES = ("s3://", "gs://", "gcs://", "abfs://", "abfss://", "hdfs://", "az://")


def shared_storage_fix(kind: str) -> str:
    """How a cluster of ``kind`` ("kubernetes", "local", "address") gets storage every node reaches: a RayCluster from
    its values file; a cluster raynb did not start (or nodes joined to the embedded head) from the run's settings."""
    if kind == "kubernetes":
        return (
            "give the cluster shared storage in its values file, e.g. STORAGE_PATH=s3://my-bucket/ray (with "
            "SERVICE_ACCOUNT for pod IAM), or SHARED_PVC=<an EFS / FSx for Lustre claim> with "
            "STORAGE_PATH=<its SHARED_MOUNT_PATH>/ray, then `%raycluster up --recreate`"
        )
    return (
        "point the run's storage at a place every node reaches: `%config RayNB.storage_path = 's3://my-bucket/ray'` "
        "(or RAYNB_STORAGE_PATH, or run_config=RunConfig(storage_path=...)), or a path on a volume every node mounts "
        "(NFS, EFS, FSx) declared with `%config RayNB.shared_mount_path = '/mnt/shared'` (or RAYNB_SHARED_MOUNT_PATH)"
    )


def is_node_local(storage_path: str | None, shared_mounts: Sequence[str] = ()) -> bool:
    """True when ``storage_path`` is one node's own disk: unset (Ray's ``~/ray_results``), ``file://`` or a plain path
    outside every shared mount (a PVC mounted into every pod)."""
    if storage_path is None:
        return True
    if storage_path.startswith(SHARED_SCHEMES):
        return False
    path = PurePosixPath(storage_path.removeprefix("file://"))
    return not any(path == PurePosixPath(m) or PurePosixPath(m) in path.parents for m in shared_mounts if m)


def every_nodes_mounts(backend_mounts: Sequence[str], declared: str | None) -> tuple[str, ...]:
    """The paths mounted on every node: the cluster's own (a shared volume in every pod) and the one the settings
    declare (``shared_mount_path``: NFS, EFS or FSx on a cluster reached by address)."""
    return (*backend_mounts, *([declared] if declared else []))


def check_reachable_by_every_node(
    storage_path: str | None,
    *,
    nodes: int,
    kind: str,
    shared_mounts: Sequence[str] = (),
    checkpoints: bool = True,
) -> None:
    """Refuse a run whose checkpoints would be stranded on one node of a multi-node cluster (``checkpoints=False``:
    the run never checkpoints, so it does not matter)."""
    if nodes <= 1 or not checkpoints or not is_node_local(storage_path, shared_mounts):
        return
    where = storage_path or "~/ray_results (Ray's default)"
    raise UsageError(
        f"This cluster has {nodes} nodes, but the run's storage ({where}) is one node's own disk: Ray Train cannot "
        "save a checkpoint there, and would say so only after every training step.",
        saw="storage_path: "
        + (storage_path or "unset")
        + (f"; shared mounts: {', '.join(shared_mounts)}" if shared_mounts else "; no shared volume is mounted"),
        fix=shared_storage_fix(kind)
        + "; a run that never saves checkpoints can say so: `%%raytrain --checkpoints false` "
        "(raynb.train(..., checkpoints=False))",
    )


def run_dir(storage_path: str, name: str) -> str:
    """Where Ray Train keeps the run ``name``'s checkpoints: ``storage_path/name`` (an ``s3://`` URI's ``?options``,
    e.g. an endpoint, stay at its end)."""
    base, sep, options = storage_path.partition("?")
    return f"{base.rstrip('/')}/{name}{sep}{options}"
