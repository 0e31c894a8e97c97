"""In the kernel: what failed in a run, assembled from the workers' events and the launcher's outcome. Pure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .._shared.outcome import Outcome

__all__ = ["RunError", "ranks_text", "assemble_error", "nccl_hint", "raise_unless_succeeded"]


@dataclass
class RunError:
    """What failed: per-rank exception type, message and traceback lines (cell frames say ``cell line N``)."""

    ranks: list[int]
    world_size: int
    type: str
    message: str
    tracebacks: dict[int, list[str]] = field(default_factory=dict)
    detail: str = ""

    def __str__(self) -> str:
        who = ranks_text(self.ranks, self.world_size)
        head = f"{who} failed with {self.type}: {self.message}"
        if not self.tracebacks:
            return head + (f"\n{self.detail}" if self.detail else "")
        rank = min(self.tracebacks)
        lines = [
            head,
            f"Traceback (rank {rank}, most recent call last):",
            *self.tracebacks[rank],
            f"{self.type}: {self.message}",
        ]
        return "\n".join(lines + ([self.detail] if self.detail else []))


def ranks_text(ranks: Sequence[int], world: int) -> str:
    if not ranks:
        return "The run"
    if len(ranks) == world and world > 1:
        return f"All {world} workers"
    if len(ranks) == 1:
        return f"Rank {ranks[0]} of {world}"
    return f"Ranks {', '.join(map(str, ranks[:-1]))} and {ranks[-1]} of {world}"


def nccl_hint(nccl: Mapping[int, Mapping[str, Any]]) -> str:
    """The first NCCL error verdict of the run, if any: often the real reason a GPU run failed."""
    for rank, s in sorted(nccl.items()):
        if s.get("severity") == "error" and s.get("messages"):
            return f"NCCL on rank {rank}: " + " ".join(s["messages"][:2])
    return ""


def assemble_error(
    outcome: Outcome | None,
    events: Sequence[Mapping[str, Any]],
    world_size: int,
    *,
    cell_file: str | None = None,
    cell_source: str | None = None,
    nccl: str = "",
    lost: BaseException | None = None,
) -> RunError:
    """One error for the whole run: the workers' own tracebacks first (lowest rank shown), else Train's per-rank
    failures, else the launcher's message; ``lost``: the launcher itself went away (no outcome)."""
    if outcome is None:
        err = RunError([], world_size, type(lost).__name__, str(lost)[:2000])
    elif worker_errors := [e for e in events if e.get("kind") == "worker_error"]:
        first = min(worker_errors, key=lambda e: e["rank"])
        ranks = sorted({e["rank"] for e in worker_errors})
        tbs = {e["rank"]: format_frames(e["frames"], cell_file, cell_source) for e in worker_errors}
        err = RunError(ranks, world_size, first["type"], first["message"], tbs)
    elif failures := dict(outcome.failures):
        ranks = sorted(failures)
        typ, _, msg = failures[ranks[0]].partition(": ")
        err = RunError(ranks, world_size, typ, msg)
    else:
        err = RunError([], world_size, outcome.error_type or "Error", outcome.message[:2000])
    if nccl:
        err.detail = (err.detail + "\n" if err.detail else "") + nccl
    return err


def format_frames(frames: list[dict[str, Any]], cell_file: str | None, cell_source: str | None = None) -> list[str]:
    """Render frames like a traceback; frames of the cell say ``cell line N`` and show that line of the cell."""
    cell_lines = cell_source.splitlines() if cell_source else []
    lines = []
    for f in frames:
        if cell_file and f["file"] == cell_file:
            text = f["text"]
            if not text and 0 < f["line"] <= len(cell_lines):
                text = cell_lines[f["line"] - 1].strip()
            lines.append(f"  cell line {f['line']}, in {f['name']}")
        else:
            text = f["text"]
            lines.append(f'  File "{f["file"]}", line {f["line"]}, in {f["name"]}')
        if text:
            lines.append(f"    {text}")
    return lines


def raise_unless_succeeded(run: Any, reconnect: str) -> None:
    """Raise :class:`TrainingFailedError` / :class:`RunAborted` / :class:`ConnectError` for a run that did not
    succeed: what went wrong and the next step (``reconnect``: the ``up`` that reaches its cluster again)."""
    from ..errors import ConnectError, RunAborted, TrainingFailedError

    if run.status == "failed":
        err = run.error
        nccl = bool(err and "NCCL on rank" in err.detail)
        raise TrainingFailedError(
            str(err) if err else "The run failed.",
            run=run,
            fix="the NCCL note above says what is missing; %raycluster doctor checks the cluster's side"
            if nccl
            else "fix the cell and run it again; run.metrics holds what was reported.",
        )
    if run.status == "aborted":
        why = f" ({run.aborted_why})" if run.aborted_why else ""
        raise RunAborted(f"Run {run.name} aborted at step {run.step}{why}; its workers were stopped.", run=run)
    if run.status == "detached":
        raise ConnectError(
            f"This kernel lost its connection to the cluster at step {run.step} of run {run.name}; the run "
            "goes on there.",
            fix=f"reconnect ({reconnect}), then `%raytrain attach {run.name}`.",
        )
