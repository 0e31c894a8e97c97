"""In the kernel and the head's supervisor: this machine's processes as the embedded head sees them: is one alive (a
zombie counts as gone), which belong to a head (its process group, or naming its temp dir), kill them."""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

__all__ = ["pid_alive", "pids_naming", "kill_all", "group_members"]


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie child still answers kill(0); treat it as gone
    with contextlib.suppress(OSError), open(f"/proc/{pid}/stat") as f:
        if f.read().split(") ")[-1].startswith("Z"):
            return False
    return True


def pids_naming(temp_dir: str, pgid: int | None = None) -> list[int]:
    """Live PIDs in process group ``pgid`` or whose command line names ``temp_dir`` (unique to one head)."""
    pids, me = [], os.getpid()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        pid = int(entry.name)
        try:
            ours = (pgid is not None and os.getpgid(pid) == pgid) or temp_dir.encode() in (
                entry / "cmdline"
            ).read_bytes()
            if ours and pid_alive(pid):
                pids.append(pid)
        except (OSError, ProcessLookupError):
            continue
    return pids


def kill_all(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def group_members() -> list[int]:
    me = os.getpgid(0)
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if os.getpgid(int(entry.name)) == me and pid_alive(int(entry.name)):
                    out.append(int(entry.name))
    return out
