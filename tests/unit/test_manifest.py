"""manifest.py: the DLC RayCluster from template + values + presets, checked against KubeRay's CRDs."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from raynb.manifest import MANIFESTS, ManifestError, load_values, render, render_yaml, validate

CRDS = Path(__file__).resolve().parents[1] / "fixtures" / "crds"  # vendored: see its README for source and licence
CRD_FILES = sorted(CRDS.glob("ray.io_rayclusters.v*.yaml"))


def _worker(obj: dict) -> dict:
    return obj["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]


def _env(c: dict) -> dict[str, str]:
    return {e["name"]: e["value"] for e in c["env"]}


def test_defaults_are_the_samples_cluster() -> None:
    obj = render()
    assert (obj["apiVersion"], obj["kind"]) == ("ray.io/v1", "RayCluster")
    assert obj["metadata"]["namespace"] == "ray-train" and obj["spec"]["rayVersion"] == "2.58.0"
    head = obj["spec"]["headGroupSpec"]["template"]["spec"]
    assert head["nodeSelector"] == {"role": "system"}
    hc = head["containers"][0]
    assert hc["image"] == "public.ecr.aws/deep-learning-containers/ray:train-ml-cuda-v1.1"
    assert {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"} in hc["env"]
    assert sorted(p["containerPort"] for p in hc["ports"]) == [6379, 8265, 10001]
    group = obj["spec"]["workerGroupSpecs"][0]
    assert group["replicas"] == 2 and group["rayStartParams"]["num-gpus"] == "4"
    w = _worker(obj)
    assert w["resources"]["limits"] == {
        "nvidia.com/gpu": "4",
        "vpc.amazonaws.com/efa": "1",
        "cpu": "40",
        "memory": "160Gi",
    }
    assert _env(w) == {
        "NCCL_DEBUG": "INFO",
        "NCCL_SOCKET_IFNAME": "eth0",
        "FI_PROVIDER": "efa",
        "NCCL_NET_PLUGIN": "ofi",
    }  # g6: EFA without GPUDirect RDMA
    shm = next(v for v in obj["spec"]["workerGroupSpecs"][0]["template"]["spec"]["volumes"] if v["name"] == "dshm")
    assert shm["emptyDir"]["medium"] == "Memory"


def test_one_variable_moves_to_another_instance() -> None:
    p5 = _worker(render(overrides={"GPU_NODE_TYPE": "p5.48xlarge"}))
    assert p5["resources"]["requests"]["nvidia.com/gpu"] == "8"
    assert p5["resources"]["requests"]["vpc.amazonaws.com/efa"] == "32"
    assert _env(p5)["FI_EFA_USE_DEVICE_RDMA"] == "1"
    assert p5["resources"]["limits"]["hugepages-2Mi"] == "5120Mi"  # AWS's EFA examples for p4d/p5
    assert "hugepages-2Mi" not in _worker(render())["resources"]["limits"]  # g6: none
    p4d = render(overrides={"GPU_NODE_TYPE": "p4d.24xlarge"})
    assert p4d["spec"]["workerGroupSpecs"][0]["rayStartParams"]["num-gpus"] == "8"
    assert _worker(p4d)["resources"]["requests"]["vpc.amazonaws.com/efa"] == "4"


def test_an_instance_without_efa_drops_the_request_and_the_variables() -> None:
    w = _worker(render(overrides={"GPU_NODE_TYPE": "g6.4xlarge"}))
    assert "vpc.amazonaws.com/efa" not in w["resources"]["requests"]
    assert "vpc.amazonaws.com/efa" not in w["resources"]["limits"]
    assert "FI_PROVIDER" not in _env(w) and "NCCL_NET_PLUGIN" not in _env(w) and _env(w)["NCCL_DEBUG"] == "INFO"


def test_explicit_overrides_win_over_the_preset() -> None:
    w = _worker(render(overrides={"GPU_NODE_TYPE": "p5.48xlarge", "WORKER_CPU": "100"}))
    assert w["resources"]["requests"]["cpu"] == "100" and w["resources"]["requests"]["nvidia.com/gpu"] == "8"


def test_unknown_instance_type_and_missing_values_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(ManifestError) as ei:
        render(overrides={"GPU_NODE_TYPE": "g9.huge"})
    assert "g9.huge" in ei.value.message and "p5.48xlarge" in ei.value.message
    bad = tmp_path / "values.env"
    bad.write_text("GPU_NODE_TYPE=g6.12xlarge\nthis is not a value\n")
    with pytest.raises(ManifestError, match="Line 2"):
        load_values(bad)
    partial = tmp_path / "partial.env"
    partial.write_text("GPU_NODE_TYPE=g6.12xlarge\n")
    with pytest.raises(ManifestError, match="DLC_IMAGE"):
        render(load_values(partial))


@pytest.mark.skipif(
    shutil.which("envsubst") is None, reason="envsubst (gettext-base) is not installed: make setup installs it"
)
def test_plain_envsubst_gives_the_same_cluster() -> None:
    env = {**os.environ, **load_values(), "RAY_CLUSTER_NAME": render()["metadata"]["name"]}  # as the header says
    text = subprocess.run(
        ["envsubst"],
        input=(MANIFESTS / "raycluster.yaml").read_text(),
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    theirs = yaml.safe_load(text)
    ours = render()
    ours["metadata"].pop("annotations")
    assert theirs == ours


@pytest.mark.parametrize(
    "itype",
    [
        "g6.4xlarge",
        "g6.12xlarge",
        "g6e.12xlarge",
        "p4d.24xlarge",
        "p5.48xlarge",
        "p5e.48xlarge",
        "p5en.48xlarge",
        "p6-b200.48xlarge",
    ],
)
def test_every_preset_validates_against_kuberay_v140_and_v170(itype: str) -> None:
    """As strict field validation checks it: with token auth (the default) against v1.7.0; with auth off against
    both -- v1.4.0 has no authOptions, so a manifest that writes one (even `mode: disabled`) is refused there."""
    crds = {p.name: p for p in CRD_FILES}
    v140, v170 = crds["ray.io_rayclusters.v1.4.0.yaml"], crds["ray.io_rayclusters.v1.7.0.yaml"]
    validate(render(overrides={"GPU_NODE_TYPE": itype}), v170)
    for crd in (v140, v170):
        validate(render(overrides={"GPU_NODE_TYPE": itype, "RAY_AUTH_MODE": "disabled"}), crd)


def test_token_auth_against_kuberay_before_1_5_1_is_refused_with_the_two_ways_on() -> None:
    """The field v1.4.0 lacks is named with the release that brought it, and the fix gives the upgrade and --no-auth
    (plain JSON Schema let it through: the cluster would have run without the token asked for)."""
    (v140,) = [p for p in CRD_FILES if p.name == "ray.io_rayclusters.v1.4.0.yaml"]
    with pytest.raises(ManifestError) as ei:
        validate(render(), v140)
    assert "spec.authOptions: not in this CRD (needs KubeRay 1.5.1" in (ei.value.saw or ""), ei.value.saw
    assert "helm upgrade" in (ei.value.fix or "") and "RAY_AUTH_MODE=disabled" in (ei.value.fix or "")


def test_validation_names_what_is_wrong() -> None:
    obj = render()
    obj["spec"]["workerGroupSpecs"][0]["replicas"] = "two"
    with pytest.raises(ManifestError) as ei:
        validate(obj, CRD_FILES[0])
    assert "workerGroupSpecs.0.replicas" in ei.value.message


def test_the_packaged_manifests_are_the_user_facing_ones() -> None:
    """raynb/manifests (what a wheel ships) and the top-level manifests/ (what kubectl users read) are one set."""
    top = Path(__file__).resolve().parents[2] / "manifests"
    names = sorted(p.name for p in top.iterdir())
    assert (
        names
        == sorted(p.name for p in MANIFESTS.iterdir())
        == ["head-identity.yaml", "networkpolicy.yaml", "presets.yaml", "raycluster.yaml", "rbac.yaml", "values.env"]
    )
    for name in names:
        assert (MANIFESTS / name).read_bytes() == (top / name).read_bytes(), f"{name} differs: copy manifests/ over"


def test_gpu_workers_tolerate_the_gpu_taint_and_select_by_instance_type() -> None:
    """The defaults schedule on a Karpenter / EKS Auto Mode GPU pool: tainted nvidia.com/gpu:NoSchedule, no role label."""
    spec = render()["spec"]["workerGroupSpecs"][0]["template"]["spec"]
    assert spec["nodeSelector"] == {"node.kubernetes.io/instance-type": "g6.12xlarge"}
    assert spec["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    moved = render(overrides={"GPU_NODE_TYPE": "p5.48xlarge", "GPU_NODE_SELECTOR": "karpenter.sh/nodepool: gpu"})
    spec = moved["spec"]["workerGroupSpecs"][0]["template"]["spec"]
    assert spec["nodeSelector"] == {"node.kubernetes.io/instance-type": "p5.48xlarge", "karpenter.sh/nodepool": "gpu"}
    head = render(overrides={"SYSTEM_NODE_SELECTOR": "", "SYSTEM_TOLERATIONS": "{key: dedicated, operator: Exists}"})
    assert head["spec"]["headGroupSpec"]["template"]["spec"]["nodeSelector"] == {}
    assert head["spec"]["headGroupSpec"]["template"]["spec"]["tolerations"] == [
        {"key": "dedicated", "operator": "Exists"}
    ]


def test_a_values_file_from_before_the_selectors_keeps_its_role_labels(tmp_path: Path) -> None:
    old = {k: v for k, v in load_values().items() if "SELECTOR" not in k and "TOLERATIONS" not in k}
    obj = render({**old, "SYSTEM_NODE_ROLE": "system", "GPU_NODE_ROLE": "gpu-worker"})
    assert obj["spec"]["headGroupSpec"]["template"]["spec"]["nodeSelector"] == {"role": "system"}
    spec = obj["spec"]["workerGroupSpecs"][0]["template"]["spec"]
    assert spec["nodeSelector"] == {"node.kubernetes.io/instance-type": "g6.12xlarge", "role": "gpu-worker"}
    assert spec["tolerations"][0]["key"] == "nvidia.com/gpu"


def test_placement_values_that_kubernetes_would_refuse_are_named() -> None:
    with pytest.raises(ManifestError) as e:
        render(overrides={"GPU_NODE_SELECTOR": "gpu: true"})
    assert "GPU_NODE_SELECTOR" in e.value.message and "quote" in e.value.fix
    with pytest.raises(ManifestError) as e:
        render(overrides={"GPU_TOLERATIONS": "nvidia.com/gpu:NoSchedule"})
    assert "GPU_TOLERATIONS" in e.value.message and "operator: Exists" in e.value.fix


def test_a_template_of_your_own_gets_the_same_values(tmp_path: Path) -> None:
    mine = tmp_path / "mine.yaml"
    text = (MANIFESTS / "raycluster.yaml").read_text()
    head = "        containers:\n          - name: ray-head"
    assert head in text
    mine.write_text(text.replace(head, "        priorityClassName: high\n" + head))
    obj = yaml.safe_load(render_yaml(None, {"GPU_NODE_COUNT": 3}, template=mine))
    assert obj["spec"]["headGroupSpec"]["template"]["spec"]["priorityClassName"] == "high"
    assert obj["spec"]["workerGroupSpecs"][0]["replicas"] == 3


def test_token_auth_and_the_network_policy_by_default() -> None:
    """KubeRay >= 1.5 authOptions: Ray's token in every pod; the policy admits the cluster's own pods only."""
    from raynb.manifest import render_objects, resolve_values, values_from_spec

    rc = render()
    assert rc["spec"]["authOptions"] == {"mode": "token"}
    assert values_from_spec(rc)["RAY_AUTH_MODE"] == "token"
    assert (
        values_from_spec({"metadata": {}, "spec": {"headGroupSpec": rc["spec"]["headGroupSpec"]}})["RAY_AUTH_MODE"]
        == "disabled"
    )  # a RayCluster from before authOptions
    name = rc["metadata"]["name"]
    np = render_objects("networkpolicy.yaml", resolve_values())[0]
    assert np["spec"]["podSelector"] == {"matchLabels": {"ray.io/cluster": name}}
    assert np["spec"]["ingress"] == [{"from": [{"podSelector": {"matchLabels": {"ray.io/cluster": name}}}]}]
    off = render(overrides={"RAY_AUTH_MODE": "disabled"})
    assert "authOptions" not in off["spec"] and values_from_spec(off)["RAY_AUTH_MODE"] == "disabled"


def test_the_rbac_role_reads_its_clusters_secret_only() -> None:
    """manifests/rbac.yaml rendered for one user and cluster: `get` on the Secret named after the cluster (KubeRay's
    token) and no other; the subject as given; a malformed subject refused with the form to use."""
    from raynb.manifest import render_rbac

    role, binding = render_rbac(None, {"RAY_CLUSTER_NAME": "ray-train-alice", "RBAC_SUBJECT": "User:alice"})
    (secrets,) = [r for r in role["rules"] if "secrets" in r["resources"]]
    assert secrets == {
        "apiGroups": [""],
        "resources": ["secrets"],
        "resourceNames": ["ray-train-alice"],
        "verbs": ["get"],
    }
    assert role["metadata"] == {"name": "raynb-ray-train-alice", "namespace": "ray-train"}
    assert binding["roleRef"]["name"] == "raynb-ray-train-alice"
    assert binding["subjects"] == [{"kind": "User", "name": "alice", "apiGroup": "rbac.authorization.k8s.io"}]
    (_, sa) = render_rbac(None, {"RBAC_SUBJECT": "ServiceAccount:notebook"})
    assert sa["subjects"] == [{"kind": "ServiceAccount", "name": "notebook", "namespace": "ray-train"}]
    assert render_rbac()[1]["subjects"][0]["name"] == "raynb-users"  # the default group
    with pytest.raises(ManifestError, match="User:NAME"):
        render_rbac(None, {"RBAC_SUBJECT": "alice"})
