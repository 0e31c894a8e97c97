"""The real Kubernetes control plane (tests/k8s/controlplane.py), once per test session.

Built from Go modules on first use (minutes cold, seconds warm); skipped with the reason printed where Go is missing
and nothing was built. CI has Go: there these tests run.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import controlplane  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
VALUES = str(ROOT / "manifests" / "values.env")
#: The test "image" is this machine's Ray and Python (the port-forward goes to a real local head).
HERE_PY = f"{sys.version_info[0]}.{sys.version_info[1]}"


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[controlplane.Stack]:
    if not controlplane.built():
        if shutil.which("go") is None:
            pytest.skip("Go is not installed and the control plane is not built: the Kubernetes tests need Go "
                        "(tests/k8s/controlplane.sh build)")
        t0 = time.monotonic()
        assert controlplane.build() == 0, "building the control plane failed (see the output above)"
        print(f"control plane built in {time.monotonic() - t0:.0f} s")
    d = tmp_path_factory.mktemp("k8s")
    s = controlplane.up(d)
    print(f"control plane up in {(d / 'up_seconds').read_text().strip()} s at {s.server}")
    old = os.environ.get("KUBECONFIG")
    os.environ["KUBECONFIG"] = str(s.kubeconfig)
    try:
        yield s
    finally:
        if old is None:
            os.environ.pop("KUBECONFIG", None)
        else:
            os.environ["KUBECONFIG"] = old
        controlplane.down(d)


def apply(stack: controlplane.Stack, obj: dict) -> None:
    controlplane._apply_yaml_docs(stack.api(), [obj])


def delete(stack: controlplane.Stack, api_version: str, kind: str, name: str, namespace: str | None = None) -> None:
    from kubernetes import dynamic
    from kubernetes.client.exceptions import ApiException

    res = dynamic.DynamicClient(stack.api()).resources.get(api_version=api_version, kind=kind)
    try:
        res.delete(name=name, namespace=namespace)
    except ApiException as e:
        if e.status != 404:
            raise


@pytest.fixture
def clean(stack: controlplane.Stack) -> Iterator[controlplane.Stack]:
    """No RayCluster before or after the test."""
    import raynb

    raynb.down("ray-train-cluster", progress=lambda _m: None)
    yield stack
    raynb.down("ray-train-cluster", progress=lambda _m: None)
