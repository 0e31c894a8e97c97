"""In the kernel: the Kubernetes backend: a KubeRay RayCluster rendered from the values file, reached through
port-forwards.

:class:`KubernetesBackend` is what a :class:`~raynb.Cluster` holds for such a cluster; :func:`up` applies (or reuses)
the RayCluster and waits for it; :func:`attach` finds one by name; :func:`delete` and :func:`rows` serve
``down NAME`` and ``list``. API calls are in ``kube_api.py`` (reaching the API: ``kube_connect.py``), pure state in
``kube_state.py`` and ``raynb/manifest.py``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import manifest
from .._identity import default_cluster_name
from .._settings import Settings, raynb_home
from .._shared import run_notice
from .._shared.cost import HourlyCost, hourly_cost, usd
from ..display.run_view import clock
from ..errors import KubeError, ManifestError, NotConnectedError
from . import head_account, kube_connect
from . import kube_api as kube
from .backend import BackendChecks, BackendKind, Say
from .kube_state import KubeStatus, RayClusterRef, readiness, spec_differences
from .port_forward import PortForward
from .session import check_versions

__all__ = ["KubernetesBackend", "up", "attach", "delete", "rows", "named_raycluster"]

CLIENT_PORT, DASHBOARD_PORT = 10001, 8265


@dataclass
class KubernetesBackend:
    """How a Kubernetes-backed Cluster is reached: API target, RayCluster, and the port-forwards to its head."""

    target: kube_connect.Target
    ref: RayClusterRef
    values: dict[str, str] = field(default_factory=dict)
    forwards: dict[int, PortForward] = field(default_factory=dict)
    kind: BackendKind = "kubernetes"
    head_shm_matters: bool = False
    #: a port-forward reaches a pod through its own loopback, so the agent listens on every address of the head pod
    #: (its secret guards it, as the cluster's token guards the dashboard, which KubeRay binds to 0.0.0.0 too)
    agent_host: str | None = "0.0.0.0"

    @property
    def name(self) -> str:
        return self.ref.name

    def forward(self, remote_port: int) -> PortForward:
        if remote_port not in self.forwards:
            self.forwards[remote_port] = PortForward(
                self.target.api, self.ref.namespace, lambda: kube.head_pod_name(self.target, self.ref), remote_port
            )
        return self.forwards[remote_port]

    def reach(self, say: Say) -> tuple[str, str | None]:
        """Port-forward the head's client (10001) and dashboard (8265) ports to 127.0.0.1 (which of Ray Client and
        Ray Jobs the kernel takes is ``connection.py``'s to choose)."""
        client_fw, dash_fw = self.forward(CLIENT_PORT), self.forward(DASHBOARD_PORT)
        say(
            f"port-forward 127.0.0.1:{client_fw.local_port} → head:{CLIENT_PORT} (Ray Client), "
            f"127.0.0.1:{dash_fw.local_port} → head:{DASHBOARD_PORT} (dashboard) through the Kubernetes API"
        )
        return f"ray://{client_fw.address}", f"http://{dash_fw.address}"

    def image_versions(self) -> tuple[str, str]:
        return self.values.get("RAY_VERSION", ""), self.values.get("PYTHON_VERSION", "")

    def agent_url(self, port: int, dashboard_url: str) -> str:
        """A port-forward to the agent's port of the head pod, as for Ray Client's and the dashboard's."""
        return f"http://{self.forward(port).address}"

    def driver_address(self) -> None:
        return None  # a head elsewhere: Ray Client or Ray Jobs

    def driver_head_gone(self) -> None:
        return None  # never connected as a driver

    def token_path(self) -> str | None:
        """The cluster's Ray token (token mode: KubeRay's Secret, read with `get secrets`), copied into a file only
        this user can read; None when the cluster runs without auth."""
        if self.values.get("RAY_AUTH_MODE", "token") != "token":
            return None
        token = kube.ray_token(self.target, self.ref)
        if token is None:  # e.g. KubeRay < 1.5 ignored authOptions: the auth preflight says what the head wants
            return None
        d = raynb_home() / "kube-tokens"
        d.mkdir(parents=True, exist_ok=True)
        d.chmod(0o700)
        path = d / f"{self.ref.namespace}.{self.ref.name}"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(token)
        return str(path)

    def runtime_env(self) -> dict[str, Any]:
        # the cluster image does not have raynb: ship the package with the job
        return {"py_modules": [str(Path(__file__).resolve().parent.parent)]}  # the whole raynb package

    def kube_status(self) -> KubeStatus:
        return kube.kube_status(self.target, self.ref)

    def hourly_cost(self) -> HourlyCost | None:
        return hourly_cost(self.values, manifest.load_presets())

    def grows_to(self) -> dict[str, float] | None:
        """An autoscaled cluster's resources at full size (its workers may be at zero now)."""
        v = self.values
        if not manifest.autoscaled(v):
            return None
        try:
            nodes, head_cpu = int(v["GPU_NODE_COUNT"]), float(v.get("HEAD_CPU") or 0)
            return {"GPU": nodes * float(v["GPUS_PER_NODE"]), "CPU": head_cpu + nodes * float(v["WORKER_CPU"])}
        except (KeyError, ValueError):
            return None  # a cluster raynb did not make: what it has now is all raynb can say

    def logs(self, which: str, tail: int) -> str:
        name, text = kube.pod_logs(self.target, self.ref, which, tail=tail)
        return (
            f"==> {self.ref.namespace}/{name} (last {tail} lines)\n{text}"
            f"{'' if text.endswith(chr(10)) or not text else chr(10)}"
            "(NCCL's lines are not in container logs: Ray workers write them to /tmp/ray/session_latest/logs/"
            "worker-*.err in the pod; %%raytrain shows them parsed as badges, --nccl full shows them raw)"
        )

    def down(self, say: Say, *, force: bool = False) -> None:
        _refuse_unless_owner(
            kube.get_raycluster(self.target, self.ref), kube_connect.whoami(self.target), "delete", force
        )
        self.disconnect()
        kube.delete_raycluster(self.target, self.ref, progress=say)

    def disconnect(self) -> None:
        for f in self.forwards.values():
            f.close()
        self.forwards.clear()

    def at_kernel_exit(self) -> None:
        """A RayCluster outlives the kernel (like any cluster you pay for, it stops on `down` only)."""

    def doctor_checks(self) -> BackendChecks:
        from .kube_doctor import kube_checks

        return BackendChecks(kube_checks(self.target, self.ref, self.values), needs_no_ray=True)

    def efa_expected(self) -> tuple[bool, bool | None]:
        efa = self.values.get("EFA_PER_NODE", "0") not in ("", "0")
        return efa, (self.values.get("GPUDIRECT_RDMA") == "true") if efa else None

    def run_leases_dir(self) -> None:
        return None  # a RayCluster stays until it is deleted

    def storage_reach(self) -> tuple[int, tuple[str, ...]]:
        v = self.values
        nodes = 1 + int(v.get("GPU_NODE_COUNT") or 1)  # the head is a node of its own
        return nodes, (v["SHARED_MOUNT_PATH"],) if v.get("SHARED_PVC") and v.get("SHARED_MOUNT_PATH") else ()

    def values_layer(self) -> dict[str, Any]:
        v = self.values
        keys = (("strict_efa", "STRICT_EFA"), ("storage_path", "STORAGE_PATH"), ("max_failures", "MAX_FAILURES"))
        return {k: v[key] for k, key in keys if v.get(key)}


