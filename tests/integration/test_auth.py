"""The embedded head lets no one else in: another Unix user of the machine can neither submit a job through the
dashboard's job API nor connect with Ray Client, while the owner's kernels connect as before. A head started with
``auth=False`` (``--no-auth``) is the control: there the same job request from the other user is accepted, so the
test can tell the difference.

The other user has no Python with Ray here (this venv's interpreter lives under /root), so it speaks Ray Client's
protocol directly: one gRPC call (``ray.rpc.RayletDriver/ClusterInfo``, an empty request) to the Ray Client port with
curl. Ray's server answers ``UNAUTHENTICATED`` (grpc-status 16) without a token; without auth the call reaches the
service."""

from __future__ import annotations

import json
import os
import pwd
import subprocess
from pathlib import Path

import pytest

import raynb
from raynb import _embedded_head as local

OTHER = "raynb-other"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="creating a second Unix user needs root")


@pytest.fixture(scope="module")
def other_user() -> str:
    try:
        pwd.getpwnam(OTHER)
    except KeyError:
        subprocess.run(["/usr/sbin/useradd", "--create-home", OTHER], check=True, capture_output=True)
    return OTHER


def _as_other(args: list[str], timeout: float = 120) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin", "HOME": f"/home/{OTHER}", "RAY_USAGE_STATS_ENABLED": "0"}
    return subprocess.run(
        ["/usr/sbin/runuser", "-u", OTHER, "--", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd="/tmp",
    )


def _submit_job(dashboard_url: str, marker: Path) -> subprocess.CompletedProcess:
    body = json.dumps({"entrypoint": f"id > {marker}"})
    return _as_other(
        [
            "curl",
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "-X",
            "POST",
            f"{dashboard_url}/api/jobs/",
            "-H",
            "Content-Type: application/json",
            "-d",
            body,
        ]
    )


def _ray_client_call(client_address: str, tmp_path: Path) -> str:
    """grpc-status of one Ray Client gRPC call made by the other user."""
    empty = Path("/tmp") / f"raynb-grpc-empty-{os.getpid()}"  # where the other user can read it
    empty.write_bytes(b"\x00\x00\x00\x00\x00")  # gRPC framing: not compressed, 0 bytes of protobuf
    empty.chmod(0o644)
    port = client_address.rsplit(":", 1)[1]
    p = _as_other(
        [
            "curl",
            "-s",
            "-v",
            "--http2-prior-knowledge",
            "-X",
            "POST",
            "-H",
            "content-type: application/grpc",
            "-H",
            "te: trailers",
            "--data-binary",
            f"@{empty}",
            f"http://127.0.0.1:{port}/ray.rpc.RayletDriver/ClusterInfo",
        ]
    )
    status = [ln.split(":", 1)[1].strip() for ln in p.stderr.splitlines() if ln.lower().startswith("< grpc-status")]
    assert status, p.stderr[-2000:]
    return status[0]


def test_another_user_cannot_submit_jobs_or_connect(cluster: raynb.Cluster, other_user: str, tmp_path: Path) -> None:
    head = cluster.backend.head
    assert head.token_path and oct(Path(head.token_path).stat().st_mode & 0o777) == "0o600"
    assert oct(local.state_dir().stat().st_mode & 0o777) == "0o700"
    assert _as_other(["cat", head.token_path]).returncode != 0  # the token is the owner's alone
    marker = Path("/tmp") / f"raynb-auth-marker-{os.getpid()}"
    marker.unlink(missing_ok=True)
    p = _submit_job(cluster.dashboard_url, marker)
    assert p.stdout == "401", (p.stdout, p.stderr)
    assert _ray_client_call(cluster.address, tmp_path) == "16"  # UNAUTHENTICATED
    assert not marker.exists()
    import ray

    assert ray.cluster_resources()["CPU"] >= 1  # the owner's connection is untouched


def test_the_control_without_auth_lets_the_other_user_in(other_user: str, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("RAYNB_HOME", str(tmp_path / "home"))
    head = local.start_head(num_cpus=1, timeout=180, auth=False)
    try:
        assert head.token_path is None
        marker = Path("/tmp") / f"raynb-auth-control-{os.getpid()}"
        p = _submit_job(head.dashboard_url, marker)
        assert p.stdout == "200", (p.stdout, p.stderr)  # accepted: this is the hole token auth closes
        assert _ray_client_call(head.client_address, tmp_path) != "16"  # and Ray Client's service answers
    finally:
        local.stop_head(head)
        local.remove_owner()
