"""The cluster this kernel works with, and settings resolved against it (jupysql's ``_current.py`` pattern).

Runs, the doctor and the journal read the current cluster from here, typed by what they read (``Connected``), so
none of them imports the cluster module and this module imports nothing above it: no circle, counting type-only
imports (tests/unit/test_house.py).
"""

from __future__ import annotations

import atexit
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from ._settings import Settings, resolve

if TYPE_CHECKING:
    from ._backend import Backend

__all__ = ["current", "set_current", "clear_current", "resolve_settings", "at_exit", "Connected"]


class Connected(Protocol):
    """What runs, the doctor and the journal read of the cluster this kernel works with (``_cluster.Cluster`` is the
    one; a Protocol here, so this module imports nothing above it)."""

    @property
    def name(self) -> str: ...

    @property
    def kind(self) -> str: ...

    @property
    def backend(self) -> Backend: ...

    @property
    def dashboard_url(self) -> str | None: ...


_current: Connected | None = None
_exit_hooks: list[Callable[[], None]] = []


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


def resolve_settings(flags: Mapping[str, Any] | None = None, magic_config: Mapping[str, Any] | None = None) -> Settings:
    """The settings of a call: the current cluster's values file is the 'values file' layer (e.g. STRICT_EFA,
    STORAGE_PATH). Every API call and magic resolves its settings through here."""
    values = _current.backend.values_layer() if _current is not None else None
    return resolve(flags, magic_config, values=values)
