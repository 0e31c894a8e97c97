"""`up` / `status` / `list` / `down` of the DLC RayCluster against the real control plane and the real KubeRay operator
(kwok plays the sample's nodes: one m7i.xlarge, two g6.12xlarge with 4 nvidia.com/gpu and 1 vpc.amazonaws.com/efa)."""

from __future__ import annotations

import re
import time

import pytest
from conftest import HERE_PY, NAME, VALUES

import raynb
from raynb import manifest
from raynb._cluster import kube_api as kube
from raynb._cluster import kube_connect
from raynb.errors import ClusterStartError

REF = kube.RayClusterRef(NAME, "ray-train")


def _say() -> tuple[list[str], object]:
    lines: list[str] = []
    return lines, lines.append


def test_up_ready_status_reuse_down(clean) -> None:
    lines, say = _say()
    c = raynb.up(values=VALUES, set={"PYTHON_VERSION": HERE_PY}, connect=False, timeout=60, progress=say)
    assert any("server-side apply, field manager raynb" in m for m in lines)
    assert any("ready after" in m and "workers 2/2 ready" in m for m in lines), lines
    assert any("its GPU nodes bill from now: 2 × g6.12xlarge ≈ $9.20/h" in m for m in lines), lines
    target = kube_connect.connect_api()
    rc = kube.get_raycluster(target, REF)
    managers = {(f["manager"], f["operation"]) for f in rc["metadata"]["managedFields"]}
    assert ("raynb", "Apply") in managers
    conds = {x["type"]: x["status"] for x in rc["status"]["conditions"]}
    assert conds["HeadPodReady"] == "True" and conds["RayClusterProvisioned"] == "True"

    st = c.status()  # not connected to Ray: the Kubernetes part alone
    roles = sorted(p.role for p in st.kube.pods)
    assert roles == ["head", "worker", "worker"] and all(p.ready for p in st.kube.pods)
    workers = [p for p in st.kube.pods if p.role == "worker"]
    assert {p.node for p in workers} == {"gpu-0", "gpu-1"} and {(p.gpus, p.efa) for p in workers} == {("4", "1")}
    assert {(n.instance_type, n.gpus, n.efa) for n in st.kube.nodes} >= {("g6.12xlarge", "4", "1")}
    assert f"{NAME}-head" in st.text() and "raynb-pods" in st.html()
    # what the two GPU nodes cost since the RayCluster was made (its creationTimestamp, seconds ago)
    assert st.kube.created_at is not None and 0 <= time.time() - st.kube.created_at < 600
    assert re.search(r"cost 2 × g6\.12xlarge ≈ \$9\.20/h .* · up \d+:\d\d ≈ \$\d+\.\d\d so far", st.text()), st.text()

    again = raynb.Cluster.from_name(NAME, connect=False)  # e.g. after a kernel restart
    assert again.kind == "kubernetes" and again.backend.ref == REF
    assert again.backend.values["DLC_IMAGE"] == "public.ecr.aws/deep-learning-containers/ray:train-ml-cuda-v1.1"
    assert again.backend.values["PYTHON_VERSION"] == HERE_PY and again.backend.efa_expected() == (True, False)
    assert again.backend.hourly_cost() == c.backend.hourly_cost()  # the price survives a kernel restart
    with raynb.Cluster.from_name(NAME, connect=False):
        pass  # attaching never deletes: the with-block only tears down what its own `up` created
    assert kube.get_raycluster(target, REF) is not None
    with pytest.raises(raynb.RaynbError) as e:
        raynb.Cluster.from_name("no-such-cluster", connect=False)
    assert "No RayCluster 'no-such-cluster' in namespace 'ray-train'" in e.value.what
    assert NAME in e.value.saw

    rows = raynb.clusters(namespace="ray-train")
    assert [r["name"] for r in rows if r["kind"] == "kubernetes"] == [NAME]

    lines2, say2 = _say()
    raynb.up(values=VALUES, set={"PYTHON_VERSION": HERE_PY}, connect=False, timeout=60, progress=say2)
    assert any(f"reusing RayCluster ray-train/{NAME} (same spec)" in m for m in lines2)

    with pytest.raises(kube.KubeError) as e:
        raynb.up(
            values=VALUES, set={"PYTHON_VERSION": HERE_PY, "WORKER_CPU": "30"}, connect=False, timeout=60, progress=say2
        )
    assert "limits.cpu: '40' → '30'" in e.value.saw and "--recreate" in e.value.fix

    lines3, say3 = _say()
    c = raynb.up(
        values=VALUES,
        set={"PYTHON_VERSION": HERE_PY, "WORKER_CPU": "30"},
        connect=False,
        recreate=True,
        timeout=60,
        progress=say3,
    )
    assert any("recreating" in m for m in lines3) and any("ready after" in m for m in lines3)

    t0 = time.monotonic()
    c.down(progress=say3)
    assert kube.get_raycluster(target, REF) is None
    assert kube.pods(target, REF) == []
    from kubernetes import client

    svcs = client.CoreV1Api(target.api).list_namespaced_service("ray-train", label_selector="ray.io/cluster").items
    assert svcs == []
    print(f"down took {time.monotonic() - t0:.1f} s")
    assert raynb.down(NAME, progress=say3) is False  # idempotent
    assert any("nothing to delete" in m for m in lines3)


