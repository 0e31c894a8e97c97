"""The real Kubernetes control plane (tests/k8s/controlplane.py), once for this package (stopped when its last test
has run, so it does not idle through the tiers after it).

Built from Go modules on first use (minutes cold, seconds warm); skipped with the reason printed where Go is missing
and nothing was built. CI has Go: there these tests run.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import controlplane

from raynb import manifest

ROOT = Path(__file__).resolve().parents[2]
VALUES = str(ROOT / "manifests" / "values.env")
#: The RayCluster the default values make: ray-train-<you> (the kernels the tests start are the same user).
NAME = manifest.render()["metadata"]["name"]
#: The test "image" is this machine's Ray and Python (the port-forward goes to a real local head).
HERE_PY = f"{sys.version_info[0]}.{sys.version_info[1]}"


@pytest.fixture(scope="package")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[controlplane.Stack]:
    if not controlplane.built():  # built by `make test` before pytest: a cold build (~10 min) outlasts any test limit
        pytest.skip(
            "the Kubernetes control plane is not built: `make k8s-stack` (or `make test`) builds it; it needs Go"
            + ("" if shutil.which("go") else ", which is not installed")
        )
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

    raynb.down(NAME, progress=lambda _m: None)
    yield stack
    raynb.down(NAME, progress=lambda _m: None)


@pytest.fixture(scope="package")
def shared_volume(stack: controlplane.Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """What an EFS or FSx for Lustre claim is on EKS: a PersistentVolume bound to the claim `raynb-shared` in
    ray-train (the real PV controller binds it; its hostPath is a folder here, where the head behind the pods writes),
    and the values that mount it into every pod and keep runs there."""
    import time

    from kubernetes import client

    path = tmp_path_factory.mktemp("shared-volume")
    pv = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": "raynb-shared"},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteMany"],
            "storageClassName": "",
            "hostPath": {"path": str(path)},
            "claimRef": {"namespace": "ray-train", "name": "raynb-shared"},
        },
    }
    pvc = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "raynb-shared", "namespace": "ray-train"},
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "storageClassName": "",
            "volumeName": "raynb-shared",
            "resources": {"requests": {"storage": "1Gi"}},
        },
    }
    apply(stack, pv)
    apply(stack, pvc)
    core = client.CoreV1Api(stack.api())
    deadline = time.monotonic() + 60
    while core.read_namespaced_persistent_volume_claim("raynb-shared", "ray-train").status.phase != "Bound":
        assert time.monotonic() < deadline, "the PV controller did not bind the claim"
        time.sleep(0.5)
    yield {"SHARED_PVC": "raynb-shared", "SHARED_MOUNT_PATH": str(path), "STORAGE_PATH": str(path / "runs")}
    delete(stack, "v1", "PersistentVolumeClaim", "raynb-shared", "ray-train")
    delete(stack, "v1", "PersistentVolume", "raynb-shared")


def sets(values: dict[str, str]) -> str:
    """`--set K=V ...` for a magic line."""
    return " ".join(f"--set {k}={v}" for k, v in values.items())


@pytest.fixture(scope="package")
def agent_port() -> int:
    """The port raynb's agent listens on in the head "pod" on the Ray Jobs path (a kernel asks for it: agent_port).
    On EKS that is 8266 in the pod's own network; here the pod is this machine's head, so a free port, forwarded to
    itself."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="package")
