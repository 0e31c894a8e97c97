"""In the kernel: how the kernel reaches a cluster: Ray Client (the kernel's Python minor and Ray are the cluster's;
code objects cross), or Ray Jobs through raynb's agent (``_agent/``; they differ: a cell crosses as source and plain
data). The ``connect_via`` setting forces either; ``auto`` asks the dashboard for the cluster's Ray first, and takes
Ray Jobs also when Ray Client refuses a Python that differs. The embedded head, on the kernel's own machine with its
Python and Ray, is reached under ``auto`` as plain Ray reaches it, by a driver (``driver.py``): the same Ray handles
as Ray Client's, without a server process per kernel. The seam implementation chosen is the one kernel code gets from
``_client.side()``."""

from __future__ import annotations

import platform
from importlib.metadata import version
from pathlib import Path
from typing import TYPE_CHECKING

from .._client import side, use
from .._settings import Settings
from ..errors import UsageError, VersionMismatchError
from . import driver, session
from .backend import Say

if TYPE_CHECKING:
    from .backend import Backend

__all__ = ["connect"]


def connect(backend: Backend, settings: Settings, address: str, dashboard_url: str | None, say: Say) -> str:
    """Connect this kernel to the cluster at ``address``; how, and why, in words (``%raycluster status`` says it)."""
    gcs = backend.driver_address()
    if settings.connect_via == "auto" and gcs and driver.available():
        _connect_driver(backend, settings, gcs, say)
        return f"as a Ray driver at {gcs}: the head runs on this machine with the kernel's Python and Ray"
    path = backend.token_path()
    token = Path(path).read_text().strip() if path else None
    via, why = _choose(settings, address, dashboard_url, token=token, image=backend.image_versions())
    if via == "client":
        try:
            _connect_client(backend, settings, address, dashboard_url, say)
            return f"through Ray Client: {why}"
        except VersionMismatchError as e:
            if settings.connect_via != "auto" or not dashboard_url:
                raise
            why = str(e.saw)
    return _connect_jobs(backend, settings, dashboard_url, why, say)


def _kernel_ray() -> str:
    return version("ray")


def _choose(
    settings: Settings,
    address: str,
    dashboard_url: str | None,
    token: str | None = None,
    image: tuple[str, str] = ("", ""),
) -> tuple[str, str]:
    """Ray Client ("client") or Ray Jobs ("jobs"), and why (``token``: the cluster's, for its dashboard; ``image``:
    the (Ray, Python) its image is said to have, as a values file says)."""
    asked = settings.connect_via
    if address.startswith(("http://", "https://")):
        if asked == "client":
            raise UsageError(
                f"{address} is a dashboard's address; Ray Client needs the cluster's ray:// address.",
                fix="give address='ray://HOST:10001', or leave connect_via at auto",
            )
        return "jobs", "a dashboard's address was given"
    if asked == "jobs":
        return asked, "connect_via is 'jobs'"
    answer = session.dashboard_get(dashboard_url, "/api/version", 5.0, token=token) or {}
    theirs = str(answer.get("ray_version") or "") or image[0]
    python = image[1]
    if asked == "client":  # refused here at once, rather than by Ray Client after its attempts
        session.check_versions(theirs, python, where=f"the cluster at {address}")
        return asked, "connect_via is 'client'"
    if theirs and theirs != _kernel_ray():
        return "jobs", f"kernel Ray {_kernel_ray()}, cluster Ray {theirs}"
    if python and session.python_minor(python) != session.python_minor(platform.python_version()):
        return "jobs", f"kernel Python {platform.python_version()}, cluster Python {python}"
    return "client", "the kernel's Python and Ray are the cluster's"


def _connect_client(backend: Backend, settings: Settings, address: str, dashboard_url: str | None, say: Say) -> None:
    session.connect(
        address,
        token_path=backend.token_path(),
        dashboard_url=dashboard_url,
        runtime_env=backend.runtime_env(),
        timeout=settings.connect_timeout_s,
        reconnect_grace_s=settings.client_reconnect_grace_s,
        progress=say,
    )
    use(None)
    side().prewarm()  # the first run then starts as fast as a bare fit()


def _connect_driver(backend: Backend, settings: Settings, gcs_address: str, say: Say) -> None:
    session.disconnect()
    path = backend.token_path()
    if path:
        session.use_token(path)
    else:
        session.forget_token()
        session.match_auth_mode(token=False)
    driver.connect(
        gcs_address,
        runtime_env=backend.runtime_env(),
        timeout=settings.connect_timeout_s,
        say=say,
        head_gone=backend.driver_head_gone,
    )
    use(None)
    side().prewarm()


def _connect_jobs(backend: Backend, settings: Settings, dashboard_url: str | None, why: str, say: Say) -> str:
    from .._client.agent_job import reach_agent

    if not dashboard_url:
        raise UsageError(
            "Through Ray Jobs raynb reaches clusters by their dashboard's address; none is known.",
            fix="give dashboard_url= (--dashboard-url), or use a kernel with the cluster's Python and Ray",
        )
    session.disconnect()
    token = session.jobs_token(dashboard_url, backend.token_path())
    chosen = reach_agent(
        dashboard_url,
        at=lambda port: backend.agent_url(port, dashboard_url),
        port=settings.agent_port,
        bind=backend.agent_host,
        token=token,
        say=say,
        timeout=settings.connect_timeout_s,
    )
    use(chosen)
    theirs = chosen.cluster
    reached = (
        f"through Ray Jobs: kernel {platform.python_version()} / Ray {_kernel_ray()}, cluster {theirs['python']} / "
        f"Ray {theirs['ray']} ({why}); raynb's agent at {chosen.url}"
    )
    chosen.prewarm()
    say(f"connected to {dashboard_url} {reached}")
    return reached
