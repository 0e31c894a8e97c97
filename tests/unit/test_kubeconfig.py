"""Reading kubeconfigs as kubectl does: every file KUBECONFIG lists, merged; a credential command the kernel cannot
run is said as such (not sent on unauthenticated and reported as RBAC)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from raynb._cluster import kube_api as kube
from raynb._cluster import kube_connect


def _kubeconfig(path: Path, name: str, user: dict) -> str:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": name, "cluster": {"server": f"https://{name}.example.invalid:6443"}}],
                "users": [{"name": f"{name}-user", "user": user}],
                "contexts": [{"name": name, "context": {"cluster": name, "user": f"{name}-user"}}],
                "current-context": name,
            }
        )
    )
    return str(path)


def test_every_file_kubeconfig_lists_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = _kubeconfig(tmp_path / "a.yaml", "dev", {"token": "t"})
    second = _kubeconfig(tmp_path / "b.yaml", "eks-prod", {"token": "u"})
    monkeypatch.setenv("KUBECONFIG", os.pathsep.join([first, str(tmp_path / "missing.yaml"), second]))
    assert kube_connect.connect_api().context == "dev"  # the first file's current context
    t = kube_connect.connect_api(context="eks-prod")  # a context from the second file
    assert t.server == "https://eks-prod.example.invalid:6443"


def test_a_credential_command_not_on_the_kernels_path_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    exec_user = {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1beta1",
            "command": "aws-cli-that-is-not-installed",
            "args": ["eks", "get-token", "--cluster-name", "prod"],
        }
    }
    monkeypatch.setenv("KUBECONFIG", _kubeconfig(tmp_path / "eks.yaml", "eks", exec_user))
    with pytest.raises(kube.KubeError) as e:
        kube_connect.connect_api()
    assert "`aws-cli-that-is-not-installed`" in e.value.what and "PATH" in e.value.saw
    assert "pip install awscli" in e.value.fix
