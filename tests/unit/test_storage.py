"""Checkpoint storage every node can reach: the refusal before a multi-node run starts, and the values that give a
RayCluster shared storage (kept on the cluster, so from_name finds it)."""

from __future__ import annotations

import pytest

from raynb import manifest
from raynb._runs.storage import check_reachable_by_every_node, every_nodes_mounts, is_node_local
from raynb.errors import UsageError


def test_what_counts_as_one_nodes_disk() -> None:
    assert is_node_local(None)  # Ray's ~/ray_results
    assert is_node_local("/home/ray/results") and is_node_local("file:///tmp/ray")
    assert not is_node_local("s3://bucket/ray") and not is_node_local("gs://bucket/ray")
    assert not is_node_local("/mnt/shared/ray", ["/mnt/shared"]) and not is_node_local("/mnt/shared", ["/mnt/shared"])
    assert is_node_local("/mnt/sharedness/ray", ["/mnt/shared"])  # a prefix of the name is not a parent


def test_a_path_declared_on_every_node_counts_as_shared() -> None:
    """``shared_mount_path`` (an NFS/EFS/FSx mount on a cluster reached by address) beside the cluster's own mounts;
    whether it really is shared is the doctor's round trip (tests/integration/test_nodes.py)."""
    mounts = every_nodes_mounts((), "/mnt/nfs")
    assert not is_node_local("/mnt/nfs/runs", mounts) and is_node_local("/tmp/runs", mounts)
    assert every_nodes_mounts(("/mnt/shared",), None) == ("/mnt/shared",)
    check_reachable_by_every_node("/mnt/nfs/runs", nodes=3, kind="address", shared_mounts=mounts)  # not refused


def test_a_multi_node_run_on_node_local_storage_is_refused_with_the_values_line() -> None:
    with pytest.raises(UsageError) as e:
        check_reachable_by_every_node(None, kind="kubernetes", nodes=3)
    assert "3 nodes" in e.value.what and "STORAGE_PATH=s3://" in e.value.fix and "--checkpoints false" in e.value.fix
    check_reachable_by_every_node(None, kind="kubernetes", nodes=1)  # the embedded cluster: one node
    check_reachable_by_every_node(None, kind="kubernetes", nodes=3, checkpoints=False)  # it never checkpoints
    check_reachable_by_every_node("s3://b/ray", kind="kubernetes", nodes=3)
    check_reachable_by_every_node("/mnt/fsx/ray", kind="kubernetes", nodes=3, shared_mounts=["/mnt/fsx"])


@pytest.mark.parametrize("kind", ["address", "local"])
def test_the_refusal_on_a_cluster_raynb_did_not_render_names_the_settings_that_work_there(kind: str) -> None:
    """A cluster reached by address (or nodes joined to the embedded head) has no values file: its storage comes from
    the run's settings."""
    with pytest.raises(UsageError) as e:
        check_reachable_by_every_node(None, kind=kind, nodes=3)
    fix = e.value.fix
    assert "%config RayNB.storage_path" in fix and "RAYNB_STORAGE_PATH" in fix and "RunConfig(storage_path" in fix
    assert "%config RayNB.shared_mount_path" in fix and "RAYNB_SHARED_MOUNT_PATH" in fix
    assert "SHARED_PVC" not in fix and "--recreate" not in fix and "values file" not in fix


def test_shared_storage_values_reach_every_pod_and_come_back_from_the_cluster() -> None:
    vals = {"STORAGE_PATH": "/mnt/fsx/ray", "SHARED_PVC": "fsx-claim", "SHARED_MOUNT_PATH": "/mnt/fsx"}
    rc = manifest.render(overrides={**vals, "SERVICE_ACCOUNT": "ray-s3"})
    groups = [rc["spec"]["headGroupSpec"], *rc["spec"]["workerGroupSpecs"]]
    for g in groups:
        spec = g["template"]["spec"]
        assert spec["serviceAccountName"] == "ray-s3"
        assert {"name": "shared", "persistentVolumeClaim": {"claimName": "fsx-claim"}} in spec["volumes"]
        assert {"name": "shared", "mountPath": "/mnt/fsx"} in spec["containers"][0]["volumeMounts"]
    back = manifest.values_from_spec(rc)
    assert {k: back[k] for k in vals} == vals and back["GPU_NODE_COUNT"] == "2"
    plain = manifest.render()
    assert "raynb.io/storage-path" not in plain["metadata"]["annotations"]
    # without SERVICE_ACCOUNT the head runs as its own account (head-identity.yaml), the workers as the namespace's
    assert plain["spec"]["headGroupSpec"]["template"]["spec"]["serviceAccountName"] == plain["metadata"]["name"]
    assert "serviceAccountName" not in plain["spec"]["workerGroupSpecs"][0]["template"]["spec"]


def test_a_runs_folder_keeps_an_s3_uris_options_at_the_end() -> None:
    from raynb._runs.storage import run_dir

    assert run_dir("/mnt/shared/ray/", "qwen") == "/mnt/shared/ray/qwen"
    uri = "s3://b/runs?endpoint_override=127.0.0.1:8333&scheme=http"
    assert run_dir(uri, "qwen") == "s3://b/runs/qwen?endpoint_override=127.0.0.1:8333&scheme=http"


def test_the_doctors_storage_check_without_shared_storage_needs_no_round_trip() -> None:
    from raynb._doctor.storage import storage_check

    one = storage_check(None, 1, (), "local")
    assert one.state == "ok" and "one node" in one.detail
    many = storage_check("/home/ray/ckpt", 3, ("/mnt/shared",), "kubernetes")
    assert many.state == "fail" and "each node's own disk on a cluster of 3 nodes" in many.detail
    assert "STORAGE_PATH=s3://" in many.fix and "SHARED_PVC" in many.fix
    by_address = storage_check("/home/ray/ckpt", 3, (), "address")
    assert "%config RayNB.storage_path" in by_address.fix and "SHARED_PVC" not in by_address.fix


def test_a_refused_s3_write_names_the_service_account_and_the_permissions() -> None:
    from raynb._doctor.storage import storage_fix

    denied = "OSError on ip-10-0-1-5: AWS Error ACCESS_DENIED ... AccessDenied"
    fix = storage_fix(denied, "s3://my-bucket/ray?x=1", "kubernetes")
    assert "SERVICE_ACCOUNT" in fix and "s3:PutObject" in fix and "on my-bucket" in fix
    fix = storage_fix(denied, "s3://my-bucket/ray", "address")  # no values file there: the nodes' own role
    assert "s3:PutObject" in fix and "instance role" in fix and "SERVICE_ACCOUNT" not in fix
    assert "region" in storage_fix("OSError: NoSuchBucket", "s3://my-bucket/ray", "kubernetes")
    assert "SHARED_PVC" in storage_fix("PermissionError: [Errno 13]", "/mnt/shared/ray", "kubernetes")
    assert "pod" not in storage_fix("PermissionError: [Errno 13]", "/mnt/shared/ray", "address")
