"""In any process: what a RayCluster says of the runs on it, for those outside the notebook: ``kubectl``, a colleague's
``%raycluster list``, an idle policy. Standard library only.

raynb's run registry, on the head, keeps two fields of its RayCluster's metadata current (``_remote/kube_notice.py``
writes them with the head pod's own service account):

- the label ``raynb.io/run``: the running run's name (the newest, when several run), absent while none runs --
  ``kubectl get rayclusters -L raynb.io/run`` shows it as a column, ``-l '!raynb.io/run'`` lists the idle ones;
- the annotation ``raynb.io/runs``: JSON -- each running run's name, who started it, its step and the time of its
  last report, the run that ended last (how and when), and when the head last wrote it.

A run is counted here whether or not a kernel follows it: the registry knows it, not the notebook.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["LABEL", "ANNOTATION", "Notice", "notice_of", "patch_body", "read", "label_value"]

LABEL = "raynb.io/run"
ANNOTATION = "raynb.io/runs"
#: what a run's entry carries (of the registry's row for it)
_RUNNING_KEYS = ("name", "user", "step", "last_report", "started")
_ENDED_KEYS = ("name", "user", "status", "step", "started", "ended")


@dataclass(frozen=True)
class Notice:
    """The runs of one cluster, as its RayCluster tells them."""

    running: list[dict[str, Any]] = field(default_factory=list)  # newest first
    last: dict[str, Any] | None = None  # the run that ended last
    updated: float = 0.0

    def same_as(self, other: Notice) -> bool:
        """Equal but for ``updated``: nothing worth a write."""
        return (self.running, self.last) == (other.running, other.last)

    def describe(self, now: float | None = None) -> str:
        """One line for a table: ``train-3 (alice@nb, step 120, reported 8 s ago)``, or how the cluster went idle."""
        now = time.time() if now is None else now
        if self.running:
            shown = []
            for r in self.running:
                bits = [str(r.get("user") or "?")]
                if r.get("step") is not None:
                    bits.append(f"step {r['step']}")
                if r.get("last_report"):
                    bits.append(f"reported {_ago(now - float(r['last_report']))}")
                shown.append(f"{r['name']} ({', '.join(bits)})")
            stale = now - self.updated
            return "; ".join(shown) + (f" [as of {_ago(stale)}]" if stale > 120 else "")
        if self.last:
            when = self.last.get("ended") or self.updated
            return f"idle {_ago(now - float(when))} (last: {self.last['name']} {self.last.get('status', 'ended')})"
        return "idle"


def _ago(seconds: float) -> str:
    s = max(0, int(seconds))
    if s < 120:
        return f"{s} s ago"
    if s < 7200:
        return f"{s // 60} min ago"
    return f"{s // 3600} h ago"


def notice_of(rows: Iterable[Mapping[str, Any]], now: float, active: Iterable[str] = ("running",)) -> Notice:
    """The notice for the registry's rows (each with its status, step, times)."""
    active = tuple(active)
    rows = list(rows)
    running = sorted(
        ({k: r.get(k) for k in _RUNNING_KEYS} for r in rows if r.get("status") in active),
        key=lambda r: -(r.get("started") or 0),
    )
    ended = [r for r in rows if r.get("status") not in active and r.get("ended")]
    last = max(ended, key=lambda r: r["ended"], default=None)
    return Notice(running, {k: last.get(k) for k in _ENDED_KEYS} if last else None, now)


_LABEL_BAD = re.compile(r"[^A-Za-z0-9_.-]+")


def label_value(name: str) -> str:
    """A run's name as a label value (63 characters of ``[A-Za-z0-9_.-]``, alphanumeric at both ends)."""
    v = _LABEL_BAD.sub("-", name)[:63].strip("-_.")
    return v or "run"


def patch_body(notice: Notice) -> dict[str, Any]:
    """The JSON merge patch of the RayCluster's metadata (a null removes the label)."""
    doc = {"running": notice.running, "last": notice.last, "updated": round(notice.updated, 1)}
    label = label_value(notice.running[0]["name"]) if notice.running else None
    return {
        "metadata": {
            "labels": {LABEL: label},
            "annotations": {ANNOTATION: json.dumps(doc, separators=(",", ":"), sort_keys=True)},
        }
    }


def read(annotations: Mapping[str, str] | None) -> Notice | None:
    """The notice a RayCluster carries (None: none yet, or unreadable)."""
    raw = (annotations or {}).get(ANNOTATION)
    if not raw:
        return None
    try:
        doc = json.loads(raw)
        return Notice(list(doc.get("running") or []), doc.get("last"), float(doc.get("updated") or 0))
    except (ValueError, TypeError, AttributeError):
        return None
