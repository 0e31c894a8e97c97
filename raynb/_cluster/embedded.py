"""In the kernel: the embedded backend: a Ray head on this machine, started and supervised by
``_cluster/embedded_head.py``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from .._settings import Settings
from ..errors import ClusterStartError, NotConnectedError, UsageError
from . import embedded_head as head_proc
from . import session
from .backend import BackendChecks, BackendKind, Say, agent_beside_dashboard, kube_checks_not_applicable
from .embedded_head import LocalHead

__all__ = ["EmbeddedBackend", "up", "up_connected", "attach"]

T = TypeVar("T")


@dataclass
class EmbeddedBackend:
    head: LocalHead
    name: str = "local"
    kind: BackendKind = "local"
    head_shm_matters: bool = True
    agent_host: str | None = None

    def reach(self, say: Say) -> tuple[str, str | None]:
        return self.head.client_address, self.head.dashboard_url

    def driver_address(self) -> str | None:
        from .head_fitness import why_unfit

        return None if why_unfit(self.head) else self.head.gcs_address

    def driver_head_gone(self) -> str | None:
        return None if self.head.alive() else head_proc.head_log_tail()

    def token_path(self) -> str | None:
        return self.head.token_path

    def image_versions(self) -> tuple[str, str]:
        return "", ""  # this machine's: the dashboard says its Ray

    def agent_url(self, port: int, dashboard_url: str) -> str:
        return agent_beside_dashboard(port, dashboard_url)

    def runtime_env(self) -> dict[str, Any]:
        return {}  # same machine: workers import the installed raynb

    def kube_status(self) -> None:
        return None

    def hourly_cost(self) -> None:
        return None  # this machine: nothing billed per hour by raynb's doing

    def grows_to(self) -> None:
        return None  # this machine's cores and GPUs, all there now

    def logs(self, which: str, tail: int) -> str:
        raise UsageError(
            "Container logs exist for Kubernetes clusters only.",
            fix=f"the embedded cluster's Ray logs are files in {self.head.temp_dir}/session_latest/logs",
        )

    def down(self, say: Say, *, force: bool = False) -> None:
        head_proc.stop_head(self.head)
        head_proc.remove_owner()
        session.forget_token()  # its token file is gone with it

    def disconnect(self) -> None:
        """Nothing to close: the head stays for other kernels (and stops once no kernel owns it)."""

    def at_kernel_exit(self) -> None:
        # The supervisor stops the head once no kernel owns it; say we are gone now rather than in 1 s.
        head_proc.remove_owner()

    def doctor_checks(self) -> BackendChecks:
        return kube_checks_not_applicable("applies to Kubernetes clusters; this is the embedded cluster")

    def efa_expected(self) -> tuple[bool, bool | None]:
        return False, None

    def storage_reach(self) -> tuple[int, tuple[str, ...]]:
        return 1, ()  # one node: its disk is every node's

    def values_layer(self) -> dict[str, Any]:
        return {}

    def run_leases_dir(self) -> str:
        return head_proc.leases_dir()


def up(settings: Settings, say: Say) -> EmbeddedBackend:
    """Start the embedded head, or reuse the one running for this user."""

    def start() -> LocalHead:
        return head_proc.start_head(
            num_cpus=settings.local_num_cpus,
            num_gpus=settings.local_num_gpus,
            timeout=settings.start_timeout_s,
            progress=say,
            dashboard=settings.local_dashboard,
            auth=settings.local_auth,
        )

    try:
        head = start()
    except ClusterStartError as e:
        # Ray's dashboard gives each of its modules 30 s to start, then exits: on a busy machine, once more
        if "failed to start. Timeout after" not in (e.saw or ""):
            raise
        say("the head's dashboard did not start in time (a busy machine?): starting the head once more ...")
        head = start()
    if head.reused:
        say(f"reusing the embedded Ray head at {head.client_address}")
    if head.token_path is None:
        say(
            "warning: the embedded head runs without authentication: any user of this machine can submit jobs to it "
            "and run code as you (drop --no-auth / RAYNB_LOCAL_AUTH=0 to turn token authentication back on)"
        )
    return EmbeddedBackend(head)


def up_connected(settings: Settings, say: Say, connected: Callable[[EmbeddedBackend], T]) -> T:
    """:func:`up`, then ``connected(backend)``; once more where the head it started stopped before this kernel
    connected (``ray start`` ends the head when any of its processes dies: CI saw it in a 1-CPU container)."""
    backend = up(settings, say)
    try:
        return connected(backend)
    except ClusterStartError:
        if backend.head.reused:
            raise
        say(f"the embedded Ray head stopped as this kernel connected ({_what_ended(head_proc.head_log_tail(400))}): "
            "starting a fresh one ...")  # fmt: skip
        return connected(up(settings, say))


def _what_ended(log: str) -> str:
    """``ray start``'s line for the process whose end ended the head ("raylet [exit code=1]", before its log's tail,
    which Ray prints below), else the log's last line."""
    lines = [ln.strip() for ln in log.splitlines() if ln.strip()]
    for i, ln in enumerate(lines[:-1]):
        if ln.startswith("Some Ray subprocesses exited unexpectedly"):
            return lines[i + 1]
    return lines[-1] if lines else "no log"


def attach() -> EmbeddedBackend:
    head = head_proc.find_head()
    if head is None:
        raise NotConnectedError("No embedded Ray head is running.", fix="start one with raynb.up(local=True).")
    head_proc.add_owner()
    return EmbeddedBackend(head)
