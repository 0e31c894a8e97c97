"""In any process: the environment of every process raynb starts on the cluster, and where each worker's NCCL log lands.

Pure: no Ray, no I/O. Two consumers, one source: the run's launcher (:func:`launcher_env`, set in its process for
Ray Train to hand on) and the Train workers (:func:`worker_env`, their runtime env). raynb's own actors (registry,
launcher, sink) take the job's runtime env: none on the embedded head, where Ray's pre-started workers then serve them.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterable, Mapping

__all__ = [
    "worker_env",
    "launcher_env",
    "nccl_worker_env",
    "expand_debug_file",
    "STRICT_EFA_NET",
    "TCP_ENV",
    "WORKER_ENV_DEFAULTS",
    "SETUP_HOOK_VAR",
    "PRELOAD_HOOK",
    "PRELOAD_VAR",
    "AHEAD",
    "ahead",
]

#: Ray Train prints each worker line twice unless its print patch is off (the cell's prints reach the notebook once).
_PRINT_ONCE = {"RAY_TRAIN_ENABLE_PRINT_PATCH": "0"}
#: The variable a Ray worker process reads as it starts for a setup hook to call (Ray's ``worker_process_setup_hook``,
#: which Ray sets only from a job's runtime env), and raynb's hook: import torch before the worker's actor arrives, in
#: processes the launcher starts ahead (``_remote/train_processes.py``).
SETUP_HOOK_VAR = "__RAY_WORKER_PROCESS_SETUP_HOOK_ENV_VAR"
PRELOAD_HOOK = "raynb._remote.train_processes.preload"
#: what the run's function imports (``_runs/cell_imports.py``), for the hook to import while the process waits
PRELOAD_VAR = "RAYNB_PRELOAD"
#: the packages imported that way (``_remote/ahead_imports.py`` says why these): slow to import, nothing device- or
#: thread-sized as they load, and neither Ray nor torch imports them
AHEAD = frozenset({"transformers", "datasets", "tokenizers", "safetensors", "huggingface_hub", "peft"})


def ahead(names: Iterable[str]) -> tuple[str, ...]:
    """Of ``names`` (``pkg.mod`` or ``pkg:Name``; stripped, empty ones dropped), those of the packages in
    :data:`AHEAD`: what the kernel puts in :data:`PRELOAD_VAR`, and what a worker takes from it."""
    return tuple(n for n in (x.strip() for x in names) if n and n.split(":")[0].split(".")[0] in AHEAD)


#: Environment every raynb worker starts with (user values win). NVLink multicast stays off: on shared multi-GPU
#: hosts a program using it can take the host's GPUs down.
WORKER_ENV_DEFAULTS: dict[str, str] = {
    **_PRINT_ONCE,
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "PYTHONUNBUFFERED": "1",
    SETUP_HOOK_VAR: PRELOAD_HOOK,
}

#: NCCL_NET value that makes NCCL use aws-ofi-nccl or fail (aws-ofi-nccl >= 1.12 names its network "Libfabric").
STRICT_EFA_NET = "Libfabric"
#: Forces sockets everywhere, like the sample's TCP benchmark (plus no P2P/SHM so one host's GPUs use them too).
TCP_ENV = {
    "NCCL_NET": "Socket",
    "NCCL_NET_PLUGIN": "none",
    "FI_PROVIDER": "tcp",
    "NCCL_P2P_DISABLE": "1",
    "NCCL_SHM_DISABLE": "1",
}


def nccl_worker_env(
    mode: str, run_name: str, *, strict_efa: bool = False, user_env: Mapping[str, str] | None = None
) -> dict[str, str]:
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


def launcher_env(health_check_interval_s: float) -> dict[str, str]:
    """Variables a run sets in the launcher that hosts its ``TorchTrainer.fit()``, as a driver script would: Ray Train
    hands both on to its controller and workers. Not a runtime env: the job's actors keep the job's (none on the
    embedded head), so Ray can give them the worker processes it started ahead."""
    return {"RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": str(health_check_interval_s), **_PRINT_ONCE}


def worker_env(
    mode: str,
    run_name: str,
    *,
    strict_efa: bool = False,
    user_env: Mapping[str, str] | None = None,
    preload: tuple[str, ...] = (),
) -> dict[str, str]:
    """Variables of every Train worker: raynb's defaults, what its function imports (``preload``), NCCL's, then the
    user's (which win). NCCL's are the same for CPU runs, where nothing loads NCCL and they stay unread: a run's
    environment does not depend on its device."""
    imports = {PRELOAD_VAR: ",".join(preload)} if preload else {}
    return {
        **WORKER_ENV_DEFAULTS,
        **imports,
        **nccl_worker_env(mode, run_name, strict_efa=strict_efa, user_env=user_env),
    }
