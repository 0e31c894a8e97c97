"""The pure Kubernetes parts: pending-pod diagnosis (on pods and events captured from the real test control plane,
tests/fixtures/k8s), spec differences, readiness from conditions, and the doctor's EFA checklist."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from raynb import manifest
from raynb._doctor_kube import evaluate
from raynb._kube_state import readiness, spec_differences
from raynb._pod_diagnosis import diagnose_pods, is_hopeless

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
    assert "EFA device plugin" in d.hint and "g6e.12xlarge" in d.hint


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
            [_node("a", "4", "0"), _node("b", "4", "1", zone="us-west-2b")],
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
    vals = manifest.resolve_values(manifest.load_values(), {"GPU_NODE_TYPE": "g6e.12xlarge"})
    rc = manifest.render(manifest.load_values(), {"GPU_NODE_TYPE": "g6e.12xlarge"})
    checks = {
        ch.name: ch.state for ch in evaluate(rc, [], None, None, vals, notebook_ray="2.58.0", notebook_python="3.13")
    }
    assert checks["EFA requested by worker pods"] == "n/a" and checks["NCCL/EFA variables on workers"] == "n/a"
    assert checks["GPU nodes advertise EFA and GPUs"] == "warn"  # nodes not listable: said, not guessed
