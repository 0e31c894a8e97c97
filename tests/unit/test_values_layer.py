"""The values file is a configuration layer (flag > %config > RAYNB_* > values file > default) once a Kubernetes
cluster is current: STRICT_EFA, STORAGE_PATH and MAX_FAILURES reach runs; EFA_PER_NODE makes sockets count as a fallback."""

from __future__ import annotations

import pytest

from raynb import _current as cluster
from raynb._cluster.cluster import Cluster
from raynb._cluster.kube_state import RayClusterRef
from raynb._cluster.kubernetes import KubernetesBackend


@pytest.fixture
def kube_cluster(monkeypatch):
    backend = KubernetesBackend(
        target=None,
        ref=RayClusterRef("ray-train-cluster", "ray-train"),  # type: ignore[arg-type]
        values={
            "STRICT_EFA": "true",
            "STORAGE_PATH": "s3://bucket/runs",
            "MAX_FAILURES": "2",
            "EFA_PER_NODE": "1",
            "GPUDIRECT_RDMA": "false",
        },
    )
    c = Cluster(backend)
    monkeypatch.setattr(cluster, "_current", c)
    return c


def test_values_file_defaults_reach_run_settings(kube_cluster, monkeypatch) -> None:
    monkeypatch.delenv("RAYNB_STRICT_EFA", raising=False)
    s = cluster.resolve_settings({"workers": 8})
    assert s.strict_efa is True and s.storage_path == "s3://bucket/runs" and s.workers == 8 and s.max_failures == 2
    assert cluster.resolve_settings({"strict_efa": False}).strict_efa is False  # a flag wins
    monkeypatch.setenv("RAYNB_STORAGE_PATH", "/mnt/runs")
    assert cluster.resolve_settings().storage_path == "/mnt/runs"  # the environment wins over the values file
    assert kube_cluster.backend.efa_expected() == (True, False)


def test_no_values_layer_without_a_kubernetes_cluster(monkeypatch) -> None:
    monkeypatch.setattr(cluster, "_current", None)
    monkeypatch.delenv("RAYNB_STRICT_EFA", raising=False)
    assert cluster.resolve_settings().strict_efa is False
