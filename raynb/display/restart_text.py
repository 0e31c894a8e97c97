"""In the kernel: why a run's workers were started again, and where the new attempt resumed, from its events (the sink's
``restart`` with the workers it lost, the workers' ``worker_error`` and ``checkpoint``). Pure."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .viewed_run import ViewedRun

__all__ = ["restart_text", "resumed_text"]


def restart_text(run: ViewedRun, restarts: Sequence[tuple[float, int]]) -> str:
    """``restarted after rank 1 on node-a died: ... SIGKILL; resumed at step 5 from step 4's checkpoint``;
    ``restarts``: (step, attempt) where each attempt's records began (the run's picture)."""
    restart = next((e for e in reversed(run.events) if e.get("kind") == "restart"), None)
    failed = [e for e in run.events if e.get("kind") == "worker_error" and e.get("attempt") == run.attempt - 1]
    if restart and restart.get("lost"):
        lost = restart["lost"][0]
        why = lost["why"].splitlines()[0][:160] if lost["why"] else "no reason given"
        if lost.get("node_lost"):  # the whole node went, with every rank on it
            ranks = sorted(x["rank"] for x in restart["lost"] if x.get("node_lost") == lost["node_lost"])
            on = f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}"
            what = f"node {lost['node']} ({lost['node_lost']}) was lost with {on}: {why}"
        else:
            what = f"rank {lost['rank']} on {lost['node']} died: {why}"
    elif failed:
        first = min(failed, key=lambda e: e["rank"])
        what = f"rank {first['rank']} on {first['node']} raised {first['type']}: {str(first['message'])[:120]}"
    else:
        what = "a worker failed"
    resumed = [x for x, a in restarts if a == run.attempt]
    return f"restarted after {what}" + (f"; {resumed_text(resumed[0], run.events, run.attempt)}" if resumed else "")


def resumed_text(step: float, events: Sequence[dict[str, Any]], attempt: int) -> str:
    """Where attempt ``attempt`` resumed (its first step), and from which checkpoint of the attempt before. Ray Train
    resumes from the newest checkpoint its controller has registered: one written just before the failure may not
    be yet, and the steps after the older one then run again -- said, so that it does not look like lost work."""
    written = sorted(
        float(e["step"])
        for e in events
        if e.get("kind") == "checkpoint" and e.get("attempt") == attempt - 1 and e.get("step") is not None
    )
    text = f"resumed at step {step:g}"
    if not written:
        return text
    before = [s for s in written if s < step]
    text += f" from step {before[-1]:g}'s checkpoint" if before else " from the start"
    if written[-1] >= step:
        text += (
            f" (step {written[-1]:g}'s checkpoint was written, but Ray Train had not registered it when the attempt "
            f"ended: steps {step:g}-{written[-1]:g} run again)"
        )
    return text
