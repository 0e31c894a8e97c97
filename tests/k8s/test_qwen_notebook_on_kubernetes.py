"""The Qwen2.5 notebook top to bottom, once in the suite, on its EKS path (CLUSTER="eks"): `raynb.up(values=...)`
against the real control plane and KubeRay, doctor with the NVIDIA and EFA device plugins running as real DaemonSets on
the kwok GPU nodes, a tiny Qwen2 trained through the port-forward until its loss falls, the weights saved as a Ray
Train checkpoint in the bucket the notebook asks for (STORAGE: a real S3 server, SeaweedFS, standing in for S3), the
EFA-vs-TCP section (the probe's two runs and the TCP rerun), the warm cells, and `%raycluster down`. Its embedded path
(CLUSTER="local") is the quickstart's: `up --local` and `down` from a notebook (tests/packaging).

Modelled: the head pod is a local Ray head (CPU workers, gloo), so no EFA and no L4s — the values file keeps the
sample's g6.12xlarge with EFA, which is what doctor checks."""

from __future__ import annotations

import json
import re
from pathlib import Path

import nbformat
from conftest import HERE_PY, NAME, ROOT, apply, delete

from raynb._cluster import kube_api as kube
from raynb._cluster import kube_connect
from raynb.notebook import execute
from tests.notebook.qwen_checks import check_warm_section
from tests.s3.server import S3Server, s3_server

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


def test_qwen_notebook_on_the_kubernetes_path(head_behind_pods, clean, tmp_path: Path, artifacts: Path) -> None:
    with s3_server(tmp_path / "s3") as s3:  # the bucket the notebook asks for (STORAGE); SeaweedFS stands in for S3
        _run_the_notebook(clean, tmp_path, artifacts, s3)


def _run_the_notebook(clean, tmp_path: Path, artifacts: Path, s3: S3Server) -> None:
    plugins = ["nvidia-device-plugin-daemonset", "aws-efa-k8s-device-plugin-daemonset"]
    for p in plugins:
        apply(clean, _plugin(p))
    values = tmp_path / "values.env"
    values.write_text((ROOT / "manifests" / "values.env").read_text() + f"\nPYTHON_VERSION={HERE_PY}\n")
    out = artifacts / "qwen25-tiny-kubernetes.ipynb"
    params = {
        "CLUSTER": "eks",
        "VALUES": str(values),
        "STORAGE": s3.uri("qwen"),
        "WORKERS": 2,
        "GPU": False,
        "PRETRAINED": False,
        "TINY": True,
        "SEQ_LEN": 64,
        "BATCH": 8,
        "STEPS": 120,
        "WARMUP": 5,
        "LR": 3e-3,
        "COMPILE": False,
        "OUTPUT_DIR": str(tmp_path / "weights"),
        "PROBE_SIZES": [1 << 18, 1 << 20],
    }
    try:
        summary = execute(NOTEBOOK, out, params, cwd=NOTEBOOK.parent)
    finally:
        for p in plugins:
            delete(clean, "apps/v1", "DaemonSet", p, "kube-system")
    assert summary.errors == []
    names = {r["name"]: r for r in summary.runs}
    main = next(r for n, r in names.items() if n.startswith("raytrain-"))
    assert main["status"] == "succeeded" and main["step"] == 120
    assert names["qwen-tcp"]["status"] == "succeeded"  # COMPARE_TCP: the run again with TCP_ENV
    assert names["raynb-bench"]["status"] == names["raynb-bench-tcp"]["status"] == "succeeded"
    cells = nbformat.read(out, as_version=4).cells
    text = "\n".join(json.dumps(c.get("outputs", []), ensure_ascii=False) for c in cells)
    m = re.search(r"loss (\d+\.\d+) -> (\d+\.\d+) over 120 steps", text)
    assert m and float(m[2]) < float(m[1]) * 0.6, "the offline corpus must be learnable"
    assert (tmp_path / "weights" / "config.json").exists()
    assert any((tmp_path / "weights").glob("*.safetensors"))
    m = re.search(r'fine-tuned weights: ([^\s\\"]+)', text)  # the Ray Train checkpoint, on the S3 server
    assert m and m[1].startswith("raynb/qwen/"), text[-2000:]
    assert s3.filesystem().get_file_info(f"{m[1]}/config.json").size > 0
    assert "port-forward 127.0.0.1:" in text and "ready after" in text
    doctor = re.findall(r"([✓✗!–]) ([^:\\]+):", text)
    states = {name: mark for mark, name in doctor}
    assert states.get("EFA and NVIDIA device plugins ready") == "✓", states
    assert states.get("EFA requested by worker pods") == "✓" and states.get("notebook vs image versions") == "✓"
    assert "✗" not in states.values(), states
    check_warm_section(cells, steps=120)  # warm workers through the port-forward
    assert "deleted" in text  # %raycluster down
    assert kube.get_raycluster(kube_connect.connect_api(), kube.RayClusterRef(NAME, "ray-train")) is None
