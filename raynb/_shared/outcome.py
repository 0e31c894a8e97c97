"""In any process: how a run ended -- its :class:`RunStatus` and its :class:`Outcome` -- declared once for the launcher
and the registry that make it, the seam that carries it, and the kernel and the agent that read it. Standard library
only.

What crosses a process is ``to_wire()``: plain data, so Ray and JSON carry it alike; ``from_wire()`` reads it back,
tolerating the fields a newer or older raynb adds or lacks (an older registry's entry, a sink of another version).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

__all__ = ["RunStatus", "Outcome"]


class RunStatus(str, enum.Enum):
    """A run's status in the registry: running until it ends one of three ways."""

    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    ABORTED = "aborted"

    @property
    def is_terminal(self) -> bool:
        return self is not RunStatus.RUNNING


@dataclass(frozen=True)
class Outcome:
    """How a run ended: ``fit()``'s result or error (the launcher), a stop (the registry: ``step``, ``reason``), a lost
    launcher (the registry), or a failure the kernel saw first (``early``: ``fit()``'s own outcome replaces it)."""

    status: RunStatus
    seconds: float | None = None
    #: failed: the exception's type and message, and Ray Train's per-rank failures ("Type: message")
    error_type: str | None = None
    message: str = ""
    failures: Mapping[int, str] = field(default_factory=dict)
    early: bool = False
    #: succeeded: Ray Train's last metrics, the newest checkpoint's path and the run's directory
    metrics: Mapping[str, Any] | None = None
    checkpoint: str | None = None
    path: str | None = None
    #: aborted: the step it was stopped at and why (a stall guard's verdict)
    step: int | None = None
    reason: str | None = None

    def to_wire(self) -> dict[str, Any]:
        """Plain data: the status as its string, rank keys as ints, only the fields that are set."""
        out: dict[str, Any] = {"status": self.status.value}
        for f in fields(self)[1:]:
            value = getattr(self, f.name)
            if value is None or value is False or value == "" or (isinstance(value, Mapping) and not value):
                continue
            out[f.name] = dict(value) if isinstance(value, Mapping) else value
        return out

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> Outcome:
        """The outcome ``data`` describes; fields this raynb does not know are left out."""
        known = {f.name for f in fields(cls)}
        given = {k: v for k, v in data.items() if k in known and v is not None}
        given["status"] = RunStatus(data.get("status", RunStatus.FAILED.value))
        if "failures" in given:
            given["failures"] = {int(r): str(m) for r, m in dict(given["failures"]).items()}
        return cls(**given)
