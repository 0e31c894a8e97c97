"""A kernel running inside a pod (JupyterHub on the same cluster): no kubeconfig, the pod's service account token.
The token is a real one, issued by the API server's TokenRequest for a ServiceAccount bound to manifests/rbac.yaml's
Role; only the mount point is a temp dir instead of /var/run/secrets/kubernetes.io/serviceaccount."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import HERE_PY, VALUES, apply, delete

import raynb
from raynb._cluster import kube_api as kube
from raynb._cluster import kube_connect
from raynb.manifest import render_rbac


def test_in_cluster_service_account(clean, tmp_path: Path, monkeypatch) -> None:
    from kubernetes import client

    stack = clean
    rbac = render_rbac(None, {"RBAC_SUBJECT": "ServiceAccount:notebook"})  # manifests/rbac.yaml, for this SA
    sa = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "notebook", "namespace": "ray-train"}}
    for d in [sa, *rbac]:
        apply(stack, d)
    try:
        tr = client.CoreV1Api(stack.api()).create_namespaced_service_account_token(
            "notebook",
            "ray-train",
            body={
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": {"expirationSeconds": 3600},
            },
        )
        mount = tmp_path / "serviceaccount"
        mount.mkdir()
        (mount / "token").write_text(tr.status.token)
        (mount / "ca.crt").write_bytes((stack.dir / "pki" / "ca.crt").read_bytes())
        (mount / "namespace").write_text("ray-train")
        monkeypatch.setattr(kube_connect, "SERVICE_ACCOUNT_DIR", mount)
        monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
        monkeypatch.setenv("KUBERNETES_SERVICE_PORT", stack.server.rsplit(":", 1)[1])
        monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
        monkeypatch.setenv("HOME", str(tmp_path))
        monkeypatch.setenv("RAYNB_HOME", str(tmp_path / "raynb"))  # a kernel in a pod: no embedded head beside it

        target = kube_connect.connect_api()
        assert target.context is None and target.default_namespace == "ray-train"
        c = raynb.up(
            values=VALUES, set={"PYTHON_VERSION": HERE_PY}, connect=False, timeout=60, progress=lambda _m: None
        )
        assert sorted(p.role for p in c.status().kube.pods) == ["head", "worker", "worker"]
        c.down(progress=lambda _m: None)
        with pytest.raises(kube.KubeError) as e:  # the Role is namespaced: other namespaces are refused, and said so
            raynb.clusters(namespace="kube-system")
        assert "does not allow the pod's service account" in e.value.what and "list rayclusters.ray.io" in e.value.what
    finally:
        for d in [*rbac, sa]:
            delete(stack, d["apiVersion"], d["kind"], d["metadata"]["name"], "ray-train")