OWNER = "raynb.io/owner"


def _refuse_unless_owner(rc: Mapping[str, Any] | None, me: str, action: str, force: bool) -> None:
    """Another user's RayCluster is not reused, recreated or deleted by accident (``force`` means it)."""
    owner = ((rc or {}).get("metadata", {}).get("annotations") or {}).get(OWNER)
    if rc is None or force or not owner or owner == me:
        return
    ns, name = rc["metadata"]["namespace"], rc["metadata"]["name"]
    what = {"reuse": "connect this kernel to it", "recreate": "replace it", "delete": "delete it"}[action]
    flag = {"reuse": "up --force", "recreate": "up --recreate --force", "delete": f"down {name} --force"}[action]
    raise KubeError(
        f"The RayCluster {ns}/{name} belongs to {owner}; raynb will not {what} for {me}.",
        saw=f"annotation {OWNER}={owner} on the RayCluster",
        fix=f"use a cluster of your own (`--set RAY_CLUSTER_NAME={default_cluster_name()}`), or, if "
        f"{owner} agrees, `%raycluster {flag}`"
        + (
            f" (raynb.Cluster.from_name({name!r}, namespace={ns!r}) attaches to it as it is)"
            if action == "reuse"
            else ""
        ),
    )


def _compared(spec: Mapping[str, Any], vals: Mapping[str, str]) -> Mapping[str, Any]:
    """The part of the wanted spec a live cluster must match: an autoscaled cluster's autoscaler owns its worker
    groups' ``replicas`` (a cluster grown for a run is the same cluster)."""
    if not manifest.autoscaled(vals):
        return spec
    groups = [{k: v for k, v in g.items() if k != "replicas"} for g in spec["workerGroupSpecs"]]
    return {**spec, "workerGroupSpecs": groups}


