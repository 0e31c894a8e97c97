"""The Qwen notebook asks for its checkpoints' bucket before it makes a cluster: on its EKS path with ``SAVE`` on, an
empty ``STORAGE`` is refused by the cluster cell itself, naming the parameter and the IAM it needs -- not at the
training cell's first checkpoint, minutes and a cluster later. The cell's own code runs here, with the parameters
cell's defaults (the notebook with a bucket, on the Kubernetes path:
tests/k8s/test_qwen_notebook_on_kubernetes.py)."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from raynb.errors import UsageError

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "qwen25_finetune_eks.ipynb"


def _cells() -> tuple[str, str]:
    code = [c.source for c in nbformat.read(NOTEBOOK, as_version=4).cells if c.cell_type == "code"]
    params = next(s for s in code if s.startswith("CLUSTER = "))
    cluster = next(s for s in code if "raynb.up(values=VALUES" in s)
    return params, "\n".join(ln for ln in cluster.splitlines() if not ln.startswith("%"))


def test_an_empty_bucket_is_refused_before_the_cluster_is_made() -> None:
    params, cluster = _cells()
    names: dict = {}
    exec(params, names)  # the notebook's defaults: CLUSTER = "eks", SAVE = True, STORAGE = ""
    assert names["CLUSTER"] == "eks" and names["SAVE"] is True and names["STORAGE"] == ""
    with pytest.raises(UsageError) as e:  # raynb.up's own errors (no Kubernetes here) would say something else
        exec(cluster, names)
    assert "STORAGE is empty" in e.value.what
    assert 'STORAGE = "s3://BUCKET/PREFIX"' in e.value.fix and "s3:PutObject" in e.value.fix
    assert "SERVICE_ACCOUNT" in e.value.fix
