"""In the kernel: the cluster this kernel works with, its warm group, and settings resolved against the cluster
(jupysql's ``_current.py`` pattern).

Runs, the doctor and the journal read the current cluster from here, typed by what they read (``Connected``), and the
cluster's status reads the warm group (``Held``), so runs and clusters -- siblings -- never import each other and this
module imports nothing above it: no circle, counting type-only imports (tests/unit/test_house.py).
"""

from __future__ import annotations

import atexit
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from ._settings import Settings, resolve

if TYPE_CHECKING:
    from ._shared.cost import HourlyCost

__all__ = [
    "current",
    "set_current",
    "clear_current",
    "resolve_settings",
    "read_magic_config",
    "at_exit",
    "Connected",
    "HeadSite",
    "Held",
    "warm_group",
    "hold_warm",
    "active_run",
    "set_active",
    "ending",
    "wait_for_ending",
]


class HeadSite(Protocol):
    """What runs and settings read of where the cluster's head runs (``_backend.Backend`` has these, and more that
    only the cluster and the doctor use)."""

    def values_layer(self) -> dict[str, Any]: ...

    def storage_reach(self) -> tuple[int, tuple[str, ...]]: ...

    def grows_to(self) -> dict[str, float] | None: ...

    def efa_expected(self) -> tuple[bool, bool | None]: ...

    def run_leases_dir(self) -> str | None: ...

    def hourly_cost(self) -> HourlyCost | None: ...


class Connected(Protocol):
    """What runs, the doctor and the journal read of the cluster this kernel works with (``_cluster.Cluster`` is the
    one; a Protocol here, so this module imports nothing above it)."""

    @property
    def name(self) -> str: ...

    @property
    def kind(self) -> str: ...

    @property
    def backend(self) -> HeadSite: ...

    @property
    def dashboard_url(self) -> str | None: ...


class Held(Protocol):
    """What the cluster's status reads of this kernel's warm group (``_runs.warm.WarmGroup`` is the one)."""

    @property
    def alive(self) -> bool: ...

    def line(self) -> str: ...


_current: Connected | None = None
_warm: Held | None = None
_exit_hooks: list[Callable[[], None]] = []
_magic_config: Callable[[], Mapping[str, Any]] | None = None
_active: Any = None  # the run this kernel waits on now (a ``_runs.run.Run``)
#: runs shown failed that Ray Train still winds down (``_runs/early_failure.py``)
_ending: list[threading.Thread] = []


def current() -> Connected | None:
    """The cluster this kernel is connected to, if any."""
    return _current


def set_current(cluster: Connected) -> None:
    global _current
    _current = cluster


def clear_current(cluster: Connected) -> None:
    """Forget ``cluster`` if it is the current one."""
    global _current
    if _current is cluster:
        _current = None


def warm_group() -> Held | None:
    """This kernel's warm group, if one is up."""
    return _warm if _warm is not None and _warm.alive else None


def hold_warm(group: Held | None, *, instead_of: Held | None = None) -> None:
    """``group`` is now this kernel's warm group (None: none is). With ``instead_of``, only if that one still is."""
    global _warm
    if instead_of is None or _warm is instead_of:
        _warm = group


def active_run() -> Any:
    """The run this kernel is waiting on right now, if any (readable from other threads)."""
    return _active


def set_active(run: Any) -> None:
    global _active
    _active = run


def ending(winding: threading.Thread) -> None:
    """Start ``winding``: a run shown as failed, followed until Ray Train has wound it down on the cluster."""
    _ending[:] = [t for t in _ending if t.is_alive()] + [winding]
    winding.start()


def wait_for_ending(timeout: float = 15.0) -> None:
    """Wait (at most ``timeout``) until the runs shown as failed have wound down on the cluster: the next run then
    takes the launcher they leave."""
    deadline = time.monotonic() + timeout
    for winding in list(_ending):
        winding.join(max(0.0, deadline - time.monotonic()))


def at_exit(hook: Callable[[], None]) -> None:
    """Run ``hook`` once when the kernel exits (registered once however often it is asked)."""
    if hook not in _exit_hooks:
        if not _exit_hooks:
            atexit.register(_run_exit_hooks)
        _exit_hooks.append(hook)


def _run_exit_hooks() -> None:
    for hook in _exit_hooks:
        try:
            hook()
        except Exception:  # noqa: BLE001 - the kernel is going away; nothing to tell anyone
            pass


def read_magic_config(layer: Callable[[], Mapping[str, Any]] | None) -> None:
    """Where the ``%config RayNB`` layer is read from (the magics register theirs as the extension loads): every call
    resolves against it, the Python API's and the doctor's as much as a magic's."""
    global _magic_config
    _magic_config = layer


def resolve_settings(flags: Mapping[str, Any] | None = None) -> Settings:
    """The settings of a call: a flag (``flags``) > ``%config RayNB`` > ``RAYNB_*`` > the current cluster's values file
    (e.g. STRICT_EFA, STORAGE_PATH) > default. Every API call and magic resolves its settings through here."""
    values = _current.backend.values_layer() if _current is not None else None
    return resolve(flags, _magic_config() if _magic_config is not None else None, values=values)