def _render(
    values: str | Mapping[str, str] | None,
    overrides: Mapping[str, Any],
    namespace: str | None,
    template: str | None = None,
) -> tuple[dict[str, Any], dict[str, str]]:
    vals = dict(values) if isinstance(values, Mapping) else manifest.load_values(values)
    ov = {k: str(v) for k, v in overrides.items()}
    if namespace:
        ov["NAMESPACE"] = namespace
    return manifest.render(vals, ov, template=template), manifest.resolve_values(vals, ov)


def up(
    values: str | Mapping[str, str] | None,
    overrides: Mapping[str, Any],
    *,
    template: str | None = None,
    kubeconfig: str | None,
    recreate: bool,
    connect: bool,
    settings: Settings,
    say: Say,
    force: bool = False,
) -> KubernetesBackend:
    """Render, apply (or reuse) and wait for the RayCluster; what the user can fix is checked before versions."""
    obj, vals = _render(values, overrides, settings.kube_namespace, template)
    ref = RayClusterRef(obj["metadata"]["name"], obj["metadata"]["namespace"])
    target = kube_connect.connect_api(context=settings.kube_context, kubeconfig=kubeconfig)
    say(f"Kubernetes API: {target.where()}")
    kube_connect.ensure_crd(target)
    # before anything is created: an operator older than the manifest (KubeRay < 1.5.1 has no token auth)
    manifest.check_installed(obj, kube_connect.raycluster_schema(target), target.where())
    if connect and settings.connect_via == "client":  # before creating anything: a cluster this kernel cannot
        # talk to helps nobody (through Ray Jobs, where auto takes a kernel whose Python or Ray differs, it can)
        check_versions(
            vals.get("RAY_VERSION", ""), vals.get("PYTHON_VERSION", ""), where=f"the image {vals.get('DLC_IMAGE', '?')}"
        )
    me = kube_connect.whoami(target)
    obj["metadata"].setdefault("annotations", {})[OWNER] = me
    identity: list[dict[str, Any]] | None = None
    live = kube.get_raycluster(target, ref)
    if live is not None:
        diffs = spec_differences(_compared(obj["spec"], vals), live.get("spec", {}))
        _refuse_unless_owner(live, me, "recreate" if diffs and recreate else "reuse", force)
        if diffs and not recreate:
            shown = diffs[:12] + ([f"... and {len(diffs) - 12} more"] if len(diffs) > 12 else [])
            raise KubeError(
                f"A RayCluster {ref.namespace}/{ref.name} already exists with a different spec.",
                saw="live → wanted:\n" + "\n".join(shown),
                fix="KubeRay does not roll existing pods to a new spec: `%raycluster up --recreate ...` "
                f"(raynb.up(..., recreate=True)) deletes and recreates it; `raynb.Cluster.from_name({ref.name!r}, "
                f"namespace={ref.namespace!r})` attaches to it as it is",
            )
        if diffs:
            say(f"spec changed ({len(diffs)} difference(s)): recreating {ref.namespace}/{ref.name}")
            kube.delete_raycluster(target, ref, progress=say)
            live = None
        else:
            say(f"reusing RayCluster {ref.namespace}/{ref.name} (same spec)")
    if live is None:
        identity = head_account.make(target, vals, obj, say)  # before the RayCluster: its head pod is made with it
        live = kube.apply_raycluster(target, obj) or kube.get_raycluster(target, ref)  # (apply may answer empty)
        workers = vals.get("GPU_NODE_COUNT")
        if manifest.autoscaled(vals):
            workers = f"{vals['GPU_MIN_NODES']}–{workers}"
        say(
            f"applied RayCluster {ref.namespace}/{ref.name} (server-side apply, field manager "
            f"{kube.FIELD_MANAGER}): head + {workers} × {vals.get('GPU_NODE_TYPE')} worker(s), "
            f"{vals.get('GPUS_PER_NODE')} GPU and {vals.get('EFA_PER_NODE')} EFA each"
        )
        if manifest.autoscaled(vals):
            say(
                "the workers are autoscaled (KubeRay's autoscaler, in the head pod): added when a run needs them "
                f"(a new node takes minutes), removed after {clock(float(vals['IDLE_TIMEOUT_S']))} without work"
            )
        if (cost := hourly_cost(vals, manifest.load_presets())) is not None:
            when = "while they run" if cost.min_nodes is not None else "from now"
            say(f"its GPU nodes bill {when}: {cost.text()}; `%raycluster down` stops that")
    if vals.get("NETWORK_POLICY", "true") == "true" and live is not None:
        try:
            kube.apply_owned(target, manifest.render_objects("networkpolicy.yaml", vals)[0], live)
        except KubeError as e:  # the token still guards the head; say what is missing
            say(
                f"NetworkPolicy not applied ({e.what}): other pods can reach the head's ports, the Ray token guards them"
            )
    if live is not None and (identity or head_account.of(live) == ref.name):  # handed over: deleted with the cluster
        try:
            for d in identity or head_account.docs(vals):
                kube.apply_owned(target, d, live)
        except KubeError as e:  # made before, by someone who could: it stays until deleted by hand
            say(f"the head pod's account is not handed to the RayCluster ({e.what}): it stays after `down`")
    kube.wait_ready(target, ref, timeout=settings.kube_start_timeout_s, progress=say)
    return KubernetesBackend(target, ref, vals)


