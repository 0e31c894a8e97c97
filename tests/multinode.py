"""Several Ray nodes on this machine, each with a disk of its own: a head (``ray start --head``) and worker nodes,
each worker node's processes in a mount namespace of their own with a private ``/tmp`` (a tmpfs; root only), so a
path one node writes under ``/tmp`` is really absent on the others -- as on separate machines. Stopped by the PIDs
that name each node's temp dir (``ray stop`` would stop every Ray on the machine, the session's head too)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from raynb._cluster.processes import kill_all, pids_naming

RAY = str(Path(sys.executable).with_name("ray"))


@dataclass(frozen=True)
class Nodes:
    client_address: str  # ray://127.0.0.1:PORT
    gcs_address: str
    dashboard_url: str | None  # http://127.0.0.1:PORT, where the head has a dashboard
    temp_dirs: tuple[str, ...]  # the head's, then each worker node's (inside its own /tmp)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def can_run() -> bool:
    """Private mounts need root (``unshare -m``)."""
    return os.geteuid() == 0 and Path("/usr/bin/unshare").exists()


def _start(cmd: list[str], env: dict[str, str]) -> None:
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}:\n{p.stdout[-1500:]}{p.stderr[-1500:]}")


@contextmanager
def ray_nodes(workers: int = 1, cpus: int = 1, dashboard: bool = False) -> Iterator[Nodes]:
    """A head with ``cpus`` CPUs and ``workers`` worker nodes of ``cpus`` CPUs each, no auth; a dashboard (and so the
    Jobs API) only if asked for."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")} | {"RAY_USAGE_STATS_ENABLED": "0"}
    env["PATH"] = f"{Path(RAY).parent}{os.pathsep}{env.get('PATH', '')}"  # `python` is Ray's, as in an activated venv
    env["GRPC_ENABLE_FORK_SUPPORT"] = "0"  # as raynb's own heads: Ray Client's first connect fails less (ray#63202)
    tag = uuid.uuid4().hex[:8]
    gcs, client, dash = _free_port(), _free_port(), _free_port()
    board = ["--include-dashboard=true", f"--dashboard-port={dash}", "--dashboard-host=127.0.0.1"]
    board = board if dashboard else ["--include-dashboard=false"]
    head_dir = f"/tmp/raynb-head-{tag}"  # short: Ray puts Unix sockets under it (108 bytes at most)
    node_dirs = tuple(f"/tmp/raynb-node{i}-{tag}" for i in range(workers))
    common = ["--node-ip-address=127.0.0.1", f"--num-cpus={cpus}", "--num-gpus=0", "--disable-usage-stats"]
    try:
        _start([RAY, "start", "--head", f"--port={gcs}", f"--ray-client-server-port={client}",
                *board, f"--temp-dir={head_dir}", *common], env)  # fmt: skip
        for d in node_dirs:
            start = " ".join([RAY, "start", f"--address=127.0.0.1:{gcs}", f"--temp-dir={d}", *common])
            _start(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                    f"mount -t tmpfs tmpfs /tmp && {start}"], env)  # fmt: skip
        url = f"http://127.0.0.1:{dash}" if dashboard else None
        yield Nodes(f"ray://127.0.0.1:{client}", f"127.0.0.1:{gcs}", url, (head_dir, *node_dirs))
    finally:
        for d in (*node_dirs, head_dir):
            deadline = time.monotonic() + 10
            while (left := pids_naming(d)) and time.monotonic() < deadline:
                kill_all(left)
                time.sleep(0.2)
        shutil.rmtree(head_dir, ignore_errors=True)  # the worker nodes' went with their tmpfs
