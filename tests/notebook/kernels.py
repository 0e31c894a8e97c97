"""A real Jupyter kernel driven message by message (for what nbclient cannot do: interrupt mid-cell, kill)."""

from __future__ import annotations

import json
import os
import queue
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager

STEP = re.compile(r'data-step="(\d+)"')


@contextmanager
def kernel(
    env: dict[str, str] | None = None, cwd: str | None = None, python: str | None = None
) -> Iterator[tuple[KernelManager, Any]]:
    """A kernel of this venv's Python, or of ``python`` (another environment's, with ipykernel installed) with
    exactly ``env``."""
    specs = None
    if python is None:
        km = KernelManager(kernel_name="python3")
        env = {**os.environ, **(env or {})}
    else:
        specs = Path(tempfile.mkdtemp(prefix="raynb-kernelspec-"))
        (specs / "other").mkdir()
        argv = [python, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
        (specs / "other" / "kernel.json").write_text(json.dumps({"argv": argv, "language": "python"}))
        km = KernelManager(kernel_name="other", kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(specs)]))
    km.start_kernel(env=env, cwd=cwd)
    kc = km.client()
    kc.start_channels()
    kc.wait_for_ready(timeout=120)
    try:
        yield km, kc
    finally:
        kc.stop_channels()
        if km.is_alive():
            km.shutdown_kernel(now=True)
        if specs is not None:
            shutil.rmtree(specs, ignore_errors=True)


def run(
    kc: Any, code: str, timeout: float = 300, on_msg: Any = None, others: list[dict[str, Any]] | None = None
) -> list[dict[str, Any]]:
    """Execute ``code`` and return its iopub messages until the kernel is idle again. ``others`` collects what
    arrives meanwhile for earlier cells (a background run's view updates)."""
    msg_id = kc.execute(code)
    msgs: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            m = kc.get_iopub_msg(timeout=1)
        except queue.Empty:
            continue
        if m["parent_header"].get("msg_id") != msg_id:
            if others is not None:
                others.append(m)
            continue
        msgs.append(m)
        if on_msg:
            on_msg(m)
        if m["msg_type"] == "status" and m["content"]["execution_state"] == "idle":
            return msgs
    raise TimeoutError(f"kernel did not finish within {timeout} s: {code[:80]!r}")


def html_of(m: dict[str, Any]) -> str:
    return (
        m["content"].get("data", {}).get("text/html", "")
        if m["msg_type"] in ("display_data", "update_display_data", "execute_result")
        else ""
    )


def errors(msgs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [m["content"] for m in msgs if m["msg_type"] == "error"]


def text(msgs: list[dict[str, Any]]) -> str:
    out = []
    for m in msgs:
        c = m["content"]
        if m["msg_type"] == "stream":
            out.append(c["text"])
        elif m["msg_type"] in ("execute_result", "display_data", "update_display_data"):
            out.append(c.get("data", {}).get("text/plain", ""))
        elif m["msg_type"] == "error":
            out.append("\n".join(c["traceback"]))
    return "\n".join(out)


def train_workers() -> list[int]:
    """Ray Train worker processes on this machine (Ray names each actor's process after its class)."""
    from raynb._cluster.processes import pids_naming

    return pids_naming("ray::RayTrainWorker")
