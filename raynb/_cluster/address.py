"""In the kernel: a Ray cluster raynb did not start, reached at the address a user gives:
``raynb.up(address="ray://host:10001")`` (Ray Client, or Ray Jobs through the dashboard beside it when the kernel's
Python or Ray differs) or ``address="http://host:8265"`` (its dashboard: Ray Jobs). Connected to and used like any
other, never stopped -- ``down`` only disconnects, for it is not raynb's to stop. The cluster may not have raynb
installed, so the package travels with the connection, as on Kubernetes."""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import UsageError
from .backend import BackendChecks, BackendKind, Say, agent_beside_dashboard, kube_checks_not_applicable
from .session import dashboard_get

__all__ = ["AddressBackend", "parse_address", "up"]

#: where Ray's dashboard listens unless told otherwise (``ray start --dashboard-port``)
DASHBOARD_PORT = 8265


def parse_address(address: str) -> tuple[str, str, int]:
    """``(scheme, host, port)`` of ``ray://host:port`` (Ray Client) or ``http(s)://host:port`` (the dashboard and its
    Jobs API); anything else is refused with the two forms."""
    parts = urllib.parse.urlsplit(address.strip())
    forms = "ray://HOST:10001 (Ray Client) or http://HOST:8265 (the dashboard)"
    try:
        port = parts.port
    except ValueError:
        port = None
    if (
        parts.scheme not in ("ray", "http", "https")
        or not parts.hostname
        or port is None
        or parts.path not in ("", "/")
    ):
        raise UsageError(f"{address!r} is not a Ray cluster's address.", fix=f"give {forms}")
    return parts.scheme, parts.hostname, port


@dataclass
class AddressBackend:
    address: str
    dashboard_url: str | None = None
    token_file: str | None = None
    kind: BackendKind = "address"
    #: where the head runs is not this kernel's to know: the doctor asks the cluster's own nodes instead
    head_shm_matters: bool = False
    agent_host: str | None = None

    @property
    def name(self) -> str:
        return self.address.split("://", 1)[-1]

    def image_versions(self) -> tuple[str, str]:
        return "", ""  # nothing said before connecting: its dashboard says its Ray

    def agent_url(self, port: int, dashboard_url: str) -> str:
        return agent_beside_dashboard(port, dashboard_url)

    def reach(self, say: Say) -> tuple[str, str | None]:
        """The address as given, and the dashboard's (the cluster then chooses Ray Client or Ray Jobs)."""
        return self.address, self.dashboard_url

    def driver_address(self) -> None:
        return None  # a head elsewhere: Ray Client or Ray Jobs

    def driver_head_gone(self) -> None:
        return None  # never connected as a driver

    def token_path(self) -> str | None:
        return self.token_file

    def runtime_env(self) -> dict[str, Any]:
        # the cluster may not have raynb (a head started by hand, another team's image): ship the package
        return {"py_modules": [str(Path(__file__).resolve().parent.parent)]}

    def kube_status(self) -> None:
        return None

    def hourly_cost(self) -> None:
        return None  # what it costs is for whoever runs it to say

    def grows_to(self) -> None:
        return None

    def logs(self, which: str, tail: int) -> str:
        raise UsageError(
            f"raynb did not start the cluster at {self.address}, so it cannot read its processes' logs.",
            fix="`%raytrain logs NAME` shows what a run's workers printed; the Ray dashboard has the rest"
            + (f" ({self.dashboard_url})" if self.dashboard_url else ""),
        )

    def down(self, say: Say, *, force: bool = False) -> None:
        say(f"disconnected from {self.address}; raynb did not start that cluster, so it keeps running")

    def disconnect(self) -> None:
        """Nothing of raynb's to close: no port-forward, no head of its own."""

    def at_kernel_exit(self) -> None:
        """Nothing to say to the cluster: it was running before this kernel and goes on after it."""

    def doctor_checks(self) -> BackendChecks:
        why = "applies to Kubernetes clusters raynb starts; this one was reached by address"
        return kube_checks_not_applicable(why)

    def efa_expected(self) -> tuple[bool, bool | None]:
        return False, None  # unknown: the NCCL badges say what NCCL chose, without a fallback verdict

    def storage_reach(self) -> tuple[int, tuple[str, ...]]:
        from .._client import side

        return sum(1 for n in side().resources()["nodes"] if n.get("Alive")), ()

    def values_layer(self) -> dict[str, Any]:
        return {}

    def run_leases_dir(self) -> None:
        return None  # the cluster's life is not raynb's to extend


def up(address: str, *, token_file: str | None, dashboard: str | None, say: Say) -> AddressBackend:
    """A backend for the cluster at ``address``; its dashboard from ``dashboard``, else Ray's default port on the same
    host when it answers there (raynb then matches the cluster's auth mode before connecting, and links it)."""
    scheme, host, _port = parse_address(address)
    if scheme != "ray":  # the dashboard's own address: reached through Ray Jobs
        if dashboard is not None and dashboard.rstrip("/") != address.strip().rstrip("/"):
            raise UsageError(
                f"{address} is a dashboard's address, and dashboard_url says another ({dashboard}).",
                fix="give the dashboard once",
            )
        dashboard = address
    if token_file is not None and not Path(token_file).expanduser().is_file():
        raise UsageError(f"No token file at {token_file}.", fix="give the file that holds the cluster's Ray token")
    if dashboard is None:
        guess = f"http://{host}:{DASHBOARD_PORT}"
        dashboard = guess if dashboard_get(guess, "/api/authentication_mode", timeout=2) is not None else None
        if dashboard is None:
            say(f"no Ray dashboard answers at {guess}: connecting without it (give dashboard=URL to link it)")
    else:
        parse_address(dashboard)
    return AddressBackend(
        address.strip().rstrip("/"),
        dashboard_url=dashboard.rstrip("/") if dashboard else None,
        token_file=str(Path(token_file).expanduser()) if token_file else None,
    )
