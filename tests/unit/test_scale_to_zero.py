"""Scale to zero on Kubernetes, in the pure parts: GPU_MIN_NODES below GPU_NODE_COUNT makes the workers an autoscaled
group (KubeRay's in-tree autoscaler, IDLE_TIMEOUT_S), a run that fits only at full size is accepted and said so,
and the cost says what runs now and at most what it can cost. (The autoscaler itself needs a real Ray head inside
the head pod: tests/k8s shows the operator setting it up; the scaling is EKS's and not run here.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from raynb._cluster.kube_state import KubeStatus, PodRow, RayClusterRef
from raynb._cluster.status import ClusterStatus
from raynb._runs.resources import check_resources
from raynb._shared.cost import hourly_cost
from raynb.display.cluster_view import cost_text
from raynb.errors import InsufficientResourcesError
from raynb.manifest import ManifestError, load_presets, render, resolve_values, validate, values_from_spec

CRDS = sorted((Path(__file__).resolve().parents[1] / "fixtures" / "crds").glob("ray.io_rayclusters.v*.yaml"))


def _group(obj: dict) -> tuple[int, int, int]:
    g = obj["spec"]["workerGroupSpecs"][0]
    return g["replicas"], g["minReplicas"], g["maxReplicas"]


def test_the_default_is_the_samples_fixed_size_and_a_count_alone_moves_it() -> None:
    obj = render()
    assert obj["spec"]["enableInTreeAutoscaling"] is False and _group(obj) == (2, 2, 2)
    assert _group(render(overrides={"GPU_NODE_COUNT": "3"})) == (3, 3, 3)  # not 2..3: the file meant a fixed size


def test_min_nodes_below_the_count_autoscale_the_workers_from_zero() -> None:
    obj = render(overrides={"GPU_MIN_NODES": "0", "IDLE_TIMEOUT_S": "300"})
    assert obj["spec"]["enableInTreeAutoscaling"] is True
    assert obj["spec"]["autoscalerOptions"] == {"idleTimeoutSeconds": 300}
    assert _group(obj) == (0, 0, 2)
    for crd in CRDS:  # KubeRay 1.4 and 1.7 take it (1.4 with auth off: it has no token auth)
        validate(render(overrides={"GPU_MIN_NODES": "0", "IDLE_TIMEOUT_S": "300", "RAY_AUTH_MODE": "disabled"}), crd)
    back = values_from_spec(obj)  # from_name / attach read it back from the live spec
    assert (back["GPU_NODE_COUNT"], back["GPU_MIN_NODES"], back["AUTOSCALING"], back["IDLE_TIMEOUT_S"]) == (
        "2",
        "0",
        "true",
        "300",
    )


@pytest.mark.parametrize("bad", [{"GPU_MIN_NODES": "3"}, {"GPU_MIN_NODES": "-1"}, {"IDLE_TIMEOUT_S": "soon"}])
def test_sizes_that_cannot_be_are_said_before_any_api_call(bad: dict[str, str]) -> None:
    with pytest.raises(ManifestError) as e:
        resolve_values(overrides=bad)
    assert "GPU_MIN_NODES" in e.value.what and "--set GPU_MIN_NODES=0" in (e.value.fix or "")


def test_a_run_that_fits_at_full_size_is_accepted_and_said_and_one_beyond_it_is_not() -> None:
    now = {"CPU": 2.0}  # the head alone: no GPU node yet
    full = {"CPU": 82.0, "GPU": 8.0}
    note = check_resources(8, True, 1.0, total=now, grows_to=full)
    assert note is not None and "0 GPUs and 2 CPUs now" in note and "autoscaler adds worker nodes" in note
    assert check_resources(8, True, 1.0, total=full, grows_to=full) is None  # grown: nothing to say
    with pytest.raises(InsufficientResourcesError) as e:
        check_resources(16, True, 1.0, total=now, grows_to=full)
    assert "has 8 GPUs at full size" in e.value.what and "0 GPUs now" in (e.value.saw or "")
    assert e.value.fix == "use --workers 8"
    with pytest.raises(InsufficientResourcesError):  # a fixed-size cluster: what it has now is all it has
        check_resources(8, True, 1.0, total=now)


def test_the_cost_of_an_autoscaled_cluster_is_what_runs_now_and_at_most_the_full_size() -> None:
    vals = resolve_values(overrides={"GPU_MIN_NODES": "0"})
    cost = hourly_cost(vals, load_presets())
    assert cost is not None and (cost.min_nodes, cost.nodes) == (0, 2)
    assert cost.text() == "0–2 × g6.12xlarge, up to $9.20/h ($4.60 per node-hour, on-demand list price, us-east-1)"
    one = PodRow("w-1", "worker", "Running", True, "gpu-node-1", "4", "1")
    waiting = PodRow("w-2", "worker", "Pending", False, "-", "4", "1")
    head = PodRow("h", "head", "Running", True, "system-1", "0", "0")
    kube = KubeStatus(RayClusterRef("ray-train", "ray-train-me"), "ready", "img", [head, one, waiting], [], 1_000_000.0)
    st = ClusterStatus("ray-train-me", "kubernetes", "ray://127.0.0.1:1", None, kube=kube, cost=cost)
    line = cost_text(st, now=1_000_000.0 + 3600)
    assert "1 on nodes now ≈ $4.60/h" in line and "up 1:00:00, at most $9.20 so far" in line, line


def test_a_cluster_its_autoscaler_grew_is_the_same_cluster_to_up() -> None:
    from raynb._cluster.kube_state import spec_differences
    from raynb._cluster.kubernetes import _compared

    vals = resolve_values(overrides={"GPU_MIN_NODES": "0"})
    wanted = render(overrides={"GPU_MIN_NODES": "0"})["spec"]
    grown = {**wanted, "workerGroupSpecs": [{**wanted["workerGroupSpecs"][0], "replicas": 2}]}
    assert spec_differences(_compared(wanted, vals), grown) == []
    fixed = resolve_values()
    assert spec_differences(_compared(wanted, fixed), grown) == ["spec.workerGroupSpecs[0].replicas: 2 → 0"]
