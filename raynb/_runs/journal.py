"""In the kernel: the runs this machine's kernels started or attached to, per cluster, so that a run gone with its
cluster's head (the head restarted, or its pod was replaced) is told apart from a misspelt name. A few hundred JSON
lines in ``$RAYNB_HOME/runs-seen.jsonl`` (default ``~/.raynb``); nothing here is needed for a run to work."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .._settings import raynb_home

__all__ = ["remember", "recall", "cluster_key"]

KEEP = 500


def _path() -> Path:
    return raynb_home() / "runs-seen.jsonl"


def cluster_key() -> str:
    """The connected cluster by what outlives its head: its kind and name (a RayCluster's name, "local")."""
    from .._current import current

    cl = current()
    return f"{cl.kind}:{cl.name}" if cl is not None else "?"


def remember(name: str, started: float, storage_path: str | None) -> None:
    entry = {"cluster": cluster_key(), "name": name, "started": started, "storage_path": storage_path}
    path = _path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as f:
            f.write(json.dumps(entry) + "\n")
        lines = path.read_text().splitlines()
        if len(lines) > 2 * KEEP:
            path.write_text("\n".join(lines[-KEEP:]) + "\n")
    except OSError:  # a read-only home: the run does not need this
        pass


def recall(name: str) -> dict[str, Any] | None:
    """The newest entry for ``name`` on the connected cluster, if this machine saw it."""
    key = cluster_key()
    try:
        lines = _path().read_text().splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if entry.get("name") == name and entry.get("cluster") == key:
            return dict(entry)
    return None
