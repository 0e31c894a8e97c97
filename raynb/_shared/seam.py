"""In any process: the seam between the kernel and raynb's side of the cluster: what the kernel may ask
(``ClusterSide``, one run's ``RunChannel``, a warm group's ``WarmChannel``), and the names both sides agree on (where
raynb's detached actors live, what the registry keeps). Standard library only.

Kernel code types against these Protocols; ``_client/`` implements them twice (mypy holds both to them:
``_client/__init__.py``): over Ray Client handles, and over HTTP to raynb's agent on the head (Ray Jobs, where the
kernel's Python and Ray differ from the cluster's). What crosses is plain data -- dicts, lists, bytes, the pickled
picture -- so both fit the same calls."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from .outcome import Outcome, RunStatus

__all__ = [
    "NAMESPACE",
    "REGISTRY_NAME",
    "ACTIVE",
    "KEEP_FINISHED",
    "SPARE_TTL_S",
    "on_head",
    "ClusterSide",
    "RunChannel",
    "WarmChannel",
]

T = TypeVar("T")

#: every detached actor of raynb
NAMESPACE = "raynb"
#: the cluster's run registry: one named, detached actor on the head
REGISTRY_NAME = "raynb-runs"
#: a run's statuses while it goes on (as the registry's entries hold them: plain strings)
ACTIVE = (RunStatus.RUNNING.value,)
#: finished runs the registry keeps (the oldest go first)
KEEP_FINISHED = 50
#: a spare launcher or sink nobody claims within this exits by itself
SPARE_TTL_S = 600.0


def on_head() -> dict[str, float]:
    """Pin to the head node: a worker node's loss must not take a run's list or history with it."""
    return {"node:__internal_head__": 0.001}


class RunChannel(Protocol):
    """One run, as the kernel reaches it: its entry in the cluster's registry, its launcher (where ``fit()`` runs) and
    its sink (the picture, the records, what the workers printed)."""

    name: str

    def launch(self, payload: bytes, config: dict[str, Any], spec: dict[str, Any]) -> None:
        """Start ``fit()`` (returns at once); ``spec``: what the launcher needs besides the cell."""
        ...

    def outcome(self) -> tuple[Outcome, float | None]:
        """Block until the run ends: how it ended and when (None: now). Raises when the cluster stops answering."""
        ...

    def entry(self, timeout: float | None = None) -> dict[str, Any] | None:
        """What the registry holds of the run now (None: no such run any more)."""
        ...

    def stop(self, step: int | None = None) -> None: ...

    def failed(self, outcome: Outcome) -> None:
        """Tell the registry the run has failed (a worker raised with no restart left), before Ray Train says so."""
        ...

    def picture(
        self, version: int, events_seen: int, timeout: float, since: dict[int, tuple[int, int]] | None = None
    ) -> tuple[int, bytes | None, list, dict]:
        """(version, the pickled picture if newer than ``version`` -- as what changed since a copy of shape
        ``since``, where given --, events after ``events_seen``, summary)."""
        ...

    def records(self, cursor: int, chunk: int) -> list[dict[str, Any]]: ...

    def watch(self, total: float | None, factor: float, min_s: float) -> dict[str, Any]:
        """How far the run is and its stall verdict, with each rank's last printed line (``_shared/progress.py``)."""
        ...

    def logs(
        self, after: int, rank: int | None, tail: int | None, timeout: float | None = None
    ) -> tuple[int, list[dict[str, Any]], int]:
        """(last line's number, lines after ``after``, lines no longer kept)."""
        ...


class WarmChannel(Protocol):
    """A warm group's mailbox: cells go in, each rank's result comes back. ``token`` goes into the warm run's
    config: it is what the workers poll."""

    token: Any

    def post(self, cell: dict[str, Any]) -> int: ...

    def results(self, cell_id: int, timeout: float) -> dict[int, dict[str, Any]]: ...

    def interrupt(self, cell_id: int) -> None: ...

    def idle_for(self) -> float: ...

    def stop(self) -> None: ...


class ClusterSide(Protocol):
    """Everything the kernel asks of raynb's side of the connected cluster."""

    #: code objects cross as themselves (cloudpickle): the cluster's Python and Ray are the kernel's (Ray Client, or a
    #: driver of the embedded head). False (Ray Jobs, through raynb's agent): a cell crosses as source and plain data,
    #: Ray's own objects (a trainer's configs) as their description, made on the cluster
    code_crosses: bool
    #: what the workers print reaches the kernel by itself (Ray streams it to a driver); False: raynb echoes it
    streams_worker_output: bool

    def connected(self) -> bool: ...

    def resources(self) -> dict[str, Any]:
        """``{"total": {...}, "available": {...}, "nodes": [{"NodeID", "NodeManagerAddress", "Alive",
        "Resources"}, ...]}``: the cluster's resources now, as plain data."""
        ...

    def prewarm(self, after: str | None = None) -> None:
        """Make the registry, and a launcher and sink ready for the next run; ``after``: a run this kernel started
        that ended by itself, whose launcher serves the next run."""
        ...

    def drop_spare(self) -> None:
        """The ready launcher and sink go (disconnect, down, the kernel's end)."""
        ...

    def free_name(self, name: str, *, given: bool) -> str: ...

    def start_run(self, name: str, info: dict[str, Any]) -> RunChannel: ...

    def find_run(self, name: str) -> tuple[dict[str, Any], RunChannel] | None: ...

    def list_runs(self) -> list[dict[str, Any]]: ...

    def active_runs(self) -> list[str]: ...

    def remove_run(self, name: str) -> dict[str, Any] | None: ...

    def head_started_at(self) -> float | None: ...

    def open_warm(self, workers: int, idle_s: float) -> WarmChannel: ...

    def run_task(self, fn: Callable[..., T], *args: Any, node_id: str | None = None, timeout: float = 120.0) -> T: ...
