"""NCCL settings raynb gives workers, and where each worker's NCCL log lands. Pure: no Ray, no I/O."""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping

__all__ = ["nccl_worker_env", "expand_debug_file", "STRICT_EFA_NET", "TCP_ENV"]

#: NCCL_NET value that makes NCCL use aws-ofi-nccl or fail (aws-ofi-nccl >= 1.12 names its network "Libfabric").
STRICT_EFA_NET = "Libfabric"
#: Forces sockets everywhere, like the sample's TCP benchmark (plus no P2P/SHM so one host's GPUs use them too).
TCP_ENV = {"NCCL_NET": "Socket", "NCCL_NET_PLUGIN": "none", "FI_PROVIDER": "tcp", "NCCL_P2P_DISABLE": "1",
           "NCCL_SHM_DISABLE": "1"}


def nccl_worker_env(mode: str, run_name: str, *, strict_efa: bool = False,
                    user_env: Mapping[str, str] | None = None) -> dict[str, str]:
    """Variables for ``mode`` (summary | full | off); ``user_env`` wins wherever it sets the same name."""
    env: dict[str, str] = {}
    if mode in ("summary", "full"):
        env["NCCL_DEBUG"] = "INFO"
        env["NCCL_DEBUG_SUBSYS"] = "INIT,NET,ENV"
    if mode == "summary":
        # absolute and per process (%p): Ray workers run in their own working dirs, and 4 ranks share a pod.
        # /tmp exists before NCCL starts, so NCCL can open the file whenever its first communicator comes up.
        safe = "".join(c if c.isalnum() or c in "-_" else "-" for c in run_name)
        env["NCCL_DEBUG_FILE"] = f"/tmp/raynb-nccl-{safe}.%h.%p.log"
    if strict_efa:
        env["NCCL_NET"] = STRICT_EFA_NET
    env.update(user_env or {})
    return env


def expand_debug_file(pattern: str, *, hostname: str | None = None, pid: int | None = None) -> str:
    """What NCCL makes of NCCL_DEBUG_FILE in this process: %h = host (cut at the first '.'), %p = pid."""
    host = (hostname or socket.gethostname()).split(".")[0].replace("%", "-").replace("/", "-")
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if c == "%" and i + 1 < len(pattern):
            nxt = pattern[i + 1]
            out.append({"h": host, "p": str(pid if pid is not None else os.getpid()), "%": "%"}.get(nxt, c + nxt))
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)