def test_three_gpu_workers_on_two_gpu_nodes_times_out_with_the_schedulers_reason(clean) -> None:
    lines, say = _say()
    t0 = time.monotonic()
    with pytest.raises(ClusterStartError) as e:
        raynb.up(
            values=VALUES,
            set={"PYTHON_VERSION": HERE_PY, "GPU_NODE_COUNT": "3"},
            connect=False,
            timeout=10,
            progress=say,
        )
    took = time.monotonic() - t0
    # the 10 s timeout holds (the default would wait 900 s): it waited that long, plus the diagnosis's reads
    assert 10 <= took < 40, took
    assert "was not ready after 10 s" in e.value.what and "workers 2/3 ready" in e.value.what
    assert "Insufficient nvidia.com/gpu" in e.value.saw  # the real scheduler's words
    assert "GPU_NODE_COUNT" in e.value.saw and "%raycluster down" in e.value.fix
    assert any("waiting:" in m and "Insufficient nvidia.com/gpu" in m for m in lines)  # said while waiting


def test_efa_not_offered_and_selector_mismatch_are_explained(clean) -> None:
    with pytest.raises(ClusterStartError) as e:
        raynb.up(
            values=VALUES,
            set={"PYTHON_VERSION": HERE_PY, "EFA_PER_NODE": "2"},
            connect=False,
            timeout=5,
            progress=lambda _m: None,
        )
    assert "Insufficient vpc.amazonaws.com/efa" in e.value.saw and "EFA device plugin" in e.value.saw
    raynb.down(NAME, progress=lambda _m: None)
    with pytest.raises(ClusterStartError) as e:
        raynb.up(
            values=VALUES,
            set={"PYTHON_VERSION": HERE_PY, "GPU_NODE_TYPE": "p5.48xlarge"},
            connect=False,
            timeout=5,
            progress=lambda _m: None,
        )
    assert "didn't match Pod's node affinity/selector" in e.value.saw
    assert "node.kubernetes.io/instance-type=p5.48xlarge" in e.value.saw


def test_image_pull_failure_fails_fast(clean) -> None:
    t0 = time.monotonic()
    with pytest.raises(ClusterStartError) as e:
        raynb.up(
            values=VALUES,
            set={"PYTHON_VERSION": HERE_PY, "DLC_IMAGE": "registry.invalid/ray:nope"},
            connect=False,
            timeout=600,
            progress=lambda _m: None,
        )
    took = time.monotonic() - t0
    assert took < 120, took  # fails as soon as the pull fails, long before the 600 s timeout: waiting cannot help
    assert "image cannot be pulled" in e.value.what and "ImagePullBackOff" in e.value.saw


def test_replica_failure_fails_at_once(stack, clean) -> None:
    """A namespace quota lets KubeRay create the head but refuses the workers: KubeRay sets ReplicaFailure, and `up`
    fails at once with the operator's words instead of waiting for pods that will never exist."""
    from conftest import apply, delete

    apply(
        stack,
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": "one-pod", "namespace": "ray-train"},
            "spec": {"hard": {"pods": "1"}},
        },
    )
    try:
        t0 = time.monotonic()
        with pytest.raises(ClusterStartError) as e:
            raynb.up(
                values=VALUES, set={"PYTHON_VERSION": HERE_PY}, connect=False, timeout=300, progress=lambda _m: None
            )
        assert time.monotonic() - t0 < 200  # not the 300 s timeout
        assert "KubeRay could not create the pods" in e.value.what
        assert "quota" in (e.value.saw or "").lower(), e.value.saw
    finally:
        delete(stack, "v1", "ResourceQuota", "one-pod", "ray-train")


def test_two_users_of_one_namespace_do_not_touch_each_others_cluster(clean, monkeypatch) -> None:
    """The first user's cluster is theirs (raynb.io/owner: their Kubernetes identity); a second user (a JupyterHub
    user of the same namespace) gets a default name of their own and cannot reuse, replace or delete it by accident."""
    from raynb.errors import KubeError

    raynb.up(values=VALUES, set={"PYTHON_VERSION": HERE_PY}, connect=False, timeout=60, progress=lambda _m: None)
    rc = kube.get_raycluster(kube_connect.connect_api(), REF)
    assert rc["metadata"]["annotations"]["raynb.io/owner"] == "admin"  # SelfSubjectReview of the admin token
    monkeypatch.setenv("JUPYTERHUB_USER", "bob")
    assert manifest.render()["metadata"]["name"] == "ray-train-bob"  # bob's default is not the first user's
    with pytest.raises(KubeError) as e:
        raynb.down(NAME, progress=lambda _m: None)
    assert f"ray-train/{NAME} belongs to admin" in e.value.what and "jupyterhub:bob" in e.value.what
    assert f"down {NAME} --force" in e.value.fix
    for recreate in (False, True):
        with pytest.raises(KubeError) as e:
            raynb.up(values=VALUES, set={"PYTHON_VERSION": HERE_PY, "RAY_CLUSTER_NAME": NAME, "WORKER_CPU": "30"}
                     if recreate else {"PYTHON_VERSION": HERE_PY, "RAY_CLUSTER_NAME": NAME},
                     recreate=recreate, connect=False, progress=lambda _m: None)  # fmt: skip
        assert "belongs to admin" in e.value.what and "RAY_CLUSTER_NAME=ray-train-bob" in e.value.fix
    assert kube.get_raycluster(kube_connect.connect_api(), REF) is not None  # untouched
    rows = raynb.clusters(namespace="ray-train")
    assert [(r["name"], r["owner"]) for r in rows if r["kind"] == "kubernetes"] == [(NAME, "admin")]
    monkeypatch.delenv("JUPYTERHUB_USER")
    assert raynb.down(NAME, progress=lambda _m: None) is True  # its owner may
