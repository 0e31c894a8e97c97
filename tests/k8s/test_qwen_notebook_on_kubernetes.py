"""The Qwen2.5 notebook top to bottom on its EKS path (CLUSTER="eks"): `raynb.up(values=...)` against the real control
plane and KubeRay, doctor with the NVIDIA and EFA device plugins running as real DaemonSets on the kwok GPU nodes, a
tiny Qwen2 trained through the port-forward, the warm cells, and `%raycluster down`. The EFA-vs-TCP section
(COMPARE_TCP: the probe's two runs and the TCP rerun) runs on the embedded path only (tests/notebook/
test_qwen_notebook.py): past the connection it makes the same Ray Client calls, and its three cold worker groups
cost this test about two minutes.

Modelled: the head pod is a local Ray head (CPU workers, gloo), so no EFA and no L4s — the values file keeps the
sample's g6.12xlarge with EFA, which is what doctor checks."""

from __future__ import annotations

import json
import re
from pathlib import Path

import nbformat
from conftest import HERE_PY, NAME, ROOT, apply, delete

from raynb import _kube_api as kube
from raynb.notebook import execute
from tests.notebook.qwen_checks import check_warm_section

NOTEBOOK = ROOT / "notebooks" / "qwen25_finetune_eks.ipynb"


def _plugin(name: str) -> dict:
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": "kube-system"},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "nodeSelector": {"karpenter.sh/nodepool": "gpu"},
                    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                    "containers": [{"name": "plugin", "image": f"example.invalid/{name}:1"}],
                },
            },
        },
    }


def test_qwen_notebook_on_the_kubernetes_path(
    head_behind_pods, clean, shared_volume, tmp_path: Path, artifacts: Path
) -> None:
    plugins = ["nvidia-device-plugin-daemonset", "aws-efa-k8s-device-plugin-daemonset"]
    for p in plugins:
        apply(clean, _plugin(p))
    values = tmp_path / "values.env"
    shared = "".join(f"{k}={v}\n" for k, v in shared_volume.items())  # checkpoints on the claim every pod mounts
    values.write_text((ROOT / "manifests" / "values.env").read_text() + f"\nPYTHON_VERSION={HERE_PY}\n{shared}")
    out = artifacts / "qwen25-tiny-kubernetes.ipynb"
    params = {
        "CLUSTER": "eks",
        "VALUES": str(values),
        "WORKERS": 2,
        "GPU": False,
        "PRETRAINED": False,
        "TINY": True,
        "SEQ_LEN": 64,
        "BATCH": 8,
        "STEPS": 60,
        "WARMUP": 5,
        "LR": 3e-3,
        "COMPILE": False,
        "COMPARE_TCP": False,
    }
    try:
        summary = execute(NOTEBOOK, out, params, cwd=NOTEBOOK.parent)
    finally:
        for p in plugins:
            delete(clean, "apps/v1", "DaemonSet", p, "kube-system")
    assert summary.errors == []
    main = next(r for r in summary.runs if r["name"].startswith("raytrain-"))
    assert not any(r["name"].startswith(("raynb-bench", "qwen-tcp")) for r in summary.runs), summary.runs
    assert main["status"] == "succeeded" and main["step"] == 60
    cells = nbformat.read(out, as_version=4).cells
    text = "\n".join(json.dumps(c.get("outputs", []), ensure_ascii=False) for c in cells)
    assert "port-forward 127.0.0.1:" in text and "ready after" in text
    doctor = re.findall(r"([✓✗!–]) ([^:\\]+):", text)
    states = {name: mark for mark, name in doctor}
    assert states.get("EFA and NVIDIA device plugins ready") == "✓", states
    assert states.get("EFA requested by worker pods") == "✓" and states.get("notebook vs image versions") == "✓"
    assert "✗" not in states.values(), states
    check_warm_section(cells, steps=60)  # warm workers through the port-forward
    assert "deleted" in text  # %raycluster down
    assert kube.get_raycluster(kube.connect_api(), kube.RayClusterRef(NAME, "ray-train")) is None
