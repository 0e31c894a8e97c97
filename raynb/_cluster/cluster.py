"""In the kernel: the ``Cluster`` a notebook works with: which backend runs its head, how to reach it, what it has, how
to stop it.

``up``, ``down``, ``clusters`` and ``Cluster.from_name`` choose a backend (``embedded.py``, ``kubernetes.py`` or
``address.py``); everything else goes through the backend's interface (``backend.py``). The current cluster is kept in
``_current``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .._client import side, use
from .._current import at_exit as _at_exit
from .._current import clear_current, current, resolve_settings, set_current, warm_group
from .._settings import Settings
from ..errors import KubeError, NotConnectedError, UsageError, not_connected
from . import address as address_backend
from . import connection, embedded, kubernetes, session
from . import embedded_head as head_proc
from .backend import Say
from .browser_link import dashboard_link
from .status import ClusterStatus, NodeInfo

if TYPE_CHECKING:
    from .backend import Backend, BackendKind

__all__ = ["Cluster", "ClusterStatus", "NodeInfo", "up", "down", "current", "clusters"]


class Cluster:
    """A Ray cluster this kernel works with. ``raynb.up()`` makes one; ``Cluster.from_name()`` re-attaches.

    As a context manager it stops on exit only what its own ``up`` started: a cluster found with ``from_name`` is left
    running (it may be someone else's, or outlive this kernel on purpose).
    """

    def __init__(self, backend: Backend, *, settings: Settings | None = None, owned: bool = True) -> None:
        self.backend = backend
        self.settings = settings or resolve_settings()
        self.owned = owned
        self.address = "(not connected)"
        self.dashboard_url: str | None = None
        #: how this kernel reaches the cluster, and why (``status`` says it)
        self.reached: str | None = None

    @property
    def kind(self) -> BackendKind:
        return self.backend.kind

    @property
    def name(self) -> str:
        return self.backend.name

    @classmethod
    def from_name(
        cls,
        name: str = "local",
        *,
        namespace: str | None = None,
        context: str | None = None,
        kubeconfig: str | None = None,
        connect: bool = True,
        progress: Say | None = None,
    ) -> Cluster:
        """Re-attach to a running cluster by name, e.g. after a kernel restart.

        ``"local"`` is the embedded head; any other name is a RayCluster in ``namespace`` (default: NAMESPACE of the
        default values file, ``ray-train``) of the kubeconfig's ``context``.
        """
        backend: Backend
        if name == "local":
            backend = embedded.attach()
            settings = resolve_settings()
        else:
            settings = resolve_settings({"kube_context": context, "kube_namespace": namespace})
            backend = kubernetes.attach(name, settings, kubeconfig)
        c = cls(backend, settings=settings, owned=False)
        if connect:
            c.connect(progress=progress)
        _make_current(c)
        return c

    def connect(self, progress: Say | None = None) -> Cluster:
        """Reach the cluster: through Ray Client where the kernel's Python and Ray are the cluster's, else (or when
        the ``connect_via`` setting says so) through Ray Jobs and raynb's agent (``connection.py``)."""
        say = progress or (lambda _m: None)
        self.address, self.dashboard_url = self.backend.reach(say)
        self.reached = connection.connect(self.backend, self.settings, self.address, self.dashboard_url, say)
        return self

    @property
    def connected(self) -> bool:
        return side().connected()

    def status(self) -> ClusterStatus:
        kube_st, cost = self.backend.kube_status(), self.backend.hourly_cost()
        if not side().connected():
            if kube_st is not None:
                return ClusterStatus(self.name, self.kind, self.address, self.dashboard(), kube=kube_st, cost=cost)
            raise not_connected()
        now = side().resources()
        nodes = []
        for n in now["nodes"]:
            res = n.get("Resources") or {}
            nodes.append(
                NodeInfo(
                    node_id=n.get("NodeID") or "",
                    address=n.get("NodeManagerAddress") or "",
                    alive=bool(n.get("Alive")),
                    is_head=bool(res.get("node:__internal_head__")),
                    cpus=res.get("CPU", 0.0),
                    gpus=res.get("GPU", 0.0),
                    memory_gb=res.get("memory", 0.0) / 2**30,
                )
            )
        return ClusterStatus(
            self.name,
            self.kind,
            self.address,
            self.dashboard(),
            nodes,
            dict(now["total"]),
            dict(now["available"]),
            kube=kube_st,
            warm=None if (group := warm_group()) is None else group.line(),
            cost=cost,
            reached=self.reached,
        )

    def logs(self, which: str = "head", *, tail: int = 200) -> str:
        """The container log of the head (``"head"``), a worker (``"worker-0"``, ...) or a pod, last ``tail`` lines.

        NCCL's lines are not there: Ray workers write them to Ray's worker logs inside the pod
        (``/tmp/ray/session_latest/logs/worker-*.err``) and raynb parses them into the run's NCCL badges.
        """
        return self.backend.logs(which, tail)

    def down(self, *, force: bool = False, progress: Say | None = None) -> None:
        """Disconnect and stop the cluster: the embedded head and every process it started, or the RayCluster and its
        pods (waits until they are gone). Refused while runs go on there, unless ``force`` (they stop with it)."""
        going = side().active_runs() if side().connected() else []
        if going and not force:
            raise UsageError(
                f"{len(going)} run(s) still going on this cluster: {', '.join(going)}.",
                fix="stop them (`%raytrain stop NAME`), or `%raycluster down --force` to stop the cluster and them",
            )
        self._leave()
        self.backend.down(progress or print, force=force)
        clear_current(self)

    def disconnect(self) -> None:
        """Leave the cluster running (and its runs); close this kernel's connection and port-forwards."""
        self._leave()
        self.backend.disconnect()
        clear_current(self)

    def _leave(self) -> None:
        """This kernel's part of the connection goes: its spare launcher, its Ray Client session."""
        try:
            if side().connected():
                side().drop_spare()
        finally:
            use(None)
            session.disconnect()

    def dashboard(self) -> str | None:
        """The dashboard as this user's browser opens it (through jupyter-server-proxy where the browser is not on
        the kernel's machine: JupyterHub, or the ``dashboard_proxy`` setting); ``dashboard_url`` is raynb's own."""
        import importlib.util

        return dashboard_link(
            self.dashboard_url,
            self.settings.dashboard_proxy,
            os.environ,
            importlib.util.find_spec("jupyter_server_proxy") is not None,
        )

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.owned:
            self.down(force=True)
        else:
            self.disconnect()

    def __repr__(self) -> str:
        return f"<raynb.Cluster {self.name!r} {self.kind} {self.address}>"

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        try:
            st = self.status()
            return {"text/plain": st.text(), "text/html": st.html()}
        except NotConnectedError:
            return {"text/plain": repr(self) + " (not connected)"}


def _make_current(c: Cluster) -> None:
    set_current(c)
    _at_exit(_at_kernel_exit)


def current_cluster() -> Cluster | None:
    """The cluster this kernel works with, as a ``Cluster`` (``_current`` holds it by what lower modules read)."""
    cur = current()
    return cur if isinstance(cur, Cluster) else None


def _at_kernel_exit() -> None:
    """Runs go on (they belong to the cluster); the warm spare, made for this kernel's next cell, goes."""
    c = current_cluster()
    try:
        if c is not None:
            c._leave()
        else:
            session.disconnect()
    finally:
        if c is not None:
            c.backend.at_kernel_exit()
        else:
            head_proc.remove_owner()


def up(
    local: bool | None = None,
    *,
    values: str | Mapping[str, str] | None = None,
    set: Mapping[str, Any] | None = None,  # the name the magic's --set maps to
    template: str | None = None,
    context: str | None = None,
    namespace: str | None = None,
    kubeconfig: str | None = None,
    recreate: bool = False,
    force: bool = False,
    connect: bool = True,
    num_cpus: int | None = None,
    num_gpus: int | None = None,
    dashboard: bool | None = None,
    auth: bool | None = None,
    timeout: float | None = None,
    address: str | None = None,
    token_file: str | None = None,
    dashboard_url: str | None = None,
    via: str | None = None,
    settings: Settings | None = None,
    progress: Say | None = None,
) -> Cluster:
    """Start (or reuse) a cluster and connect this kernel to it with Ray Client.

    ``raynb.up(local=True)`` (the default) gives the embedded cluster: a local head as its own process tree, dashboard
    on, Ray Client on a free port bound to 127.0.0.1. It is reused if already running, and stopped when the last kernel
    using it exits.

    ``raynb.up(values="manifests/values.env", set={"GPU_NODE_COUNT": 2})`` (or ``local=False`` for the default values
    file) renders the DLC RayCluster, applies it with server-side apply, waits for it with diagnostics, port-forwards
    its head to 127.0.0.1 and connects. Re-running with the same spec reuses the cluster; a different spec is reported
    (``recreate=True`` replaces it); someone else's (``raynb.io/owner``) is neither, unless ``force=True``.
    ``template=FILE``: a RayCluster template of your own, rendered with the same values.

    ``raynb.up(address="ray://HOST:10001")`` connects to a cluster raynb did not start (``token_file``: its Ray token,
    else Ray's own ``RAY_AUTH_TOKEN``/``RAY_AUTH_TOKEN_PATH``; ``dashboard_url``: its dashboard, else
    ``http://HOST:8265`` when it answers there). Where this kernel's Python or Ray is not the cluster's, raynb
    reaches it through Ray Jobs instead (``address="http://HOST:8265"`` always does; ``via="client"`` or ``"jobs"``
    forces one). ``down`` on it only disconnects: it is not raynb's to stop."""
    kube_args = any(a is not None for a in (values, set, template, context, namespace, kubeconfig))
    say = progress or print
    backend: Backend
    if address is not None:
        if local or kube_args:
            raise UsageError(
                "up(address=...) connects to a running cluster; local/values/set/template/context/namespace/"
                "kubeconfig start one.",
                fix="give either the address or what to start",
            )
        settings = settings or resolve_settings({"connect_timeout_s": timeout, "connect_via": via})
        backend = address_backend.up(address, token_file=token_file, dashboard=dashboard_url, say=say)
        return _connected(Cluster(backend, settings=settings), connect, say)
    if token_file is not None or dashboard_url is not None:
        raise UsageError("token_file and dashboard_url go with address=.", fix="add address='ray://HOST:10001'")
    if local and kube_args:
        raise UsageError(
            "up(local=True) starts the embedded cluster; values/set/template/context/namespace/kubeconfig are for "
            "Kubernetes.",
            fix="drop local=True to create the RayCluster on Kubernetes",
        )
    if local is False or kube_args:
        settings = settings or resolve_settings(
            {
                "kube_start_timeout_s": timeout,
                "kube_context": context,
                "kube_namespace": namespace,
                "connect_via": via,
            }
        )
        backend = kubernetes.up(
            values,
            set or {},
            template=template,
            kubeconfig=kubeconfig,
            recreate=recreate,
            force=force,
            connect=connect,
            settings=settings,
            say=say,
        )
    else:
        settings = settings or resolve_settings(
            {
                "local_num_cpus": num_cpus,
                "local_num_gpus": num_gpus,
                "local_dashboard": dashboard,
                "local_auth": auth,
                "start_timeout_s": timeout,
                "connect_via": via,
            }
        )
        return embedded.up_connected(settings, say, lambda b: _connected(Cluster(b, settings=settings), connect, say))
    return _connected(Cluster(backend, settings=settings), connect, say)


def _connected(c: Cluster, connect: bool, say: Say) -> Cluster:
    _make_current(c)
    if connect:
        c.connect(progress=say)
    return c


def clusters(
    *, namespace: str | None = None, context: str | None = None, kubeconfig: str | None = None
) -> list[dict[str, str]]:
    """The clusters this kernel could use: the embedded head if it runs, and the RayClusters of ``namespace`` (all
    namespaces when None) in the kubeconfig's ``context`` (a row saying why, when Kubernetes cannot be asked)."""
    rows: list[dict[str, str]] = []
    head = head_proc.find_head()
    if head is not None:
        rows.append(
            {
                "name": "local",
                "namespace": "-",
                "kind": "local",
                "state": "running",
                "address": head.client_address,
                "image": "-",
            }
        )
    try:
        rows += kubernetes.rows(namespace=namespace, context=context, kubeconfig=kubeconfig)
    except KubeError as e:
        if head is None:
            raise
        rows.append(
            {
                "name": "(kubernetes)",
                "namespace": "-",
                "kind": "kubernetes",
                "state": e.what,
                "address": "-",
                "image": "-",
            }
        )
    return rows


def down(
    name: str | None = None,
    *,
    namespace: str | None = None,
    context: str | None = None,
    kubeconfig: str | None = None,
    force: bool = False,
    progress: Say | None = None,
) -> bool:
    """Stop the current cluster (or the embedded head if this kernel is not connected). True if one was stopped.
    While runs go on there, or when the RayCluster is someone else's (its ``raynb.io/owner``), it is refused unless
    ``force``.

    ``down("ray-train-cluster", namespace="ray-train")`` deletes that RayCluster even when this kernel is not
    connected to it (e.g. after a restart); deleting one that is already gone is not an error.
    """
    say = progress or print
    cur = current_cluster()
    if name is not None and name != "local":
        if cur is not None and cur.kind == "kubernetes" and cur.name == name:
            cur.down(force=force, progress=say)
            return True
        settings = resolve_settings({"kube_context": context, "kube_namespace": namespace})
        return kubernetes.delete(name, settings, kubeconfig, say, force=force)
    if cur is not None:
        cur.down(force=force, progress=say)
        return True
    session.disconnect()
    return head_proc.stop_head()
