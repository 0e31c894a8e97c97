"""In the kernel: whether a running embedded head can serve this kernel before it is reused
(``embedded_head.start_head``)."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import Protocol

__all__ = ["why_unfit", "HeadRecord"]


class HeadRecord(Protocol):
    """What the check reads of a head's record (``embedded_head.LocalHead``)."""

    supervisor_pid: int
    ray_version: str
    python: str
    python_exe: str
    raynb_dir: str


def why_unfit(head: HeadRecord) -> str | None:
    """Why a running head cannot serve this kernel, or None. A head outlives the kernel that started it: its Ray or
    Python may not be this kernel's, and the Python, the raynb or the working directory it was started from may be
    gone since (a removed checkout or venv: its workers then fail to import, e.g. "Intel oneMKL FATAL ERROR: Cannot
    load libtorch_cpu.so")."""
    from importlib.metadata import version

    here_py = ".".join(map(str, sys.version_info[:2]))
    if head.ray_version != version("ray") or head.python != here_py:
        return f"it runs Ray {head.ray_version} / Python {head.python}, this kernel Ray {version('ray')} / Python {here_py}"
    for what, path in (("the Python", head.python_exe), ("the raynb package", head.raynb_dir)):
        if path and not Path(path).exists():
            return f"{what} it was started with ({path}) is gone"
    with contextlib.suppress(OSError):
        cwd = os.readlink(f"/proc/{head.supervisor_pid}/cwd")
        if cwd.endswith(" (deleted)"):
            return f"the directory it was started in ({cwd.removesuffix(' (deleted)')}) was removed"
    return None
