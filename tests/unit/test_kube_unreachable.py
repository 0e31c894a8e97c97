"""An API server nobody answers at: the real Kubernetes client against a closed port on 127.0.0.1 gives an error that
names the server and the next step, not a urllib3 traceback."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest
import yaml

import raynb


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again when the block ends: nothing listens there


def test_unreachable_api_server_is_named_with_the_next_step(tmp_path: Path, monkeypatch) -> None:
    server = f"https://127.0.0.1:{_closed_port()}"
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "gone", "cluster": {"server": server, "insecure-skip-tls-verify": True}}],
                "users": [{"name": "me", "user": {"token": "t"}}],
                "contexts": [{"name": "gone", "context": {"cluster": "gone", "user": "me"}}],
                "current-context": "gone",
            }
        )
    )
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    t0 = time.monotonic()
    with pytest.raises(raynb.KubeError) as e:
        raynb.up(values=None, set={}, connect=False, progress=lambda _m: None)
    assert time.monotonic() - t0 < 120  # a refused connection is not waited on for long
    assert server in e.value.message and "reach" in e.value.message.lower()
    assert e.value.fix, e.value.message
