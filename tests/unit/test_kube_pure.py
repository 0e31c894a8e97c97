"""The pure Kubernetes parts: pending-pod diagnosis (on pods and events captured from the real test control plane,
tests/fixtures/k8s), spec differences, readiness from conditions, and the doctor's EFA checklist."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from raynb import manifest
from raynb._cluster.kube_doctor import evaluate
from raynb._cluster.kube_state import readiness, spec_differences
from raynb._cluster.pod_diagnosis import diagnose_pods, is_hopeless

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "k8s"


def _diag(name: str):
    data = json.loads((FIX / f"{name}.json").read_text())
    return diagnose_pods(data["pods"], data["events"])


def test_insufficient_gpu_names_the_gpu_and_not_its_symptoms() -> None:
    (d,) = _diag("insufficient-gpu")
    assert d.reason == "Unschedulable" and "Insufficient nvidia.com/gpu" in d.message
    assert "4 free nvidia.com/gpu" in d.hint and "GPU_NODE_COUNT" in d.hint
    assert "WORKER_CPU" not in d.hint and "labels" not in d.hint  # cpu/efa/selector are symptoms of full GPU nodes
    assert not is_hopeless(d)  # an autoscaler may still add a node


def test_insufficient_efa_points_at_the_device_plugin() -> None:
    (d,) = _diag("insufficient-efa")
    assert "Insufficient vpc.amazonaws.com/efa" in d.message
    assert "EFA device plugin" in d.hint and "g6.4xlarge" in d.hint


def test_selector_mismatch_names_the_labels() -> None:
    diags = _diag("selector-mismatch")
    assert diags and "node.kubernetes.io/instance-type=p5.48xlarge" in diags[0].hint


def test_image_pull_failure_is_hopeless() -> None:
    (d,) = _diag("image-pull")
    assert d.reason == "ImagePullBackOff" and "registry.invalid/ray:nope" in d.hint
    assert is_hopeless(d)


def test_spec_differences_ignore_server_added_fields() -> None:
    wanted = manifest.render()
    live = json.loads(json.dumps(wanted["spec"]))
    live["headGroupSpec"]["serviceType"] = "ClusterIP"  # defaulted by the API server: not a difference
    assert spec_differences(wanted["spec"], live) == []
    live["workerGroupSpecs"][0]["replicas"] = 3
    assert spec_differences(wanted["spec"], live) == ["spec.workerGroupSpecs[0].replicas: 3 → 2"]


def test_readiness_needs_both_conditions_and_all_workers() -> None:
    rc = {
        "spec": {"workerGroupSpecs": [{"replicas": 2}]},
        "status": {
            "conditions": [
                {"type": "HeadPodReady", "status": "True"},
                {"type": "RayClusterProvisioned", "status": "False"},
            ],
            "readyWorkerReplicas": 1,
            "desiredWorkerReplicas": 2,
        },
    }
    assert readiness(rc) == (False, "head ready · workers 1/2 ready")
    rc["status"]["conditions"][1]["status"] = "True"
    rc["status"]["readyWorkerReplicas"] = 2
    assert readiness(rc)[0]
    old = {"spec": {"workerGroupSpecs": [{"replicas": 1}]}, "status": {"state": "ready", "readyWorkerReplicas": 1}}
    assert readiness(old)[0]  # KubeRay < 1.3: no conditions


def _node(name: str, gpu: str, efa: str, zone: str = "us-west-2a") -> dict:
    return {
        "metadata": {
            "name": name,
            "labels": {"node.kubernetes.io/instance-type": "g6.12xlarge", "topology.kubernetes.io/zone": zone},
        },
        "status": {"allocatable": {"nvidia.com/gpu": gpu, "vpc.amazonaws.com/efa": efa}},
    }


def _pod(node: str) -> dict:
    return {"metadata": {"labels": {"ray.io/node-type": "worker"}}, "spec": {"nodeName": node}}


def _ds(name: str, ready: int, desired: int) -> dict:
    return {
        "metadata": {"name": name, "namespace": "kube-system"},
        "status": {"numberReady": ready, "desiredNumberScheduled": desired},
    }


@pytest.fixture
def sample() -> tuple[dict, dict]:
    vals = manifest.resolve_values(manifest.load_values(), {"PYTHON_VERSION": "3.11"})
    return manifest.render(manifest.load_values(), {"PYTHON_VERSION": "3.11"}), vals


def test_doctor_passes_the_sample_cluster(sample: tuple[dict, dict]) -> None:
    rc, vals = sample
    checks = evaluate(
        rc,
        [_pod("a"), _pod("b")],
        [_node("a", "4", "1"), _node("b", "4", "1")],
        [_ds("nvidia-device-plugin-daemonset", 2, 2), _ds("aws-efa-k8s-device-plugin-daemonset", 2, 2)],
        vals,
        notebook_ray="2.58.0",
        notebook_python="3.11",
    )
    assert {c.name: c.state for c in checks} == {
        "EFA requested by worker pods": "ok",
        "GPU nodes advertise EFA and GPUs": "ok",
        "EFA and NVIDIA device plugins ready": "ok",
        "GPU nodes in one availability zone": "ok",
        "EFA security group admits itself": "n/a",  # not visible from Kubernetes: said, with how to check
        "NCCL/EFA variables on workers": "ok",
        "/dev/shm on workers": "ok",
        "notebook vs image versions": "ok",
    }


def test_doctor_fails_each_silent_fallback_cause(sample: tuple[dict, dict]) -> None:
    rc, vals = sample
    c = rc["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]
    c["resources"]["limits"].pop("vpc.amazonaws.com/efa")
    c["env"] = [e for e in c["env"] if e["name"] != "FI_PROVIDER"]
    checks = {
        ch.name: ch
        for ch in evaluate(
            rc,
            [_pod("a"), _pod("b")],
            [_node("a", "4", "0"), _node("b", "4", "0", zone="us-west-2b")],
            [_ds("nvidia-device-plugin-daemonset", 2, 2)],
            vals,
            notebook_ray="2.58.0",
            notebook_python="3.13",
        )
    }
    assert checks["EFA requested by worker pods"].state == "fail"
    assert "a: 4 GPU, 0 EFA" in checks["GPU nodes advertise EFA and GPUs"].detail
    assert "EFA device plugin missing" in checks["EFA and NVIDIA device plugins ready"].detail
    assert "aws-efa-k8s-device-plugin" in checks["EFA and NVIDIA device plugins ready"].fix
    assert checks["GPU nodes in one availability zone"].state == "fail"
    assert "FI_PROVIDER=None (want efa)" in checks["NCCL/EFA variables on workers"].detail
    assert checks["notebook vs image versions"].state == "fail"


def test_doctor_on_an_instance_without_efa(sample: tuple[dict, dict]) -> None:
    vals = manifest.resolve_values(manifest.load_values(), {"GPU_NODE_TYPE": "g6.4xlarge"})
    rc = manifest.render(manifest.load_values(), {"GPU_NODE_TYPE": "g6.4xlarge"})
    checks = {
        ch.name: ch.state for ch in evaluate(rc, [], None, None, vals, notebook_ray="2.58.0", notebook_python="3.13")
    }
    assert checks["EFA requested by worker pods"] == "n/a" and checks["NCCL/EFA variables on workers"] == "n/a"
    assert checks["GPU nodes advertise EFA and GPUs"] == "warn"  # nodes not listable: said, not guessed


def test_doctor_reads_devices_from_the_nodes_not_daemonset_names(sample: tuple[dict, dict]) -> None:
    """EKS Auto Mode and Bottlerocket run the device plugins on the node: no DaemonSet, yet the nodes advertise."""
    rc, vals = sample
    nodes = [_node("a", "4", "1"), _node("b", "4", "1")]
    (plugins,) = [
        c
        for c in evaluate(rc, [_pod("a"), _pod("b")], nodes, [], vals, notebook_ray="2.58.0", notebook_python="3.11")
        if c.name == "EFA and NVIDIA device plugins ready"
    ]
    assert plugins.state == "ok" and "the nodes run them" in plugins.detail, plugins


def test_doctor_names_efa_offered_through_dra(sample: tuple[dict, dict]) -> None:
    """EKS >= 1.34 steers new clusters to the EFA DRA driver: vpc.amazonaws.com/efa is then never advertised."""
    rc, vals = sample
    slices = [
        {"spec": {"driver": "efa.networking.k8s.aws", "nodeName": n, "devices": [{"name": "efa0"}]}} for n in "ab"
    ]
    checks = {
        c.name: c
        for c in evaluate(
            rc,
            [_pod("a"), _pod("b")],
            [_node("a", "4", "0"), _node("b", "4", "0")],
            [_ds("nvidia-device-plugin-daemonset", 2, 2)],
            vals,
            notebook_ray="2.58.0",
            notebook_python="3.11",
            resource_slices=slices,
        )
    }
    plugins = checks["EFA and NVIDIA device plugins ready"]
    assert plugins.state == "fail" and "offered through DRA (efa.networking.k8s.aws" in plugins.detail
    assert "ResourceClaim" in plugins.fix and "aws-efa-k8s-device-plugin" in plugins.fix


def test_doctor_before_a_gpu_node_exists(sample: tuple[dict, dict]) -> None:
    """A pool that scales from zero has no GPU node yet: not a failure; the plugin DaemonSets speak for the plugins."""
    rc, vals = sample
    system = {"metadata": {"name": "s", "labels": {"node.kubernetes.io/instance-type": "m7i.xlarge"}}, "status": {}}
    checks = {
        c.name: c
        for c in evaluate(
            rc,
            [],
            [system],
            [_ds("nvidia-device-plugin-daemonset", 0, 0), _ds("aws-efa-k8s-device-plugin-daemonset", 0, 0)],
            vals,
            notebook_ray="2.58.0",
            notebook_python="3.11",
        )
    }
    assert checks["GPU nodes advertise EFA and GPUs"].state == "n/a"
    assert "scales from zero" in checks["GPU nodes advertise EFA and GPUs"].detail
    assert checks["EFA and NVIDIA device plugins ready"].state == "ok", checks["EFA and NVIDIA device plugins ready"]


# ---- what is under way while `up` waits: events as Karpenter, the Cluster Autoscaler and the kubelet write them ----

DLC = "public.ecr.aws/deep-learning-containers/ray:train-ml-cuda-v1.1"
UNSCHEDULABLE = (
    "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector. preemption: 0/1 nodes are "
    "available: 1 Preemption is not helpful for scheduling."
)


def _pending(node: str | None = None, waiting: str | None = None) -> dict:
    pod = {
        "metadata": {"name": "w-1", "labels": {"ray.io/node-type": "worker"}},
        "spec": {"nodeSelector": {"node.kubernetes.io/instance-type": "g6.12xlarge"}},
        "status": {"phase": "Pending"},
    }
    if node:
        pod["spec"]["nodeName"] = node
    else:
        pod["status"]["conditions"] = [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": UNSCHEDULABLE}
        ]
    if waiting:
        pod["status"]["containerStatuses"] = [{"name": "ray-worker", "state": {"waiting": {"reason": waiting}}}]
    return pod


def _ev(reason: str, message: str, at: str, kind: str = "Normal") -> dict:
    return {"reason": reason, "message": message, "type": kind, "lastTimestamp": f"2026-12-03T10:{at}Z"}


def test_a_node_karpenter_is_launching_is_progress_not_a_selector_problem() -> None:
    from datetime import datetime, timezone

    from raynb._cluster.pod_diagnosis import diagnose_pod, progress_of

    events = [
        _ev("FailedScheduling", UNSCHEDULABLE, "00:00", "Warning"),
        _ev("Nominated", "Pod should schedule on: nodeclaim/gpu-x7k2p", "00:02"),
        _ev("FailedScheduling", UNSCHEDULABLE, "01:00", "Warning"),  # the scheduler's retry while the node boots
    ]
    p = progress_of(_pending(), events)
    assert p is not None and p.stage == "provisioning"
    now = datetime(2026, 12, 3, 10, 4, 12, tzinfo=timezone.utc)
    assert p.line(now) == "w-1: Karpenter is launching a node for it (nodeclaim/gpu-x7k2p) for 4m10s"
    assert diagnose_pod(_pending(), events) == []  # no "label the node group" advice for a node on its way
    assert diagnose_pod(_pending(), events[:1])[0].reason == "Unschedulable"  # before the nomination: said


def test_the_cluster_autoscaler_adding_a_node_and_refusing_to() -> None:
    from raynb._cluster.pod_diagnosis import diagnose_pod, progress_of

    up = _ev("TriggeredScaleUp", "pod triggered scale-up: [{eks-gpu-2a-5ec9 0->2 (max: 4)}]", "00:05")
    p = progress_of(_pending(), [up])
    assert p is not None and p.detail == "the Cluster Autoscaler is adding a node ({eks-gpu-2a-5ec9 0->2 (max: 4)})"
    no = _ev(
        "NotTriggerScaleUp",
        "pod didn't trigger scale-up: 1 node(s) didn't match Pod's node affinity/selector, 1 max node group size reached",
        "03:00",
    )
    assert progress_of(_pending(), [up, no]) is None  # the autoscaler gave up after: no longer under way
    (_, refused) = diagnose_pod(_pending(), [up, no])
    assert refused.reason == "NotTriggerScaleUp" and "GPU_NODE_SELECTOR" in refused.hint


def test_an_image_pull_in_progress_and_done() -> None:
    from raynb._cluster.pod_diagnosis import progress_of

    pulling = _ev("Pulling", f'Pulling image "{DLC}"', "00:10")
    p = progress_of(_pending("gpu-0", "ContainerCreating"), [pulling])
    assert p is not None and p.stage == "pulling" and p.detail == f"pulling {DLC} on gpu-0"
    pulled = _ev("Pulled", f'Successfully pulled image "{DLC}" in 3m2.4s (3m2.4s including waiting)', "03:12")
    after = progress_of(_pending("gpu-0", "ContainerCreating"), [pulling, pulled])
    assert after is not None and after.stage == "starting"
    running = _pending("gpu-0")
    running["status"]["containerStatuses"] = [{"name": "ray-worker", "state": {"running": {}}}]
    assert progress_of(running, [pulling, pulled]) is None


def test_the_taint_hint_names_the_value_to_set() -> None:
    from raynb._cluster.pod_diagnosis import diagnose_pod

    pod = _pending()
    msg = "0/2 nodes are available: 2 node(s) had untolerated taint {nvidia.com/gpu: }. preemption: not helpful."
    pod["status"]["conditions"][0]["message"] = msg
    (d,) = diagnose_pod(pod)
    assert "GPU_TOLERATIONS='{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}'" in d.hint, d.hint


def test_a_wait_past_its_timeout_goes_on_while_a_pod_is_provisioned_pulled_or_started() -> None:
    """The moment the nodes an autoscaler launched join, the pods leave "provisioning" for "starting" before they
    run: a wait that stopped there gave up on a cluster seconds from ready (the node-pool test, a loaded host)."""
    from raynb._cluster.kube_api import still_under_way
    from raynb._cluster.pod_diagnosis import progress_of

    nominated = _ev("Nominated", "Pod should schedule on: nodeclaim/gpu-x7k2p", "00:05")
    joined = _pending("gpu-0", "ContainerCreating")  # bound to the node that joined, its container being created
    stages = [progress_of(_pending(), [nominated]), progress_of(joined, [nominated])]
    assert [p.stage for p in stages if p is not None] == ["provisioning", "starting"]
    assert all(still_under_way([p]) for p in stages if p is not None)
    assert not still_under_way([])  # nothing under way: the timeout stands
