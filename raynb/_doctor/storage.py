"""In the kernel: the doctor's round trip through the runs' storage: a file written where the workers run and read where
the head runs, and back, through the same filesystem Ray Train uses (pyarrow's, from the storage path's URI). It
names the side that failed. It cannot see IAM: when S3 refuses, the fix names the service account and the permissions
to grant.

The two tasks run on the cluster (raynb is importable there: the embedded head's machine, or shipped with the job)."""

from __future__ import annotations

import uuid
from typing import Any

from .._checks import Check
from .._client import side
from .._remote.tasks import read_file, write_file
from .._runs.storage import is_node_local, shared_storage_fix

__all__ = ["storage_check", "storage_fix"]

NAME = "checkpoint storage"
_DENIED = ("AccessDenied", "Forbidden", "InvalidAccessKeyId", "SignatureDoesNotMatch", "credentials", "403")


def storage_fix(error: str, storage_path: str, kind: str) -> str:
    """What to do about ``error`` (a failed write or read on ``storage_path``) on a cluster of ``kind``."""
    kube = kind == "kubernetes"
    if storage_path.startswith("s3://") and any(k in error for k in _DENIED):
        bucket = storage_path.removeprefix("s3://").split("/", 1)[0].split("?", 1)[0]
        who = (
            "set SERVICE_ACCOUNT (values file) to a service account bound to such a role by EKS Pod Identity or "
            "IRSA, then `%raycluster up --recreate`"
            if kube
            else "give every node's instance role (or the AWS credentials its Ray processes see) those permissions"
        )
        return (
            f"the {'pods' if kube else 'nodes'}' IAM role must allow s3:PutObject, s3:GetObject, s3:DeleteObject "
            f"and s3:ListBucket on {bucket}: {who}"
        )
    if storage_path.startswith("s3://"):
        return "check the bucket's name and region (…?region=REGION in the storage path), and that the nodes reach S3"
    if kube:
        return (
            "mount the path in every pod (SHARED_PVC and SHARED_MOUNT_PATH in the values file) and make it writable "
            "by the Ray processes' user"
        )
    return "mount the path on every node and make it writable by the Ray processes' user, or " + shared_storage_fix(
        kind
    ).removeprefix("point ")


def storage_check(storage_path: str | None, nodes: int, shared_mounts: tuple[str, ...], kind: str) -> Check:
    """Write on a worker node, read on the head, and back (one node: both on it). Over Ray Client or through Ray
    Jobs."""
    if storage_path is None or is_node_local(storage_path, shared_mounts):
        where = storage_path or "Ray's ~/ray_results"
        if nodes <= 1:
            return Check(NAME, "ok", f"{where}: one node, so every worker's disk is the head's")
        return Check(
            NAME,
            "fail",
            f"{where} is each node's own disk on a cluster of {nodes} nodes: Ray Train cannot checkpoint there",
            shared_storage_fix(kind),
        )
    alive = [n for n in side().resources()["nodes"] if n.get("Alive")]
    head = next((n for n in alive if n.get("Resources", {}).get("node:__internal_head__")), alive[0])
    worker = next((n for n in alive if n is not head), head)

    def on(node: dict[str, Any], fn: Any, *args: Any) -> Any:
        return side().run_task(fn, *args, node_id=node["NodeID"])

    def named(node: dict[str, Any], role: str) -> str:
        return f"{role} ({node['NodeID'][:8]} at {node.get('NodeManagerAddress')})"

    if worker is head:  # one node: it writes and reads
        sides = [(head, head, "the only node", "the only node")]
    else:
        w, h = named(worker, "a worker node"), named(head, "the head")
        sides = [(worker, head, w, h), (head, worker, h, w)]
    for src, dst, src_name, dst_name in sides:
        key, text = uuid.uuid4().hex, f"written by raynb's doctor on {src.get('NodeManagerAddress')}"
        err = on(src, write_file, storage_path, key, text)
        if err:
            return Check(
                NAME,
                "fail",
                f"{storage_path}: writing on {src_name} failed: {err}",
                storage_fix(err, storage_path, kind),
            )
        got, err = on(dst, read_file, storage_path, key, True)
        if err or got != text:
            why = err or f"it read {got!r}, not what was written"
            return Check(
                NAME,
                "fail",
                f"{storage_path}: written on {src_name}, but reading it on {dst_name} failed: {why}",
                storage_fix(why, storage_path, kind),
            )
    both = "a worker node and the head" if worker is not head else "the only node"
    return Check(NAME, "ok", f"{storage_path}: a file written and read back on {both}")
