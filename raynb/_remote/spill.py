"""On the head: a run's oldest records on the sink's disk: one JSON line each, and the byte offset of every
``EVERY``-th, so a kernel attaching late reads any record without reading the file from its start (``sink.py`` keeps
the offsets). Imports nothing heavier than the standard library."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from typing import Any

__all__ = ["EVERY", "runs_dir", "append", "failed", "read"]

#: one offset kept per this many records
EVERY = 1024


def runs_dir() -> str:
    """Where a node's sinks keep their runs' spill files and retired histories."""
    d = os.path.join(tempfile.gettempdir(), "raynb-runs")
    os.makedirs(d, exist_ok=True)
    return d


def append(path: str, records: list[dict[str, Any]], base: int) -> list[int]:
    """Append ``records`` (absolute index ``base`` on) to ``path``; the byte offsets of those at a multiple of
    :data:`EVERY`. A write that fails (a full disk) leaves the file as it was: no half-written line for the next
    write to follow, where a buffered file's last flush could leave one."""
    lines, marks, size = [], [], 0
    for i, rec in enumerate(records):
        if (base + i) % EVERY == 0:
            marks.append(size)
        lines.append(json.dumps(rec, default=repr).encode() + b"\n")
        size += len(lines[-1])
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        start = os.lseek(fd, 0, os.SEEK_END)
        try:
            data = memoryview(b"".join(lines))
            while data:
                data = data[os.write(fd, data) :]
        except BaseException:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, start)
            raise
    finally:
        os.close(fd)
    return [start + m for m in marks]


def failed(path: str, n: int, error: OSError, again: int) -> str:
    """What the sink prints where writing its oldest records aside failed."""
    return (
        f"[raynb] the run's oldest {n:,} records stay in its sink's memory: writing them to {path} failed ({error}). "
        f"Free space on that disk (the node's temporary directory); the sink tries again after {again:,} more "
        "records, and keeps every record meanwhile."
    )


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