def _default_namespace() -> str:
    """Where raynb's RayClusters live unless told otherwise: NAMESPACE of the default values file."""
    try:
        return manifest.load_values().get("NAMESPACE") or "ray-train"
    except ManifestError:
        return "ray-train"


def named_raycluster(
    name: str, settings: Settings, kubeconfig: str | None
) -> tuple[kube_connect.Target, RayClusterRef]:
    """API target and reference for a RayCluster named by the user (from_name, down NAME)."""
    target = kube_connect.connect_api(context=settings.kube_context, kubeconfig=kubeconfig)
    return target, RayClusterRef(name, settings.kube_namespace or _default_namespace())


def attach(name: str, settings: Settings, kubeconfig: str | None) -> KubernetesBackend:
    """The backend of a running RayCluster found by name, its values read back from its spec."""
    target, ref = named_raycluster(name, settings, kubeconfig)
    kube_connect.ensure_crd(target)
    rc = kube.get_raycluster(target, ref)
    if rc is None:
        names = [i["metadata"]["name"] for i in kube.list_rayclusters(target, ref.namespace)]
        raise NotConnectedError(
            f"No RayCluster {name!r} in namespace {ref.namespace!r}.",
            saw="RayClusters there: " + (", ".join(names) or "none"),
            fix="pick one of those (namespace=... for another namespace), or `%raycluster up`",
        )
    return KubernetesBackend(target, ref, manifest.values_from_spec(rc))


def delete(name: str, settings: Settings, kubeconfig: str | None, say: Say, *, force: bool = False) -> bool:
    """Delete a RayCluster by name and wait until it is gone; False when there was none. Another user's is refused
    unless ``force``."""
    target, ref = named_raycluster(name, settings, kubeconfig)
    _refuse_unless_owner(kube.get_raycluster(target, ref), kube_connect.whoami(target), "delete", force)
    gone = kube.delete_raycluster(target, ref, progress=say)
    if not gone:
        say(f"no RayCluster {ref.namespace}/{name}: nothing to delete")
    return gone


def _cost_cell(rc: Mapping[str, Any]) -> str:
    """``≈ $9.20/h`` for ``%raycluster list`` (the presets' price of the GPU nodes the spec asks for)."""
    # a RayCluster raynb did not make may lack what the values need
    try:
        cost = hourly_cost(manifest.values_from_spec(rc), manifest.load_presets())
    except (KeyError, IndexError, TypeError, ValueError):
        cost = None
    if cost is None:
        return "-"
    return f"≤ {usd(cost.usd_per_hour)}/h" if cost.min_nodes is not None else f"≈ {usd(cost.usd_per_hour)}/h"


def rows(*, namespace: str | None, context: str | None, kubeconfig: str | None) -> list[dict[str, str]]:
    """One row per RayCluster of ``namespace`` (all when None) in the kubeconfig's ``context``."""
    target = kube_connect.connect_api(context=context, kubeconfig=kubeconfig)
    kube_connect.ensure_crd(target)
    out = []
    for rc in kube.list_rayclusters(target, namespace):
        _, line = readiness(rc)
        out.append(
            {
                "name": rc["metadata"]["name"],
                "namespace": rc["metadata"]["namespace"],
                "kind": "kubernetes",
                "state": line,
                "address": target.where(),
                "image": manifest.head_image(rc),
                "owner": (rc["metadata"].get("annotations") or {}).get(OWNER, "-"),
                "runs": notice.describe() if (notice := run_notice.read(rc["metadata"].get("annotations"))) else "-",
                "cost": _cost_cell(rc),
            }
        )
    return out
