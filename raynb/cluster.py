"""The ``Cluster`` a notebook works with: how it came up, how to reach it, what it has, and how to take it down."""

from __future__ import annotations

import atexit
import html
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from . import local, session
from .config import Settings, resolve
from .errors import NotConnectedError

__all__ = ["Cluster", "ClusterStatus", "NodeInfo", "up", "down", "current"]

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


@dataclass(frozen=True)
class ClusterStatus:
    name: str
    kind: str
    address: str
    dashboard_url: str | None
    nodes: list[NodeInfo] = field(default_factory=list)
    total: dict[str, float] = field(default_factory=dict)
    available: dict[str, float] = field(default_factory=dict)

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
        if self.dashboard_url:
            lines.append(f"  dashboard {self.dashboard_url}")
        return "\n".join(lines)

    def html(self) -> str:
        rows = "".join(
            f"<tr><td>{'head' if n.is_head else 'worker'}</td><td>{html.escape(n.address)}</td>"
            f"<td>{'alive' if n.alive else '<b style=color:#dc3545>dead</b>'}</td><td>{n.cpus:g}</td>"
            f"<td>{n.gpus:g}</td><td>{n.memory_gb:.1f}</td></tr>" for n in self.nodes)
        dash = (f' · <a href="{html.escape(self.dashboard_url)}" target="_blank">Ray dashboard</a>'
                if self.dashboard_url else "")
        return (
            f'<div class="raynb-cluster" data-kind="{self.kind}" style="font-family:sans-serif;font-size:13px">'
            f'<b>{html.escape(self.name)}</b> <span style="color:#555">({self.kind}, {html.escape(self.address)})</span>'
            f'{dash}<br>CPUs <b>{self.available.get("CPU", 0):g}</b>/{self.cpus:g} free · GPUs '
            f'<b>{self.available.get("GPU", 0):g}</b>/{self.gpus:g} free'
            f'<table style="font-size:12px;margin-top:4px"><tr><th>node</th><th>address</th><th>state</th>'
            f'<th>CPU</th><th>GPU</th><th>memory GB</th></tr>{rows}</table></div>'
        )


class Cluster:
    """A connected Ray cluster. ``raynb.up()`` makes one; ``Cluster.from_name()`` re-attaches."""

    def __init__(self, *, kind: str, name: str, address: str, dashboard_url: str | None,
                 head: local.LocalHead | None = None, settings: Settings | None = None) -> None:
        self.kind, self.name, self.address, self.dashboard_url = kind, name, address, dashboard_url
        self.head = head
        self.settings = settings or Settings()

    @classmethod
    def from_name(cls, name: str = "local", *, connect: bool = True) -> Cluster:
        """Re-attach to a running cluster by name (``"local"``: the embedded head), e.g. after a kernel restart."""
        if name != "local":
            raise NotConnectedError(f"No cluster named {name!r} is known here.",
                                    fix="use Cluster.from_name('local') for the embedded cluster.")
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
        session.connect(self.address, dashboard_url=self.dashboard_url, runtime_env=_job_runtime_env(self.kind),
                        timeout=self.settings.connect_timeout_s, progress=progress)
        from .run import prewarm

        prewarm(self.settings)  # the first %%raytrain then starts as fast as a bare fit()
        return self

    @property
    def connected(self) -> bool:
        return session.is_connected()

    def status(self) -> ClusterStatus:
        import ray

        if not ray.is_initialized():
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
                             dict(ray.cluster_resources()), dict(ray.available_resources()))

    def down(self) -> None:
        """Disconnect and stop the cluster (the embedded head and every process it started)."""
        global _current
        session.disconnect()
        if self.kind == "local":
            local.stop_head(self.head)
            local.remove_owner()
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
    try:
        session.disconnect()
    finally:
        local.remove_owner()


def current() -> Cluster | None:
    """The cluster this kernel is connected to, if any."""
    return _current


def up(
    local_: bool | None = None,
    *,
    num_cpus: int | None = None,
    num_gpus: int | None = None,
    timeout: float | None = None,
    settings: Settings | None = None,
    progress: Callable[[str], None] | None = None,
    **kwargs: Any,
) -> Cluster:
    """Start (or reuse) a cluster and connect this kernel to it with Ray Client.

    ``raynb.up(local=True)`` gives the embedded cluster: a local head as its own process tree, dashboard on, Ray Client
    on a free port bound to 127.0.0.1. It is reused if already running, and stopped when the last kernel using it exits.
    """
    if "local" in kwargs:
        local_ = kwargs.pop("local")
    if kwargs:
        raise TypeError(f"up() got unexpected arguments: {', '.join(kwargs)}")
    settings = settings or resolve({"local_num_cpus": num_cpus, "local_num_gpus": num_gpus,
                                    "start_timeout_s": timeout})
    if local_ is False:
        raise NotConnectedError(
            "Only the embedded cluster can be started from this version of raynb.",
            fix="use raynb.up(local=True) / %raycluster up --local.")
    say = progress or print
    head = local.start_head(num_cpus=settings.local_num_cpus, num_gpus=settings.local_num_gpus,
                            timeout=settings.start_timeout_s, progress=say, dashboard=settings.local_dashboard)
    if head.reused:
        say(f"reusing the embedded Ray head at {head.client_address}")
    c = Cluster(kind="local", name="local", address=head.client_address, dashboard_url=head.dashboard_url,
                head=head, settings=settings)
    _set_current(c)
    c.connect(progress=say)
    return c


def down() -> bool:
    """Stop the current cluster (or the embedded head if this kernel is not connected). True if one was stopped."""
    if _current is not None:
        _current.down()
        return True
    session.disconnect()
    return local.stop_head()
