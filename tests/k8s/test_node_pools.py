"""GPU node pools as EKS builds them, on the real control plane, scheduler and KubeRay: the kwok GPU nodes are a
Karpenter NodePool's (labelled karpenter.sh/nodepool, no `role` label, tainted nvidia.com/gpu:NoSchedule), so every
Kubernetes test shows the defaults scheduling there; here, what happens without the toleration, and a pool that has
no node yet: Karpenter's Nominated events (written here as Karpenter writes them: Karpenter itself does not run on
this stack) keep `up` waiting past its timeout and say so, and the node it "launches" (a kwok node created by the
test) takes the pods."""

from __future__ import annotations

import threading
import time
import uuid
from datetime import datetime, timezone

import pytest
from conftest import HERE_PY, NAME, VALUES, apply, controlplane, delete

import raynb
from raynb._cluster import kube_api as kube
from raynb._cluster import kube_connect
from raynb._cluster.status import ClusterStatus
from raynb.display.cluster_view import cost_text
from raynb.errors import ClusterStartError

NS = "ray-train"


def _workers(target: kube_connect.Target) -> list[dict]:
    ref = kube.RayClusterRef(NAME, NS)
    return [p for p in kube.pods(target, ref) if p["metadata"]["labels"].get("ray.io/node-type") == "worker"]


def _karpenter_nominates(stack: controlplane.Stack, pod: dict, nodeclaim: str) -> None:
    """The event Karpenter's provisioner writes on a pod it has launched a node for."""
    from kubernetes import client

    now = datetime.now(timezone.utc)
    client.CoreV1Api(stack.api()).create_namespaced_event(
        NS,
        {
            "metadata": {"name": f"{pod['metadata']['name']}.{uuid.uuid4().hex[:10]}", "namespace": NS},
            "involvedObject": {
                "kind": "Pod",
                "name": pod["metadata"]["name"],
                "namespace": NS,
                "uid": pod["metadata"]["uid"],
                "apiVersion": "v1",
            },
            "reason": "Nominated",
            "message": f"Pod should schedule on: nodeclaim/{nodeclaim}",
            "type": "Normal",
            "source": {"component": "karpenter"},
            "firstTimestamp": now.isoformat(),
            "lastTimestamp": now.isoformat(),
            "count": 1,
        },
    )


def test_workers_without_the_gpu_toleration_are_told_the_value_to_set(clean) -> None:
    lines: list[str] = []
    with pytest.raises(ClusterStartError) as e:
        raynb.up(
            values=VALUES,
            set={"PYTHON_VERSION": HERE_PY, "GPU_TOLERATIONS": ""},
            connect=False,
            timeout=10,
            progress=lines.append,
        )
    assert "untolerated taint" in e.value.saw, e.value.saw  # the real scheduler's words
    assert "GPU_TOLERATIONS='{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}'" in e.value.saw


def test_a_pool_that_scales_from_zero_is_waited_for_and_said(clean) -> None:
    pool = f"gpu-later-{uuid.uuid4().hex[:4]}"
    target = kube_connect.connect_api()
    lines: list[str] = []
    done: dict = {}

    def up() -> None:
        try:
            done["cluster"] = raynb.up(
                values=VALUES,
                set={"PYTHON_VERSION": HERE_PY, "GPU_NODE_SELECTOR": f"karpenter.sh/nodepool: {pool}"},
                connect=False,
                timeout=10,
                progress=lines.append,
            )
        except Exception as e:  # noqa: BLE001 -- handed to the test thread
            done["error"] = e

    t0 = time.monotonic()
    waiter = threading.Thread(target=up, daemon=True)
    waiter.start()
    nodes = [{**controlplane.NODES[1], "name": f"{pool}-{i}", "nodepool": pool} for i in range(2)]
    try:
        while len(_workers(target)) < 2 and time.monotonic() - t0 < 60:
            time.sleep(0.5)
        for i, pod in enumerate(_workers(target)):
            assert not pod["spec"].get("nodeName")  # no node of that pool exists yet
            _karpenter_nominates(clean, pod, f"{pool}-{i}")
        time.sleep(max(0.0, 16 - (time.monotonic() - t0)))  # past up()'s timeout: still waiting, as it should
        assert waiter.is_alive() and "error" not in done, done.get("error")
        for n in nodes:  # the nodes Karpenter launched join
            apply(clean, controlplane.node_object(n))
        waiter.join(90)
        assert "error" not in done and "cluster" in done, done.get("error")
        text = "\n".join(lines)
        assert f"Karpenter is launching a node for it (nodeclaim/{pool}-" in text, text
        assert "label the node group" not in text  # no relabelling advice for a node on its way
        ready = next(ln for ln in lines if "ready after" in ln)
        assert int(ready.split("ready after ")[1].split(" s")[0]) > 10, ready  # past the timeout, while progressing
        done["cluster"].down(progress=lambda _m: None)
    finally:
        for n in nodes:
            delete(clean, "v1", "Node", n["name"])


def test_an_autoscaled_cluster_starts_without_gpu_nodes_and_gets_the_operators_autoscaler(clean) -> None:
    """GPU_MIN_NODES=0: `up` is ready with the head alone (no GPU node bills), KubeRay's operator adds the autoscaler
    to the head pod and the permission it needs; `up`, status and `list` say what it costs while workers run. (The
    autoscaler's scaling needs a real Ray head inside the pod: on this stack the pods are kwok's, so it is not run.)"""
    from kubernetes import client

    lines: list[str] = []
    c = raynb.up(
        values=VALUES,
        set={"PYTHON_VERSION": HERE_PY, "GPU_MIN_NODES": "0", "IDLE_TIMEOUT_S": "300"},
        connect=False,
        timeout=60,
        progress=lines.append,
    )
    try:
        target = kube_connect.connect_api()
        assert _workers(target) == []  # nothing on a GPU node until a run asks for one
        ref = kube.RayClusterRef(NAME, NS)
        (head,) = [p for p in kube.pods(target, ref) if p["metadata"]["labels"].get("ray.io/node-type") == "head"]
        assert "autoscaler" in [x["name"] for x in head["spec"]["containers"]], head["spec"]["containers"]
        role = client.RbacAuthorizationV1Api(clean.api()).read_namespaced_role(NAME, NS)
        assert any("rayclusters" in (r.resources or []) and "patch" in (r.verbs or []) for r in role.rules), role
        text = "\n".join(lines)
        assert "head + 0–2 × g6.12xlarge worker(s)" in text and "removed after 5:00 without work" in text, text
        assert "bill while they run: 0–2 × g6.12xlarge, up to $9.20/h" in text, text
        line = cost_text(
            ClusterStatus(NAME, "kubernetes", None, None, kube=c.backend.kube_status(), cost=c.backend.hourly_cost())
        )
        assert line is not None and "0 on nodes now ≈ $0.00/h" in line, line
        row = next(r for r in raynb.clusters(namespace=NS) if r["name"] == NAME)
        assert row["cost"] == "≤ $9.20/h", row
        assert c.backend.grows_to() == {"GPU": 8.0, "CPU": 2.0 + 2 * 40.0}  # what a run is checked against
    finally:
        c.down(progress=lambda _m: None)
