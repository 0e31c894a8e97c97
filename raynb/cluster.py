"""The ``Cluster`` a notebook works with: how it came up, how to reach it, what it has, and how to take it down."""

from __future__ import annotations

import atexit
import html
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from . import local, session
from .config import Settings, resolve
from .errors import NotConnectedError, UsageError

if TYPE_CHECKING:
    from .kube import KubeStatus, RayClusterRef, Target
    from .port_forward import PortForward

__all__ = ["Cluster", "ClusterStatus", "NodeInfo", "KubeHandle", "up", "down", "current", "clusters",
           "resolve_settings"]

_current: Cluster | None = None
_atexit_registered = False


@dataclass(frozen=True)
class NodeInfo:
    node_id: str
    address: str
    alive: bool
    is_head: bool
    cpus: float
    gpus: float
    memory_gb: float


@dataclass(frozen=True, repr=False)
class ClusterStatus:
    name: str
    kind: str
    address: str
    dashboard_url: str | None
    nodes: list[NodeInfo] = field(default_factory=list)
    total: dict[str, float] = field(default_factory=dict)
    available: dict[str, float] = field(default_factory=dict)
    #: Kubernetes clusters: the RayCluster's pods and the nodes they run on (GPUs and EFA per node).
    kube: KubeStatus | None = None

    @property
    def cpus(self) -> float:
        return self.total.get("CPU", 0.0)

    @property
    def gpus(self) -> float:
        return self.total.get("GPU", 0.0)

    def text(self) -> str:
        alive = sum(n.alive for n in self.nodes)
        lines = [
            f"{self.name} ({self.kind}) at {self.address}",
            f"  nodes {alive} alive · CPUs {self.available.get('CPU', 0):g}/{self.cpus:g} free · "
            f"GPUs {self.available.get('GPU', 0):g}/{self.gpus:g} free",
        ]
        for n in self.nodes:
            role = "head" if n.is_head else "worker"
            lines.append(f"  - {role} {n.address} {'alive' if n.alive else 'DEAD'}: {n.cpus:g} CPU, {n.gpus:g} GPU, "
                         f"{n.memory_gb:.1f} GB")
        if self.kube is not None:
            k = self.kube
            lines.append(f"  RayCluster {k.ref.namespace}/{k.ref.name}: {k.state} · image {k.image}")
            for p in k.pods:
                lines.append(f"  - pod {p.name} ({p.role}) {p.phase}{' ready' if p.ready else ''} on {p.node}: "
                             f"{p.gpus} GPU, {p.efa} EFA")
            for n in k.nodes:
                lines.append(f"  - node {n.name} {n.instance_type} {n.zone}{'' if n.ready else ' NOT READY'}: "
                             f"allocatable {n.gpus} GPU, {n.efa} EFA")
        if self.dashboard_url:
            lines.append(f"  dashboard {self.dashboard_url}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return self.text()

    def _repr_html_(self) -> str:
        return self.html()

    def html(self) -> str:
        rows = "".join(
            f"<tr><td>{'head' if n.is_head else 'worker'}</td><td>{html.escape(n.address)}</td>"
            f"<td>{'alive' if n.alive else '<b style=color:#dc3545>dead</b>'}</td><td>{n.cpus:g}</td>"
            f"<td>{n.gpus:g}</td><td>{n.memory_gb:.1f}</td></tr>" for n in self.nodes)
        dash = (f' · <a href="{html.escape(self.dashboard_url)}" target="_blank">Ray dashboard</a>'
                if self.dashboard_url else "")
        kube = ""
        if self.kube is not None:
            k = self.kube
            prow = "".join(
                f"<tr><td>{html.escape(p.name)}</td><td>{p.role}</td><td>{html.escape(p.phase)}"
                f"{' ✓' if p.ready else ''}</td><td>{html.escape(p.node)}</td><td>{p.gpus}</td><td>{p.efa}</td></tr>"
                for p in k.pods)
            nrow = "".join(
                f"<tr><td>{html.escape(n.name)}</td><td>{html.escape(n.instance_type)}</td><td>{html.escape(n.zone)}"
                f"</td><td>{n.gpus}</td><td>{n.efa}</td><td>{'ready' if n.ready else 'NOT READY'}</td></tr>"
                for n in k.nodes)
            kube = (f'<div style="margin-top:4px">RayCluster <b>{html.escape(k.ref.namespace)}/'
                    f'{html.escape(k.ref.name)}</b>: {html.escape(k.state)} · <code>{html.escape(k.image)}</code></div>'
                    f'<table class="raynb-pods" style="font-size:12px"><tr><th>pod</th><th>role</th><th>phase</th>'
                    f'<th>node</th><th>GPU</th><th>EFA</th></tr>{prow}</table>'
                    + (f'<table class="raynb-nodes" style="font-size:12px"><tr><th>node</th><th>instance</th>'
                       f'<th>zone</th><th>GPU</th><th>EFA</th><th>state</th></tr>{nrow}</table>' if nrow else ""))
        ray_part = (
            f'<br>CPUs <b>{self.available.get("CPU", 0):g}</b>/{self.cpus:g} free · GPUs '
            f'<b>{self.available.get("GPU", 0):g}</b>/{self.gpus:g} free'
            f'<table style="font-size:12px;margin-top:4px"><tr><th>node</th><th>address</th><th>state</th>'
            f'<th>CPU</th><th>GPU</th><th>memory GB</th></tr>{rows}</table>') if self.nodes else \
            '<br><i>Ray: not connected</i>'
        return (
            f'<div class="raynb-cluster" data-kind="{self.kind}" style="font-family:sans-serif;font-size:13px">'
            f'<b>{html.escape(self.name)}</b> <span style="color:#555">({self.kind}, {html.escape(self.address)})</span>'
            f'{dash}{ray_part}{kube}</div>'
        )


@dataclass
class KubeHandle:
    """How a Kubernetes-backed Cluster is reached: API target, RayCluster, and the port-forwards to its head."""

    target: Target
    ref: RayClusterRef
    values: dict[str, str] = field(default_factory=dict)
    forwards: dict[int, PortForward] = field(default_factory=dict)

    def forward(self, remote_port: int) -> PortForward:
        from . import kube
        from .port_forward import PortForward

        if remote_port not in self.forwards:
            self.forwards[remote_port] = PortForward(self.target.api, self.ref.namespace,
                                                     lambda: kube.head_pod_name(self.target, self.ref), remote_port)
        return self.forwards[remote_port]

    def close(self) -> None:
        for f in self.forwards.values():
            f.close()
        self.forwards.clear()


class Cluster:
    """A connected Ray cluster. ``raynb.up()`` makes one; ``Cluster.from_name()`` re-attaches."""

    def __init__(self, *, kind: str, name: str, address: str, dashboard_url: str | None,
                 head: local.LocalHead | None = None, settings: Settings | None = None,
                 kube: KubeHandle | None = None) -> None:
        self.kind, self.name, self.address, self.dashboard_url = kind, name, address, dashboard_url
        self.head = head
        self.kube = kube
        self.settings = settings or Settings()

    @classmethod
    def from_name(cls, name: str = "local", *, namespace: str | None = None, context: str | None = None,
                  kubeconfig: str | None = None, connect: bool = True,
                  progress: Callable[[str], None] | None = None) -> Cluster:
        """Re-attach to a running cluster by name, e.g. after a kernel restart.

        ``"local"`` is the embedded head; any other name is a RayCluster in ``namespace`` (default: NAMESPACE of the
        default values file, ``ray-train``) of the kubeconfig's ``context``.
        """
        if name != "local":
            return _from_kubernetes(name, namespace=namespace, context=context, kubeconfig=kubeconfig,
                                    connect=connect, progress=progress)
        head = local.find_head()
        if head is None:
            raise NotConnectedError("No embedded Ray head is running.", fix="start one with raynb.up(local=True).")
        local.add_owner()
        c = cls(kind="local", name="local", address=head.client_address, dashboard_url=head.dashboard_url,
                head=head)
        if connect:
            c.connect()
        _set_current(c)
        return c

    def connect(self, progress: Callable[[str], None] | None = None) -> Cluster:
        if self.kube is not None:
            self._forward_head(progress or (lambda _m: None))
        session.connect(self.address, dashboard_url=self.dashboard_url, runtime_env=_job_runtime_env(self.kind),
                        timeout=self.settings.connect_timeout_s, progress=progress)
        from .run import prewarm

        prewarm(self.settings)  # the first %%raytrain then starts as fast as a bare fit()
        return self

    def _forward_head(self, say: Callable[[str], None]) -> None:
        """Port-forward the head's client (10001) and dashboard (8265) ports to 127.0.0.1, then check versions."""
        assert self.kube is not None
        client_fw, dash_fw = self.kube.forward(10001), self.kube.forward(8265)
        self.address = f"ray://{client_fw.address}"
        self.dashboard_url = f"http://{dash_fw.address}"
        say(f"port-forward 127.0.0.1:{client_fw.local_port} → head:10001 (Ray Client), "
            f"127.0.0.1:{dash_fw.local_port} → head:8265 (dashboard) through the Kubernetes API")
        answer = session.dashboard_get(self.dashboard_url, "/api/version", timeout=10) or {}
        server_ray = str(answer.get("ray_version") or "") or self.kube.values.get("RAY_VERSION", "")
        session.check_versions(server_ray, self.kube.values.get("PYTHON_VERSION", ""),
                               where=f"the cluster (image {self.kube.values.get('DLC_IMAGE', '?')})")

    @property
    def connected(self) -> bool:
        return session.is_connected()

    def efa_expected(self) -> tuple[bool, bool | None]:
        """(EFA expected between nodes, GPUDirect RDMA expected) for the NCCL badges of this cluster's runs."""
        if self.kube is None:
            return False, None
        efa = self.kube.values.get("EFA_PER_NODE", "0") not in ("", "0")
        return efa, (self.kube.values.get("GPUDIRECT_RDMA") == "true") if efa else None

    def values_layer(self) -> dict[str, Any]:
        """Settings the values file sets (the 'values file' layer of config.resolve)."""
        if self.kube is None:
            return {}
        v = self.kube.values
        return {k: v[key] for k, key in (("strict_efa", "STRICT_EFA"), ("storage_path", "STORAGE_PATH"))
                if v.get(key)}

    def status(self) -> ClusterStatus:
        import ray

        kube_st = None
        if self.kube is not None:
            from .kube import kube_status

            kube_st = kube_status(self.kube.target, self.kube.ref)
        if not ray.is_initialized():
            if kube_st is not None:
                return ClusterStatus(self.name, self.kind, self.address, self.dashboard_url, kube=kube_st)
            raise NotConnectedError("This kernel is not connected to the cluster.",
                                    fix="run `%raycluster up` (or cluster.connect()).")
        nodes = []
        for n in ray.nodes():
            res = n.get("Resources", {})
            nodes.append(NodeInfo(
                node_id=n.get("NodeID", ""), address=n.get("NodeManagerAddress", ""), alive=bool(n.get("Alive")),
                is_head=bool(res.get("node:__internal_head__")), cpus=res.get("CPU", 0.0), gpus=res.get("GPU", 0.0),
                memory_gb=res.get("memory", 0.0) / 2**30))
        return ClusterStatus(self.name, self.kind, self.address, self.dashboard_url, nodes,
                             dict(ray.cluster_resources()), dict(ray.available_resources()), kube=kube_st)

    def logs(self, which: str = "head", *, tail: int = 200) -> str:
        """The container log of the head (``"head"``), a worker (``"worker-0"``, ...) or a pod, last ``tail`` lines.

        NCCL's lines are not there: Ray workers write them to Ray's worker logs inside the pod
        (``/tmp/ray/session_latest/logs/worker-*.err``) and raynb parses them into the run's NCCL badges.
        """
        if self.kube is None:
            where = f"{self.head.temp_dir}/session_latest/logs" if self.head else "the head's Ray session directory"
            raise UsageError("Container logs exist for Kubernetes clusters only.",
                             fix=f"the embedded cluster's Ray logs are files in {where}")
        from .kube import pod_logs

        name, text = pod_logs(self.kube.target, self.kube.ref, which, tail=tail)
        return (f"==> {self.kube.ref.namespace}/{name} (last {tail} lines)\n{text}"
                f"{'' if text.endswith(chr(10)) or not text else chr(10)}"
                "(NCCL's lines are not in container logs: Ray workers write them to /tmp/ray/session_latest/logs/"
                "worker-*.err in the pod; %%raytrain shows them parsed as badges, --nccl full shows them raw)")

    def down(self, *, progress: Callable[[str], None] | None = None) -> None:
        """Disconnect and stop the cluster: the embedded head and every process it started, or the RayCluster and its
        pods (waits until they are gone)."""
        global _current
        session.disconnect()
        if self.kind == "local":
            local.stop_head(self.head)
            local.remove_owner()
        if self.kube is not None:
            from .kube import delete_raycluster

            self.kube.close()
            delete_raycluster(self.kube.target, self.kube.ref, progress=progress or print)
        if _current is self:
            _current = None

    def disconnect(self) -> None:
        """Leave the cluster running; close this kernel's connection and port-forwards."""
        global _current
        session.disconnect()
        if self.kube is not None:
            self.kube.close()
        if _current is self:
            _current = None

    def dashboard(self) -> str | None:
        return self.dashboard_url

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()

    def __repr__(self) -> str:
        return f"<raynb.Cluster {self.name!r} {self.kind} {self.address}>"

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        try:
            st = self.status()
            return {"text/plain": st.text(), "text/html": st.html()}
        except NotConnectedError:
            return {"text/plain": repr(self) + " (not connected)"}


def _job_runtime_env(kind: str) -> dict[str, Any]:
    env: dict[str, Any] = {"env_vars": {"RAY_TRAIN_ENABLE_PRINT_PATCH": "0"}}
    if kind != "local":
        # the cluster image does not have raynb: ship its worker-side modules with the job
        import raynb

        env["py_modules"] = [raynb.__path__[0]]
    return env


def _set_current(c: Cluster) -> None:
    global _current, _atexit_registered
    _current = c
    if not _atexit_registered:
        atexit.register(_at_kernel_exit)
        _atexit_registered = True


def _at_kernel_exit() -> None:
    # The supervisor stops the embedded head once no kernel owns it; say we are gone now rather than in 1 s.
    # A Kubernetes RayCluster outlives the kernel (like any cluster you pay for, it stops on `down` only).
    try:
        session.disconnect()
    finally:
        local.remove_owner()


def current() -> Cluster | None:
    """The cluster this kernel is connected to, if any."""
    return _current


def resolve_settings(flags: Mapping[str, Any] | None = None,
                     magic_config: Mapping[str, Any] | None = None) -> Settings:
    """config.resolve with the current cluster's values file as the 'values file' layer (e.g. STRICT_EFA,
    STORAGE_PATH): every API call and magic resolves its settings through here."""
    return resolve(flags, magic_config, values=_current.values_layer() if _current is not None else None)


def up(
    local_: bool | None = None,
    *,
    values: str | Mapping[str, str] | None = None,
    set: Mapping[str, Any] | None = None,  # noqa: A002 - the name the magic's --set maps to
    context: str | None = None,
    namespace: str | None = None,
    kubeconfig: str | None = None,
    recreate: bool = False,
    connect: bool = True,
    num_cpus: int | None = None,
    num_gpus: int | None = None,
    timeout: float | None = None,
    settings: Settings | None = None,
    progress: Callable[[str], None] | None = None,
    **kwargs: Any,
) -> Cluster:
    """Start (or reuse) a cluster and connect this kernel to it with Ray Client.

    ``raynb.up(local=True)`` (the default) gives the embedded cluster: a local head as its own process tree, dashboard
    on, Ray Client on a free port bound to 127.0.0.1. It is reused if already running, and stopped when the last kernel
    using it exits.

    ``raynb.up(values="manifests/values.env", set={"GPU_NODE_COUNT": 2})`` (or ``local=False`` for the default values
    file) renders the DLC RayCluster, applies it with server-side apply, waits for it with diagnostics, port-forwards
    its head to 127.0.0.1 and connects. Re-running with the same spec reuses the cluster; a different spec is reported
    (``recreate=True`` replaces it).
    """
    if "local" in kwargs:
        local_ = kwargs.pop("local")
    if kwargs:
        raise TypeError(f"up() got unexpected arguments: {', '.join(kwargs)}")
    kube_args = values is not None or set is not None or context is not None or namespace is not None \
        or kubeconfig is not None
    if local_ and kube_args:
        raise UsageError("up(local=True) starts the embedded cluster; values/set/context/namespace/kubeconfig are for "
                         "Kubernetes.", fix="drop local=True to create the RayCluster on Kubernetes")
    say = progress or print
    if local_ is False or kube_args:
        settings = settings or resolve({"kube_start_timeout_s": timeout, "kube_context": context,
                                        "kube_namespace": namespace})
        return _up_kubernetes(values, set or {}, kubeconfig=kubeconfig, recreate=recreate, connect=connect,
                              settings=settings, say=say)
    settings = settings or resolve({"local_num_cpus": num_cpus, "local_num_gpus": num_gpus,
                                    "start_timeout_s": timeout})
    head = local.start_head(num_cpus=settings.local_num_cpus, num_gpus=settings.local_num_gpus,
                            timeout=settings.start_timeout_s, progress=say, dashboard=settings.local_dashboard)
    if head.reused:
        say(f"reusing the embedded Ray head at {head.client_address}")
    c = Cluster(kind="local", name="local", address=head.client_address, dashboard_url=head.dashboard_url,
                head=head, settings=settings)
    _set_current(c)
    c.connect(progress=say)
    return c


def _render(values: str | Mapping[str, str] | None, overrides: Mapping[str, Any],
            namespace: str | None) -> tuple[dict[str, Any], dict[str, str]]:
    from . import manifest

    vals = dict(values) if isinstance(values, Mapping) else manifest.load_values(values)
    ov = {k: str(v) for k, v in overrides.items()}
    if namespace:
        ov["NAMESPACE"] = namespace
    return manifest.render(vals, ov), manifest.resolve_values(vals, ov)


def _up_kubernetes(values: str | Mapping[str, str] | None, overrides: Mapping[str, Any], *, kubeconfig: str | None,
                   recreate: bool, connect: bool, settings: Settings, say: Callable[[str], None]) -> Cluster:
    from . import kube

    obj, vals = _render(values, overrides, settings.kube_namespace)
    ref = kube.RayClusterRef(obj["metadata"]["name"], obj["metadata"]["namespace"])
    if connect:  # before creating anything: a cluster this kernel cannot talk to helps nobody
        session.check_versions(vals.get("RAY_VERSION", ""), vals.get("PYTHON_VERSION", ""),
                               where=f"the image {vals.get('DLC_IMAGE', '?')}")
    target = kube.connect_api(context=settings.kube_context, kubeconfig=kubeconfig)
    say(f"Kubernetes API: {target.where()}")
    kube.ensure_crd(target)
    live = kube.get_raycluster(target, ref)
    if live is not None:
        diffs = kube.spec_differences(obj["spec"], live.get("spec", {}))
        if diffs and not recreate:
            shown = diffs[:12] + ([f"... and {len(diffs) - 12} more"] if len(diffs) > 12 else [])
            raise kube.KubeError(
                f"A RayCluster {ref.namespace}/{ref.name} already exists with a different spec.",
                saw="live → wanted:\n" + "\n".join(shown),
                fix="KubeRay does not roll existing pods to a new spec: `%raycluster up --recreate ...` "
                f"(raynb.up(..., recreate=True)) deletes and recreates it; `raynb.Cluster.from_name({ref.name!r}, "
                f"namespace={ref.namespace!r})` attaches to it as it is")
        if diffs:
            say(f"spec changed ({len(diffs)} difference(s)): recreating {ref.namespace}/{ref.name}")
            kube.delete_raycluster(target, ref, progress=say)
            live = None
        else:
            say(f"reusing RayCluster {ref.namespace}/{ref.name} (same spec)")
    if live is None:
        kube.apply_raycluster(target, obj)
        workers = sum(int(g.get("replicas", 0)) for g in obj["spec"]["workerGroupSpecs"])
        say(f"applied RayCluster {ref.namespace}/{ref.name} (server-side apply, field manager "
            f"{kube.FIELD_MANAGER}): head + {workers} × {vals.get('GPU_NODE_TYPE')} worker(s), "
            f"{vals.get('GPUS_PER_NODE')} GPU and {vals.get('EFA_PER_NODE')} EFA each")
    kube.wait_ready(target, ref, timeout=settings.kube_start_timeout_s, progress=say)
    c = Cluster(kind="kubernetes", name=ref.name, address="(not forwarded yet)", dashboard_url=None,
                settings=settings, kube=KubeHandle(target, ref, vals))
    _set_current(c)
    if connect:
        c.connect(progress=say)
    return c


def _default_namespace() -> str:
    """Where raynb's RayClusters live unless told otherwise: NAMESPACE of the default values file."""
    from . import manifest

    try:
        return manifest.load_values().get("NAMESPACE") or "ray-train"
    except manifest.ManifestError:
        return "ray-train"


def _named_raycluster(name: str, *, namespace: str | None, context: str | None,
                      kubeconfig: str | None) -> tuple[Settings, Target, RayClusterRef]:
    """Settings, API target and reference for a RayCluster named by the user (from_name, down NAME)."""
    from . import kube

    settings = resolve({"kube_context": context, "kube_namespace": namespace})
    target = kube.connect_api(context=settings.kube_context, kubeconfig=kubeconfig)
    return settings, target, kube.RayClusterRef(name, settings.kube_namespace or _default_namespace())


def _from_kubernetes(name: str, *, namespace: str | None, context: str | None, kubeconfig: str | None,
                     connect: bool, progress: Callable[[str], None] | None) -> Cluster:
    from . import kube

    settings, target, ref = _named_raycluster(name, namespace=namespace, context=context, kubeconfig=kubeconfig)
    ns = ref.namespace
    kube.ensure_crd(target)
    rc = kube.get_raycluster(target, ref)
    if rc is None:
        names = [i["metadata"]["name"] for i in kube.list_rayclusters(target, ns)]
        raise NotConnectedError(f"No RayCluster {name!r} in namespace {ns!r}.",
                                saw="RayClusters there: " + (", ".join(names) or "none"),
                                fix="pick one of those (namespace=... for another namespace), or `%raycluster up`")
    ann = rc.get("metadata", {}).get("annotations", {})
    vals = {"RAY_VERSION": rc["spec"].get("rayVersion", ""), "PYTHON_VERSION": ann.get("raynb.io/python-version", ""),
            "DLC_IMAGE": kube.head_image(rc), "GPU_NODE_TYPE": ann.get("raynb.io/gpu-node-type", "")}
    for g in rc["spec"].get("workerGroupSpecs", []):
        for c in g["template"]["spec"]["containers"]:
            req = (c.get("resources") or {}).get("requests") or {}
            vals["EFA_PER_NODE"] = str(req.get("vpc.amazonaws.com/efa", "0"))
            vals["GPUS_PER_NODE"] = str(req.get("nvidia.com/gpu", "0"))
            vals["GPUDIRECT_RDMA"] = "true" if any(e.get("name") == "FI_EFA_USE_DEVICE_RDMA"
                                                   for e in c.get("env", [])) else "false"
    cl = Cluster(kind="kubernetes", name=name, address="(not forwarded yet)", dashboard_url=None, settings=settings,
                 kube=KubeHandle(target, ref, vals))
    if connect:
        cl.connect(progress=progress)
    _set_current(cl)
    return cl


def clusters(*, namespace: str | None = None, context: str | None = None,
             kubeconfig: str | None = None) -> list[dict[str, str]]:
    """The clusters this kernel could use: the embedded head if it runs, and the RayClusters of ``namespace`` (all
    namespaces when None) in the kubeconfig's ``context`` (skipped with a note when there is no kubeconfig)."""
    from . import kube

    rows: list[dict[str, str]] = []
    head = local.find_head()
    if head is not None:
        rows.append({"name": "local", "namespace": "-", "kind": "local", "state": "running",
                     "address": head.client_address, "image": "-"})
    try:
        target = kube.connect_api(context=context, kubeconfig=kubeconfig)
    except kube.KubeError as e:
        if head is None:
            raise
        rows.append({"name": "(kubernetes)", "namespace": "-", "kind": "kubernetes", "state": e.what,
                     "address": "-", "image": "-"})
        return rows
    kube.ensure_crd(target)
    for rc in kube.list_rayclusters(target, namespace):
        _, line = kube.readiness(rc)
        rows.append({"name": rc["metadata"]["name"], "namespace": rc["metadata"]["namespace"], "kind": "kubernetes",
                     "state": line, "address": target.where(),
                     "image": kube.head_image(rc)})
    return rows


def down(name: str | None = None, *, namespace: str | None = None, context: str | None = None,
         kubeconfig: str | None = None, progress: Callable[[str], None] | None = None) -> bool:
    """Stop the current cluster (or the embedded head if this kernel is not connected). True if one was stopped.

    ``down("ray-train-cluster", namespace="ray-train")`` deletes that RayCluster even when this kernel is not
    connected to it (e.g. after a restart); deleting one that is already gone is not an error.
    """
    say = progress or print
    if name is not None and name != "local":
        from . import kube

        if _current is not None and _current.kube is not None and _current.name == name:
            _current.down(progress=say)
            return True
        _, target, ref = _named_raycluster(name, namespace=namespace, context=context, kubeconfig=kubeconfig)
        gone = kube.delete_raycluster(target, ref, progress=say)
        if not gone:
            say(f"no RayCluster {ref.namespace}/{name}: nothing to delete")
        return gone
    if _current is not None:
        _current.down(progress=say)
        return True
    session.disconnect()
    return local.stop_head()
