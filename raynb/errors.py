"""In any process: errors raised to notebook users.

Every failure a person can hit is a :class:`RaynbError` subclass that says what happened, what raynb saw and what to
do next. In IPython they render as those few lines only (``_render_traceback_``), not as a stack of raynb internals.
"""

from __future__ import annotations

__all__ = [
    "RaynbError",
    "KubeError",
    "ManifestError",
    "UsageError",
    "NotConnectedError",
    "ClusterStartError",
    "ConnectError",
    "VersionMismatchError",
    "InsufficientResourcesError",
    "CellSyntaxError",
    "CaptureError",
    "UndefinedNameError",
    "TrainingFailedError",
    "RunAborted",
    "WarmCellError",
    "WarmGroupLost",
    "not_connected",
]


class RaynbError(Exception):
    """Base class: ``what`` happened, what raynb ``saw``, and the ``fix`` (next step)."""

    def __init__(self, what: str, *, saw: str | None = None, fix: str | None = None) -> None:
        self.what, self.saw, self.fix = what, saw, fix
        super().__init__(self.message)

    @property
    def message(self) -> str:
        parts = [self.what]
        if self.saw:
            parts.append(f"raynb saw: {self.saw}")
        if self.fix:
            parts.append(f"next step: {self.fix}")
        return "\n".join(parts)

    def _render_traceback_(self) -> list[str]:
        red, reset = ("\x1b[31m", "\x1b[0m") if _colours_on() else ("", "")
        lines = self.message.splitlines()
        return [f"{red}{type(self).__name__}{reset}: {lines[0]}", *lines[1:]]


def _colours_on() -> bool:
    """Follow IPython's colour setting (``--colors=NoColor`` / ``%colors nocolor``); plain text outside IPython."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    ip = get_ipython()
    if ip is None:
        return False
    return str(getattr(ip, "colors", "Neutral")).lower() != "nocolor"


class UsageError(RaynbError):
    """A magic or function was called with arguments it cannot use."""


class NotConnectedError(RaynbError):
    """No Ray cluster is connected in this kernel."""


def not_connected() -> NotConnectedError:
    """The one wording for "this kernel has no cluster to talk to"."""
    return NotConnectedError(
        "This kernel is not connected to a Ray cluster.",
        fix="run `%raycluster up --local` (raynb.up(local=True)), or `%raycluster up --values F` "
        "for a RayCluster on Kubernetes.",
    )


def up_again(kind: str | None, name: str | None) -> str:
    """The ``up`` that reaches the same cluster again, for a cluster of ``kind`` named ``name``."""
    if kind == "local":
        return "`%raycluster up --local`"
    if kind == "address":
        return f"`%raycluster up --address {name}`"
    return "`%raycluster up` with the same values (it reuses the RayCluster)"


class KubeError(RaynbError):
    """Kubernetes refused or could not do what raynb asked."""


class ManifestError(RaynbError):
    """The values or the rendered RayCluster are not usable."""


class ClusterStartError(RaynbError):
    """The embedded head (or a Kubernetes cluster) did not come up."""


class ConnectError(RaynbError):
    """Ray Client could not connect to a running cluster."""


class VersionMismatchError(ConnectError):
    """The kernel's Python minor or Ray is not the cluster's: Ray Client cannot connect (Ray Jobs can)."""


class InsufficientResourcesError(RaynbError):
    """A run asks for more CPUs/GPUs than the cluster has: it would wait forever."""


class CellSyntaxError(RaynbError):
    """The %%raytrain cell does not parse."""


class UndefinedNameError(RaynbError):
    """The cell reads a name that neither the notebook nor the cell defines."""


class CaptureError(RaynbError):
    """The cell's function refers to a global that cannot be shipped to the workers."""


class TrainingFailedError(RaynbError):
    """One or more workers raised; ``run`` holds the failed Run."""

    def __init__(self, what: str, *, run: object = None, saw: str | None = None, fix: str | None = None) -> None:
        self.run = run
        super().__init__(what, saw=saw, fix=fix)


class RunAborted(RaynbError):
    """The run was interrupted (kernel interrupt / stop button) and its workers were stopped."""

    def __init__(self, what: str, *, run: object = None) -> None:
        self.run = run
        super().__init__(what)


class WarmCellError(RaynbError):
    """A warm cell raised on a rank; the group and its state are still there."""


class WarmGroupLost(RaynbError):
    """The warm group ended (stuck rank, failure, idle time-out): its state is gone."""
