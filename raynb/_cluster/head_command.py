"""In the kernel: the ``ray start --head`` command line of a new embedded head, on ports of its own.

Every port is chosen here, on loopback, so two users' heads on one machine never meet and nothing listens outside it.
"""

from __future__ import annotations

import socket
import sys
from pathlib import Path
from typing import Protocol

__all__ = ["PORT_NAMES", "free_ports", "ray_start_command"]

HOST = "127.0.0.1"
PORT_NAMES = (
    "gcs_port",
    "client_port",
    "dashboard_port",
    "agent_listen_port",
    "agent_grpc_port",
    "runtime_env_agent_port",
    "metrics_export_port",
    "node_manager_port",
    "object_manager_port",
)


class HeadShape(Protocol):
    """What the command reads of a head's record (``embedded_head.LocalHead``)."""

    ports: dict[str, int]
    temp_dir: str
    num_cpus: float | None
    num_gpus: float | None
    dashboard: bool


def free_ports(n: int) -> list[int]:
    socks, ports = [], []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((HOST, 0))
            socks.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in socks:
            s.close()
    return ports


def _ray_executable() -> list[str]:
    exe = Path(sys.executable).with_name("ray")
    if exe.exists():
        return [str(exe)]
    return [sys.executable, "-c", "import sys; from ray.scripts.scripts import main; sys.exit(main())"]


def ray_start_command(head: HeadShape) -> list[str]:
    p = head.ports
    return [
        *_ray_executable(),
        "start",
        "--head",
        "--block",
        "--disable-usage-stats",
        f"--node-ip-address={HOST}",
        f"--port={p['gcs_port']}",
        f"--ray-client-server-port={p['client_port']}",
        f"--include-dashboard={'true' if head.dashboard else 'false'}",
        f"--dashboard-host={HOST}",
        f"--dashboard-port={p['dashboard_port']}",
        f"--dashboard-agent-listen-port={p['agent_listen_port']}",
        f"--dashboard-agent-grpc-port={p['agent_grpc_port']}",
        f"--runtime-env-agent-port={p['runtime_env_agent_port']}",
        f"--metrics-export-port={p['metrics_export_port']}",
        f"--node-manager-port={p['node_manager_port']}",
        f"--object-manager-port={p['object_manager_port']}",
        f"--temp-dir={head.temp_dir}",
        # only what the user gave: Ray's own detection reads cgroup quotas and cpusets (a Studio space or a JupyterHub
        # pod limited to 4 of a 64-core node's CPUs offers 4) and CUDA_VISIBLE_DEVICES
        *([f"--num-cpus={head.num_cpus:g}"] if head.num_cpus is not None else []),
        *([f"--num-gpus={head.num_gpus:g}"] if head.num_gpus is not None else []),
    ]
