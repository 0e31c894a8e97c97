"""An embedded head that dies while the kernel connects to it as a driver (CI saw one in a 1-CPU container): head.log
keeps what ``ray start`` said (the process that ended and its log's tail), the kernel stops at once with that, instead
of ``ray.init`` retrying a GCS that is not there for ~14 minutes (20 tries of ~41 s, measured), and ``up`` starts a
fresh head once."""

from __future__ import annotations

import json
import os
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from raynb._cluster import driver
from raynb._cluster import embedded_head as local
from raynb._cluster.embedded import EmbeddedBackend
from raynb.errors import ClusterStartError, ConnectError


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _head_whose_ray_dies(home: Path, temp_dir: Path) -> local.LocalHead:
    """A head record and spec as ``start_head`` writes them, whose "ray start" says what Ray 2.58's ``ray start
    --block`` says when one of its processes dies (``ray/scripts/scripts.py``) and exits 1; then its real supervisor,
    run to its end."""
    d = home / "local"
    d.mkdir(parents=True)
    said = [
        "Some Ray subprocesses exited unexpectedly:",
        "  raylet [exit code=1]",
        "----- BEGIN raylet.out tail (exit code(s)=1) -----",
        "raylet: out of memory, bye",
        "----- END raylet.out tail (exit code(s)=1) -----",
        "Remaining processes will be killed.",
    ]
    dies = f"mkdir -p {temp_dir} && printf '%s\\n' {shlex.join(said)} && exit 1"
    head = local.LocalHead(
        supervisor_pid=0,
        ports={"client_port": _closed_port(), "gcs_port": _closed_port()},
        temp_dir=str(temp_dir),
        num_cpus=1,
        num_gpus=0,
        auth_mode="disabled",
        ray_version="",
        python="",
        started_at=time.time(),
    )
    spec = {"command": ["sh", "-c", dies], "auth_mode": "disabled", "token_path": None, "temp_dir": str(temp_dir)}
    (d / "spec.json").write_text(json.dumps({**spec, "gcs_address": head.gcs_address}))
    env = {**os.environ, "RAYNB_HOME": str(home)}
    with open(d / "head.log", "wb") as log:
        sup = subprocess.Popen(
            [sys.executable, "-m", "raynb._cluster.head_supervisor", "supervise", str(d)],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # it ends its own process group
            env=env,
        )
    head.supervisor_pid = sup.pid
    (d / "head.json").write_text(head.to_json())
    sup.wait(timeout=60)
    return head


def test_a_head_that_dies_while_the_kernel_connects_ends_the_connect_with_its_last_words(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAYNB_HOME", str(tmp_path / "home"))
    head = _head_whose_ray_dies(tmp_path / "home", tmp_path / "ray-temp")
    d = tmp_path / "home" / "local"
    log = (d / "head.log").read_text()
    assert "ray start exited with 1" in log and "out of memory, bye" in log, log
    assert local.find_head() is None and not (d / "head.json").exists(), "a later `up` finds no head to reuse"
    assert not (tmp_path / "ray-temp").exists(), "the temp dir goes with the head"

    backend = EmbeddedBackend(head)
    t0 = time.monotonic()
    with pytest.raises(ClusterStartError) as e:  # `up` then starts a fresh head, once
        driver.connect(head.gcs_address, runtime_env={}, timeout=60, say=print, head_gone=backend.driver_head_gone)
    assert time.monotonic() - t0 < 5, "no attempt at a head that is gone"
    assert "stopped while this kernel connected" in str(e.value) and "out of memory, bye" in (e.value.saw or "")
    assert "%raycluster up --local" in (e.value.fix or "")


def test_a_gcs_that_does_not_answer_ends_at_raynbs_timeout_not_after_ray_inits_minutes() -> None:
    import ray

    port = _closed_port()
    t0 = time.monotonic()
    with pytest.raises(ConnectError) as e:
        driver.connect(f"127.0.0.1:{port}", runtime_env={}, timeout=2, say=print, head_gone=lambda: None)
    assert time.monotonic() - t0 < 10
    assert e.value.saw == f"nothing answers at 127.0.0.1:{port}" and not ray.is_initialized()


def test_up_starts_a_fresh_head_once_when_the_one_it_started_dies_before_the_kernel_connects(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``up(local=True)``'s retry, each head a real supervisor whose ``ray start`` dies: the first death is said with
    the log's last line and a fresh head is started; a second death is the user's error (no loop)."""
    from raynb._cluster import embedded
    from raynb._settings import Settings

    started: list[local.LocalHead] = []

    def up(_settings: Settings, _say: object) -> EmbeddedBackend:
        home = tmp_path / f"home{len(started)}"
        monkeypatch.setenv("RAYNB_HOME", str(home))
        started.append(_head_whose_ray_dies(home, tmp_path / f"ray-temp{len(started)}"))
        return EmbeddedBackend(started[-1])

    def connected(b: EmbeddedBackend) -> str:
        driver.connect(b.head.gcs_address, runtime_env={}, timeout=60, say=print, head_gone=b.driver_head_gone)
        return "connected"

    monkeypatch.setattr(embedded, "up", up)
    said: list[str] = []
    with pytest.raises(ClusterStartError) as e:
        embedded.up_connected(Settings(), said.append, connected)
    assert len(started) == 2 and "out of memory, bye" in (e.value.saw or "")
    assert said == ["the embedded Ray head stopped as this kernel connected (raylet [exit code=1]): starting a fresh "
                    "one ..."], said  # fmt: skip
