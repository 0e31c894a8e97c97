"""An embedded head is checked before it is reused (issue 39): one started by another Ray or Python, or whose Python,
raynb or working directory is gone since, cannot serve; with runs still going on it, ``up`` names why and how to
stop it, instead of reusing it (its workers would fail to import: "Intel oneMKL FATAL ERROR: Cannot load
libtorch_cpu.so")."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path

import pytest

from raynb._cluster import embedded_head as local
from raynb._cluster.head_fitness import why_unfit
from raynb.errors import ClusterStartError


def _head(pid: int, **changes: object) -> local.LocalHead:
    fields = {
        "supervisor_pid": pid,
        "ports": {"client_port": 1},
        "temp_dir": "/tmp/raynb-test-none",
        "num_cpus": 1,
        "num_gpus": 0,
        "auth_mode": "disabled",
        "ray_version": version("ray"),
        "python": ".".join(map(str, sys.version_info[:2])),
        "started_at": time.time(),
        "python_exe": sys.executable,
        "raynb_dir": str(Path(local.__file__).resolve().parents[1]),
    }
    return local.LocalHead(**{**fields, **changes})  # type: ignore[arg-type]


@pytest.fixture
def orphan(tmp_path: Path) -> Iterator[subprocess.Popen]:
    """A process whose working directory was removed under it (as a head's, started from a checkout since deleted)."""
    gone = tmp_path / "checkout"
    gone.mkdir()
    proc = subprocess.Popen(["sleep", "60"], cwd=gone)
    gone.rmdir()
    yield proc
    proc.kill()
    proc.wait()


def test_a_head_that_can_serve_is_fit(tmp_path: Path) -> None:
    import os

    assert why_unfit(_head(os.getpid())) is None
    assert why_unfit(_head(os.getpid(), python_exe="", raynb_dir="")) is None, "a record of an earlier raynb"


def test_what_makes_a_head_unfit_is_said(orphan: subprocess.Popen) -> None:
    import os

    assert "it runs Ray 2.0.0 / Python" in (why_unfit(_head(os.getpid(), ray_version="2.0.0")) or "")
    gone = why_unfit(_head(os.getpid(), python_exe="/nowhere/bin/python"))
    assert gone == "the Python it was started with (/nowhere/bin/python) is gone"
    assert (
        why_unfit(_head(os.getpid(), raynb_dir="/nowhere/raynb"))
        == "the raynb package it was started with (/nowhere/raynb) is gone"
    )
    removed = why_unfit(_head(orphan.pid)) or ""
    assert removed.startswith("the directory it was started in (") and "checkout" in removed, removed


def test_up_names_an_unfit_head_with_runs_on_it_instead_of_reusing_it(
    orphan: subprocess.Popen, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAYNB_HOME", str(tmp_path / "home"))
    d = local.state_dir()
    d.mkdir(parents=True, exist_ok=True)
    with socket.socket() as listening:  # the head's Ray Client port answers: it looks alive
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        head = _head(orphan.pid, ports={"client_port": listening.getsockname()[1]})
        (d / "head.json").write_text(head.to_json())
        (d / "leases").mkdir()
        (d / "leases" / "a-run").write_text(str(time.time() + 60))  # a run still going on
        with pytest.raises(ClusterStartError) as e:
            local.start_head(progress=print)
    assert "cannot serve this kernel: the directory it was started in" in e.value.what
    assert "head_supervisor stop" in (e.value.fix or "")
    assert orphan.poll() is None, "a head with runs on it is left alone"
    assert json.loads((d / "head.json").read_text())["supervisor_pid"] == orphan.pid
