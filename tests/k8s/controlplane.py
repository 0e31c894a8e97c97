"""A real Kubernetes control plane on 127.0.0.1, without Docker, for raynb's Kubernetes tests.

    python tests/k8s/controlplane.py build        # once: build the binaries into ~/.cache/raynb-k8s (controlplane.sh)
    python tests/k8s/controlplane.py up DIR       # start the stack in DIR; prints the kubeconfig path
    python tests/k8s/controlplane.py down DIR     # stop it and remove DIR's processes

Everything here is real: etcd, kube-apiserver (token auth, RBAC, real admission), kube-controller-manager (garbage
collector, DaemonSet and ServiceAccount controllers), kube-scheduler (real FailedScheduling events) and the KubeRay
operator running outside the cluster. Only the kubelets are kwok: it plays the nodes (the AWS sample's m7i.xlarge system
node and two g6.12xlarge GPU nodes advertising 4 ``nvidia.com/gpu`` and 1 ``vpc.amazonaws.com/efa``), moves scheduled
pods to Running/Ready, and answers ``pods/portforward`` from its ClusterPortForward objects (tests point those at a real
``ray start --head``). Two users: ``admin`` (system:masters) and ``viewer`` (may only read pods), for RBAC tests.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ADMIN_TOKEN = "raynb-admin-token"
VIEWER_TOKEN = "raynb-viewer-token"
#: The AWS sample's nodes (one m7i.xlarge system node, 2 x g6.12xlarge): capacity as EC2 lists it, allocatable a little less as on EKS.
#: The GPU nodes are a Karpenter GPU NodePool's (labels karpenter.sh/nodepool and karpenter.k8s.aws/*, no `role`
#: label, tainted nvidia.com/gpu:NoSchedule as AWS's Karpenter GPU guidance and EKS Auto Mode do), so every test that
#: schedules workers shows raynb's defaults placing pods on such a pool.
NODES: list[dict[str, Any]] = [
    {
        "name": "system-0",
        "type": "m7i.xlarge",
        "role": "system",
        "cpu": "4",
        "alloc_cpu": "3920m",
        "memory": "16Gi",
        "alloc_memory": "15Gi",
        "gpu": 0,
        "efa": 0,
    },
    {
        "name": "gpu-0",
        "type": "g6.12xlarge",
        "role": None,
        "nodepool": "gpu",
        "cpu": "48",
        "alloc_cpu": "47810m",
        "memory": "192Gi",
        "alloc_memory": "185Gi",
        "gpu": 4,
        "efa": 1,
    },
    {
        "name": "gpu-1",
        "type": "g6.12xlarge",
        "role": None,
        "nodepool": "gpu",
        "cpu": "48",
        "alloc_cpu": "47810m",
        "memory": "192Gi",
        "alloc_memory": "185Gi",
        "gpu": 4,
        "efa": 1,
    },
]


def binaries() -> Path:
    out = subprocess.run(["bash", str(HERE / "controlplane.sh"), "bin"], capture_output=True, text=True, check=True)
    return Path(out.stdout.strip())


def build() -> int:
    return subprocess.run(["bash", str(HERE / "controlplane.sh"), "build"]).returncode


def built() -> bool:
    b = binaries()
    return all(
        (b / n).is_file()
        for n in ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok", "ray-operator")
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def _pki(d: Path) -> None:
    d.mkdir(parents=True, exist_ok=True)
    _openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "30",
        "-keyout",
        str(d / "ca.key"),
        "-out",
        str(d / "ca.crt"),
        "-subj",
        "/CN=raynb-test-ca",
    )
    for name in ("apiserver", "kwok"):
        _openssl(
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            str(d / f"{name}.key"),
            "-out",
            str(d / f"{name}.csr"),
            "-subj",
            f"/CN={name}",
        )
        (d / f"{name}.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes.default.svc\n")
        _openssl(
            "x509",
            "-req",
            "-in",
            str(d / f"{name}.csr"),
            "-CA",
            str(d / "ca.crt"),
            "-CAkey",
            str(d / "ca.key"),
            "-CAcreateserial",
            "-days",
            "30",
            "-out",
            str(d / f"{name}.crt"),
            "-extfile",
            str(d / f"{name}.ext"),
        )
    _openssl("genrsa", "-out", str(d / "sa.key"), "2048")
    _openssl("rsa", "-in", str(d / "sa.key"), "-pubout", "-out", str(d / "sa.pub"))


def _kubeconfig(path: Path, server: str, ca: Path, user: str, token: str, namespace: str = "default") -> None:
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": f"{user}@raynb-test",
                "clusters": [{"name": "raynb-test", "cluster": {"server": server, "certificate-authority": str(ca)}}],
                "users": [{"name": user, "user": {"token": token}}],
                "contexts": [
                    {
                        "name": f"{user}@raynb-test",
                        "context": {"cluster": "raynb-test", "user": user, "namespace": namespace},
                    }
                ],
            },
            indent=1,
        )
    )


@dataclass
class Stack:
    dir: Path
    server: str
    kubeconfig: Path
    viewer_kubeconfig: Path
    etcd: str = ""

    def api(self, kubeconfig: Path | None = None) -> Any:
        from kubernetes import config

        return config.new_client_from_config(str(kubeconfig or self.kubeconfig))

    def to_json(self) -> str:
        return json.dumps(
            {
                "dir": str(self.dir),
                "server": self.server,
                "kubeconfig": str(self.kubeconfig),
                "viewer_kubeconfig": str(self.viewer_kubeconfig),
                "etcd": self.etcd,
            }
        )


def _start(d: Path, name: str, argv: list[str], env: dict[str, str] | None = None) -> int:
    log = open(d / "logs" / f"{name}.log", "ab")  # noqa: SIM115 - handed to the child
    p = subprocess.Popen(
        argv,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
        start_new_session=True,
    )
    with open(d / "pids", "a") as f:
        f.write(f"{p.pid} {name}\n")
    return p.pid


def _wait(what: str, ok: Any, d: Path, timeout: float, log: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if ok():
                return
        except Exception:  # noqa: BLE001 - not up yet
            pass
        time.sleep(0.3)
    tail = (d / "logs" / f"{log}.log").read_text(errors="replace")[-3000:]
    raise RuntimeError(f"{what} did not come up within {timeout:.0f} s; end of {log}.log:\n{tail}")


def _apply_yaml_docs(api: Any, docs: list[dict[str, Any]]) -> None:
    """Server-side apply of arbitrary objects (CRDs, nodes, RBAC) through the dynamic client."""
    from kubernetes import dynamic

    dyn = dynamic.DynamicClient(api)
    for obj in docs:
        res = dyn.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        ns = obj["metadata"].get("namespace")
        res.server_side_apply(
            body=obj, name=obj["metadata"]["name"], namespace=ns, field_manager="raynb-tests", force_conflicts=True
        )


def node_object(n: dict[str, Any]) -> dict[str, Any]:
    extra = {"nvidia.com/gpu": str(n["gpu"]), "vpc.amazonaws.com/efa": str(n["efa"])} if n["gpu"] else {}
    labels = {
        "node.kubernetes.io/instance-type": n["type"],
        "topology.kubernetes.io/zone": n.get("zone", "us-west-2a"),
        "kubernetes.io/hostname": n["name"],
        "type": "kwok",
    }
    if n.get("role"):
        labels["role"] = n["role"]
    if n.get("nodepool"):  # as Karpenter labels the nodes it launches
        labels |= {
            "karpenter.sh/nodepool": n["nodepool"],
            "karpenter.sh/capacity-type": "on-demand",
            "karpenter.k8s.aws/instance-gpu-count": str(n["gpu"]),
        }
    taints = [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}] if n["gpu"] else []
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": n["name"],
            "annotations": {"kwok.x-k8s.io/node": "fake"},
            "labels": labels,
        },
        "spec": {"taints": taints},
        "status": {
            "capacity": {"cpu": n["cpu"], "memory": n["memory"], "pods": "110", **extra},
            "allocatable": {"cpu": n["alloc_cpu"], "memory": n["alloc_memory"], "pods": "110", **extra},
        },
    }


def _apiserver(
    d: Path,
    b: Path,
    name: str,
    etcd_port: int,
    api_port: int,
    kcfg: Path,
    timeout: float,
    etcd_prefix: str = "/registry",
) -> Any:
    pki = d / "pki"
    _start(
        d,
        name,
        [
            str(b / "kube-apiserver"),
            f"--etcd-servers=http://127.0.0.1:{etcd_port}",
            f"--etcd-prefix={etcd_prefix}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={api_port}",
            f"--tls-cert-file={pki / 'apiserver.crt'}",
            f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--client-ca-file={pki / 'ca.crt'}",
            f"--token-auth-file={d / 'tokens.csv'}",
            "--authorization-mode=RBAC",
            "--service-cluster-ip-range=10.96.0.0/16",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            "--kubelet-preferred-address-types=InternalIP",
            f"--kubelet-certificate-authority={pki / 'ca.crt'}",
            "--enable-priority-and-fairness=false",
            "--profiling=false",
            "--allow-privileged=true",
            "--endpoint-reconciler-type=none",
            "--v=0",
        ],
    )
    from kubernetes import config

    api = config.new_client_from_config(str(kcfg))

    def api_ready() -> bool:
        from kubernetes import client

        return client.CoreV1Api(api).list_namespace(limit=1) is not None and bool(
            client.RbacAuthorizationV1Api(api).read_cluster_role("view")
        )

    _wait(name, api_ready, d, timeout, name)
    return api


def bare_apiserver(stack: Stack, timeout: float = 120.0) -> Path:
    """A second kube-apiserver on the same etcd under its own key prefix: a cluster where KubeRay was never
    installed. Returns its kubeconfig; `down` stops it with the rest."""
    d = stack.dir
    etcd_port = int(stack.etcd.rsplit(":", 1)[1])
    port = _free_port()
    kcfg = d / "bare.kubeconfig"
    _kubeconfig(kcfg, f"https://127.0.0.1:{port}", d / "pki" / "ca.crt", "admin", ADMIN_TOKEN)
    _apiserver(d, binaries(), "bare-apiserver", etcd_port, port, kcfg, timeout, etcd_prefix="/bare")
    return kcfg


def up(d: Path, *, nodes: list[dict[str, Any]] | None = None, timeout: float = 120.0) -> Stack:
    import yaml

    d = Path(d).resolve()
    (d / "logs").mkdir(parents=True, exist_ok=True)
    b = binaries()
    pki = d / "pki"
    _pki(pki)
    (d / "tokens.csv").write_text(f'{ADMIN_TOKEN},admin,admin,"system:masters"\n{VIEWER_TOKEN},viewer,viewer,\n')
    etcd_port, etcd_peer, api_port, kwok_port = _free_port(), _free_port(), _free_port(), _free_port()
    server = f"https://127.0.0.1:{api_port}"
    kcfg, vcfg = d / "admin.kubeconfig", d / "viewer.kubeconfig"
    _kubeconfig(kcfg, server, pki / "ca.crt", "admin", ADMIN_TOKEN)
    _kubeconfig(vcfg, server, pki / "ca.crt", "viewer", VIEWER_TOKEN, namespace="ray-train")
    t0 = time.monotonic()
    _start(
        d,
        "etcd",
        [
            str(b / "etcd"),
            "--data-dir",
            str(d / "etcd"),
            "--name",
            "raynb-test",
            "--listen-client-urls",
            f"http://127.0.0.1:{etcd_port}",
            "--advertise-client-urls",
            f"http://127.0.0.1:{etcd_port}",
            "--listen-peer-urls",
            f"http://127.0.0.1:{etcd_peer}",
            "--initial-advertise-peer-urls",
            f"http://127.0.0.1:{etcd_peer}",
            "--initial-cluster",
            f"raynb-test=http://127.0.0.1:{etcd_peer}",
            "--quota-backend-bytes",
            str(2 << 30),
            "--log-level",
            "warn",
        ],
    )
    api = _apiserver(d, b, "kube-apiserver", etcd_port, api_port, kcfg, timeout)
    _start(
        d,
        "kube-controller-manager",
        [
            str(b / "kube-controller-manager"),
            f"--kubeconfig={kcfg}",
            "--bind-address=127.0.0.1",
            "--secure-port=0",
            "--leader-elect=false",
            f"--service-account-private-key-file={pki / 'sa.key'}",
            f"--root-ca-file={pki / 'ca.crt'}",
            "--use-service-account-credentials=false",
            "--controllers=*,-nodeipam,-cloud-node-lifecycle,-service-lb-controller,-route,-attachdetach,-persistentvolume-expander,-ephemeral-volume,-pvc-protection,-pv-protection",
            "--concurrent-gc-syncs=5",
        ],
    )
    _start(
        d,
        "kube-scheduler",
        [
            str(b / "kube-scheduler"),
            f"--kubeconfig={kcfg}",
            "--bind-address=127.0.0.1",
            "--secure-port=0",
            "--leader-elect=false",
        ],
    )
    # CRDs: KubeRay's (from the operator module that was built) and kwok's ClusterPortForward
    crds = [
        yaml.safe_load(c.read_text())
        for c in (*_kuberay_crds(), _kwok_crd("clusterportforwards"), _kwok_crd("clusterlogs"))
    ]
    _apply_yaml_docs(api, crds)
    docs: list[dict[str, Any]] = [node_object(n) for n in (nodes or NODES)]
    docs += list(yaml.safe_load_all((HERE / "rbac.yaml").read_text()))
    _apply_yaml_docs(api, docs)

    def crds_established() -> bool:
        from kubernetes import client

        ext = client.ApiextensionsV1Api(api)
        return all(
            any(
                c.type == "Established" and c.status == "True"
                for c in (ext.read_custom_resource_definition(d["metadata"]["name"]).status.conditions or [])
            )
            for d in crds
        )

    _wait("CRDs", crds_established, d, timeout, "kube-apiserver")
    _start(
        d,
        "kwok",
        [
            str(b / "kwok"),
            f"--kubeconfig={kcfg}",
            "--manage-all-nodes",
            "--node-ip=127.0.0.1",
            f"--node-port={kwok_port}",
            f"--server-address=127.0.0.1:{kwok_port}",
            "--node-lease-duration-seconds=40",
            f"--tls-cert-file={pki / 'kwok.crt'}",
            f"--tls-private-key-file={pki / 'kwok.key'}",
            f"--config={HERE / 'kwok' / 'stages.yaml'}",
            "--enable-crds=ClusterPortForward,ClusterLogs",
        ],
    )
    _start(
        d,
        "ray-operator",
        [
            str(b / "ray-operator"),
            f"--kubeconfig={kcfg}",
            "--enable-leader-election=false",
            "--metrics-addr=0",
            "--health-probe-bind-address=0",
            "--log-stdout-encoder=console",
        ],
        env={"KUBECONFIG": str(kcfg)},
    )

    def nodes_ready() -> bool:
        from kubernetes import client

        items = client.CoreV1Api(api).list_node().items
        return len(items) == len(nodes or NODES) and all(
            any(c.type == "Ready" and c.status == "True" for c in (n.status.conditions or [])) for n in items
        )

    _wait("kwok nodes", nodes_ready, d, timeout, "kwok")
    stack = Stack(d, server, kcfg, vcfg, f"http://127.0.0.1:{etcd_port}")
    (d / "stack.json").write_text(stack.to_json())
    (d / "up_seconds").write_text(f"{time.monotonic() - t0:.1f}\n")
    return stack


def _gomodcache() -> Path:
    """Where `build` left the modules (the CRDs ship inside them)."""
    out = subprocess.run(["go", "env", "GOMODCACHE"], capture_output=True, text=True).stdout.strip()
    return Path(out or Path.home() / "go" / "pkg" / "mod")


def _kuberay_crds() -> list[Path]:
    """The CRDs of the operator that was built (it watches all three kinds)."""
    ver = os.environ.get("KUBERAY_VERSION", "v1.6.1")
    bases = _gomodcache() / f"github.com/ray-project/kuberay/ray-operator@{ver}/config/crd/bases"
    return [bases / f"ray.io_{k}.yaml" for k in ("rayclusters", "rayjobs", "rayservices")]


def _kwok_crd(plural: str) -> Path:
    ver = os.environ.get("KWOK_VERSION", "v0.8.0")
    return _gomodcache() / f"sigs.k8s.io/kwok@{ver}/kustomize/crd/bases/kwok.x-k8s.io_{plural}.yaml"


def down(d: Path) -> None:
    d = Path(d)
    pids = d / "pids"
    if not pids.exists():
        return
    entries = [line.split() for line in pids.read_text().splitlines() if line.strip()]
    for pid, _name in reversed(entries):
        try:
            os.killpg(int(pid), signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass
    deadline = time.monotonic() + 10
    for pid, _name in entries:
        while time.monotonic() < deadline:
            try:
                os.kill(int(pid), 0)
            except ProcessLookupError:
                break
            try:  # reap if it is our child
                os.waitpid(int(pid), os.WNOHANG)
            except ChildProcessError:
                pass
            time.sleep(0.1)
        else:
            try:
                os.killpg(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass
    pids.unlink()


def main(argv: list[str]) -> int:
    if argv[:1] == ["build"]:
        return build()
    if len(argv) == 2 and argv[0] == "up":
        t0 = time.monotonic()
        stack = up(Path(argv[1]))
        print(stack.to_json())
        print(f"up in {time.monotonic() - t0:.1f} s; export KUBECONFIG={stack.kubeconfig}", file=sys.stderr)
        return 0
    if len(argv) == 2 and argv[0] == "down":
        down(Path(argv[1]))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
