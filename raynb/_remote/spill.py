"""A run's oldest records on the sink's disk: one JSON line each, and the byte offset of every ``EVERY``-th, so a
kernel attaching late reads any record without reading the file from its start (``sink.py`` keeps the offsets).
Imports nothing heavier than the standard library."""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any

__all__ = ["EVERY", "runs_dir", "append", "read"]

#: one offset kept per this many records
EVERY = 1024


def runs_dir() -> str:
    """Where a node's sinks keep their runs' spill files and retired histories."""
    d = os.path.join(tempfile.gettempdir(), "raynb-runs")
    os.makedirs(d, exist_ok=True)
    return d


def append(path: str, records: list[dict[str, Any]], base: int) -> list[int]:
    """Append ``records`` (absolute index ``base`` on) to ``path``; the byte offsets of those at a multiple of
    :data:`EVERY`. A write that fails leaves the file as it was (no half-written lines for the next to follow)."""
    offsets = []
    with open(path, "ab") as f:
        start = f.tell()
        try:
            for i, rec in enumerate(records):
                if (base + i) % EVERY == 0:
                    offsets.append(f.tell())
                f.write(json.dumps(rec, default=repr).encode() + b"\n")
        except BaseException:
            f.truncate(start)
            raise
    return offsets


def read(path: str, offsets: list[int], cursor: int, n: int) -> list[dict[str, Any]]:
    """Up to ``n`` records from absolute index ``cursor`` on."""
    k = cursor // EVERY
    out: list[dict[str, Any]] = []
    with open(path, "rb") as f:
        f.seek(offsets[k])
        skip = cursor - k * EVERY
        for line in f:
            if skip:
                skip -= 1
                continue
            out.append(json.loads(line))
            if len(out) >= n:
                break
    return out
