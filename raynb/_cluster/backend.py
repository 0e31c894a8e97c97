"""In the kernel: what a :class:`~raynb.Cluster` needs from where its head runs. One module per backend implements it,
beside this one: ``embedded.py`` (the embedded head on this machine), ``kubernetes.py`` (a KubeRay RayCluster),
``address.py`` (a running cluster raynb did not start). A new way to reach a head is a new module, not new branches."""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from .._checks import Check

if TYPE_CHECKING:
    from .._shared.cost import HourlyCost
    from .kube_state import KubeStatus

__all__ = ["Backend", "BackendKind", "BackendChecks", "Say", "kube_checks_not_applicable", "agent_beside_dashboard"]

BackendKind = Literal["local", "kubernetes", "address"]
Say = Callable[[str], None]


@dataclass
class BackendChecks:
    """The backend's part of ``doctor``; ``needs_no_ray``: they can run while Ray is not connected."""

    checks: list[Check] = field(default_factory=list)
    needs_no_ray: bool = False


#: the doctor's Kubernetes/EFA checks (``kube_doctor.py``), which another backend lists as not applying to it
_KUBE_ONLY = (
    "EFA requested by worker pods",
    "GPU nodes advertise EFA and GPUs",
    "EFA and NVIDIA device plugins ready",
    "GPU nodes in one availability zone",
    "NCCL/EFA variables on workers",
)


def kube_checks_not_applicable(why: str) -> BackendChecks:
    """The Kubernetes/EFA checks, each "n/a" for ``why`` (a backend that is not a RayCluster raynb starts)."""
    return BackendChecks([Check(name, "n/a", why) for name in _KUBE_ONLY])


def agent_beside_dashboard(port: int, dashboard_url: str) -> str:
    """raynb's agent on the dashboard's host: where a head this kernel reaches directly serves it."""
    return f"http://{urllib.parse.urlsplit(dashboard_url).hostname or '127.0.0.1'}:{port}"


class Backend(Protocol):
    @property
    def kind(self) -> BackendKind: ...

    @property
    def name(self) -> str: ...

    @property
    def head_shm_matters(self) -> bool:
        """doctor checks /dev/shm where the head runs (the embedded head: this machine's, shared with the workers)."""
        ...

    def reach(self, say: Say) -> tuple[str, str | None]:
        """The Ray Client address and dashboard URL to connect to (opening port-forwards, checking versions)."""
        ...

    def driver_address(self) -> str | None:
        """The head's GCS address where this kernel may connect as a plain Ray driver (the head runs on this machine
        with the kernel's Python and Ray: ``driver.py``); None: through Ray Client or Ray Jobs."""
        ...

    def driver_head_gone(self) -> str | None:
        """While this kernel connects as a driver: None if the head still runs, else what its log last said."""
        ...

    def token_path(self) -> str | None:
        """Ray's auth token for this cluster, when it is in token mode and raynb holds the token."""
        ...

    def image_versions(self) -> tuple[str, str]:
        """(Ray, Python) the cluster's image is said to have before anything runs ('' where nothing says)."""
        ...

    @property
    def agent_host(self) -> str | None:
        """The address raynb's agent binds on the head (the Jobs path; None: the head node's, as Ray's servers)."""
        ...

    def agent_url(self, port: int, dashboard_url: str) -> str:
        """Where this kernel reaches raynb's agent, which listens on ``port`` of the head."""
        ...

    def runtime_env(self) -> dict[str, Any]:
        """What the Ray Client job needs on the cluster (the image may lack raynb: ship it)."""
        ...

    def kube_status(self) -> KubeStatus | None: ...

    def hourly_cost(self) -> HourlyCost | None:
        """What the cluster's GPU nodes cost per hour (presets' prices); None where nothing is billed or known."""
        ...

    def grows_to(self) -> dict[str, float] | None:
        """The cluster's resources at full size when it is autoscaled (None: what it has now is all it has)."""
        ...

    def logs(self, which: str, tail: int) -> str: ...

    def down(self, say: Say, *, force: bool = False) -> None:
        """Stop the cluster and everything it started (``force``: also one that someone else owns)."""
        ...

    def disconnect(self) -> None:
        """Close what this kernel opened to reach the cluster; leave the cluster running."""
        ...

    def at_kernel_exit(self) -> None: ...

    def doctor_checks(self) -> BackendChecks: ...

    def efa_expected(self) -> tuple[bool, bool | None]:
        """(EFA expected between nodes, GPUDirect RDMA expected) for the NCCL badges of this cluster's runs."""
        ...

    def storage_reach(self) -> tuple[int, tuple[str, ...]]:
        """How many nodes the cluster has, and the paths mounted on every one (a shared volume)."""
        ...

    def values_layer(self) -> dict[str, Any]:
        """Settings the cluster's values file sets (the 'values file' layer of settings resolution)."""
        ...

    def run_leases_dir(self) -> str | None:
        """Where a running run keeps the head up after its kernel is gone (None: the head does not stop by itself)."""
        ...