def head_account(stack: controlplane.Stack, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What Kubernetes mounts into the head pod for its service account: the API server's CA and the namespace now,
    the token once the account exists (:func:`mount_head_token`, the kubelet's part)."""
    return mount_head_account(stack, tmp_path_factory.mktemp("head-serviceaccount"))


def mount_head_account(stack: controlplane.Stack, d: Path) -> Path:
    """The API server's CA and the namespace in ``d``, as Kubernetes mounts them into a pod."""
    shutil.copy(stack.dir / "pki" / "ca.crt", d / "ca.crt")
    (d / "namespace").write_text("ray-train")
    return d


def head_pod_env(stack: controlplane.Stack, account: Path) -> dict[str, str]:
    """What a head pod's processes see of Kubernetes: the API server, the RayCluster's name (as KubeRay sets it) and
    where its service account is mounted."""
    api_host, api_port = stack.server.removeprefix("https://").rsplit(":", 1)
    return {
        "KUBERNETES_SERVICE_HOST": api_host,
        "KUBERNETES_SERVICE_PORT": api_port,
        "RAY_CLUSTER_NAME": NAME,
        "RAYNB_SERVICEACCOUNT_DIR": str(account),
    }


def mount_head_token(stack: controlplane.Stack, account: Path) -> str:
    """The kubelet's part for the head pod: a token (TokenRequest) for the service account the head pod runs as,
    written where the pod reads it. Returns the account's name."""
    from kubernetes import client

    core = client.CoreV1Api(stack.api())
    pod = core.list_namespaced_pod("ray-train", label_selector=f"ray.io/cluster={NAME},ray.io/node-type=head").items[0]
    sa = pod.spec.service_account_name
    req = core.create_namespaced_service_account_token(sa, "ray-train", {"spec": {"expirationSeconds": 3600}})
    (account / "token").write_text(req.status.token)
    return str(sa)


@contextlib.contextmanager
def _env(**values: str) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture(scope="package")
def head_behind_pods(
    stack: controlplane.Stack, agent_port: int, head_account: Path, tmp_path_factory: pytest.TempPathFactory
):
    """A real local Ray head standing behind the RayCluster's head pod: kwok's ClusterPortForward sends the pod's
    10001/8265 to it, and its ClusterLogs serves (a CRI-format copy of) the head's log through pods/log. Its
    processes see what a head pod's do: the API server (``KUBERNETES_SERVICE_HOST``/``_PORT``), the RayCluster's
    name (``RAY_CLUSTER_NAME``, as KubeRay sets it) and the pod's service account (``head_account``)."""
    from raynb._cluster import embedded_head as local

    # a head of its own, in a state dir of its own, owned by this process until the k8s tests are done; in token mode
    # as raynb's RayClusters are (authOptions), its token in the Secret KubeRay keeps for the cluster NAME (made here
    # first, so the operator keeps it rather than generating one this head does not know)
    home = str(tmp_path_factory.mktemp("head-behind-pods"))
    with _env(RAYNB_HOME=home, **head_pod_env(stack, head_account)):
        head = local.start_head(num_cpus=2, timeout=120, progress=print, auth=True)
    from kubernetes import client

    token = Path(head.token_path).read_text().strip()
    secret = {"metadata": {"name": NAME, "namespace": "ray-train"}, "stringData": {"auth_token": token}}
    client.CoreV1Api(stack.api()).create_namespaced_secret("ray-train", secret)
    client_port = int(head.client_address.rsplit(":", 1)[1])
    dash_port = int(head.dashboard_url.rsplit(":", 1)[1])
    log = tmp_path_factory.mktemp("head-log") / "head.cri.log"
    lines = (Path(head.temp_dir) / "session_latest" / "logs" / "gcs_server.out").read_text().splitlines()[:50]
    log.write_text("".join(f"2026-11-30T00:00:{i % 60:02d}.000000000Z stdout F {ln}\n" for i, ln in enumerate(lines)))
    # the worker "pods" serve a log of their own (kwok reads the file; the lines name the container)
    (log.parent / "worker.cri.log").write_text(
        "".join(f"2026-11-30T00:01:{i:02d}.000000000Z stdout F ray-worker line {i}\n" for i in range(20))
    )
    apply(
        stack,
        {
            "apiVersion": "kwok.x-k8s.io/v1alpha1",
            "kind": "ClusterPortForward",
            "metadata": {"name": "ray-head"},
            "spec": {
                "selector": {"matchNamespaces": ["ray-train"]},
                "forwards": [
                    {"ports": [10001], "target": {"port": client_port, "address": "127.0.0.1"}},
                    {"ports": [8265], "target": {"port": dash_port, "address": "127.0.0.1"}},
                    {"ports": [agent_port], "target": {"port": agent_port, "address": "127.0.0.1"}},
                ],
            },
        },
    )
    apply(
        stack,
        {
            "apiVersion": "kwok.x-k8s.io/v1alpha1",
            "kind": "ClusterLogs",
            "metadata": {"name": "ray-head"},
            "spec": {
                "selector": {"matchNamespaces": ["ray-train"]},
                "logs": [
                    {"containers": ["ray-head"], "logsFile": str(log)},
                    {"containers": ["ray-worker"], "logsFile": str(log.parent / "worker.cri.log")},
                ],
            },
        },
    )
    yield head, log
    delete(stack, "v1", "Secret", NAME, "ray-train")
    delete(stack, "kwok.x-k8s.io/v1alpha1", "ClusterPortForward", "ray-head")
    delete(stack, "kwok.x-k8s.io/v1alpha1", "ClusterLogs", "ray-head")
    with _env(RAYNB_HOME=home):
        local.stop_head(head)
