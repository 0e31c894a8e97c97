"""The embedded cluster: reuse, status, dashboard, resource preflight, and the Ray token-auth trap."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path

import pytest

import raynb
from raynb import _embedded_head as local
from raynb.errors import InsufficientResourcesError


def test_every_head_socket_listens_on_loopback_only(cluster: raynb.Cluster) -> None:
    assert cluster.address.startswith("ray://127.0.0.1:")
    from raynb._session import dashboard_get

    assert "ray_version" in (dashboard_get(cluster.dashboard_url, "/api/version") or {})  # with the head's token
    with pytest.raises(urllib.error.HTTPError) as e:  # without it: token authentication is on by default
        urllib.request.urlopen(cluster.dashboard_url + "/api/version", timeout=5)
    assert e.value.code == 401
    head_pids = set(local.processes_of(cluster.backend.head))
    out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True).stdout
    ours = []
    for ln in out.splitlines():
        pids = {int(p) for p in re.findall(r"pid=(\d+)", ln)}
        if pids & head_pids:
            ours.append(ln.split()[3])
    client = f"{cluster.backend.head.ports['client_port']}"
    assert any(a.endswith(":" + client) for a in ours), ours
    assert ours and all(a.startswith(("127.0.0.1:", "[::ffff:127.0.0.1]:")) for a in ours), ours


def test_second_up_reuses_the_running_head(cluster: raynb.Cluster) -> None:
    again = local.start_head()
    assert again.reused and again.ports == cluster.backend.head.ports


def test_status_and_dashboard_magics(cluster: raynb.Cluster, ip) -> None:
    st = ip.run_line_magic("raycluster", "status")
    assert st.cpus == cluster.backend.head.num_cpus and len(st.nodes) == 1 and st.nodes[0].is_head
    assert "dashboard http://127.0.0.1:" in st.text() and "<table" in st.html()
    link = ip.run_line_magic("raycluster", "dashboard")
    bundle = link._repr_mimebundle_()
    assert (
        cluster.dashboard_url in bundle["text/html"]
        and bundle["text/plain"] == f"Ray dashboard: {cluster.dashboard_url}"
    )


def test_more_workers_than_cpus_fails_before_waiting(cluster: raynb.Cluster, ip) -> None:
    t0 = time.monotonic()
    with pytest.raises(InsufficientResourcesError) as ei:
        ip.run_cell_magic("raytrain", "--workers 64", "pass")
    assert time.monotonic() - t0 < 60  # refused up front, never queued (a queued run would wait forever)
    assert "64 workers" in ei.value.message and "--workers" in ei.value.fix
    with pytest.raises(InsufficientResourcesError, match="GPU"):
        ip.run_cell_magic("raytrain", "--workers 1 --gpu", "pass")


TOKEN_SCRIPT = textwrap.dedent("""
    import json, os, sys, time
    from raynb import _session as session
    from raynb.errors import ConnectError
    dash, client = sys.argv[1], sys.argv[2]
    if sys.argv[3] == "imported-first":
        import ray  # before any token exists: Ray settles on "disabled" for this process
    out = {}
    t0 = time.monotonic()
    try:
        session.auth_preflight(dash)
        out["no_token"] = "connected?"
    except ConnectError as e:
        out["no_token"] = e.message
    out["no_token_s"] = time.monotonic() - t0
    os.makedirs(os.path.expanduser("~/.ray"), exist_ok=True)
    with open(os.path.expanduser("~/.ray/auth_token"), "w") as f:
        f.write(os.environ["THE_TOKEN"])
    if sys.argv[3] == "imported-first":
        t0 = time.monotonic()
        try:
            session.connect(client, dashboard_url=dash, timeout=150)
            out["late"] = "connected"
            out["late_cpus"] = ray.cluster_resources().get("CPU")
        except ConnectError as e:
            out["late"] = e.message
        out["late_s"] = time.monotonic() - t0
        print("RESULT " + json.dumps(out))
        sys.exit(0)
    t0 = time.monotonic()
    # Ray 2.58's Ray Client sometimes needs a second attempt in token mode on a loaded machine (its per-client server
    # start times out, ~30 s each): raynb retries; allow for that here
    session.connect(client, dashboard_url=dash, timeout=150)
    import ray
    out["connected_s"] = time.monotonic() - t0
    out["cpus"] = ray.cluster_resources().get("CPU")
    out["mode"] = os.environ.get("RAY_AUTH_MODE")
    ray.shutdown()
    print("RESULT " + json.dumps(out))
""")


def _script_result(script: str, args: list[str], env: dict[str, str], timeout: float) -> dict:
    """Run ``script`` in a fresh Python (a kernel that starts clean) and read its ``RESULT {json}`` line."""
    p = subprocess.run([sys.executable, "-c", script, *args], env=env, capture_output=True, text=True, timeout=timeout)
    line = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
    assert line, p.stdout[-2000:] + p.stderr[-3000:]
    return json.loads(line[0][7:])


def test_token_auth_head_is_detected_instead_of_hanging(cluster: raynb.Cluster, tmp_path: Path) -> None:
    """The trap: a head in token mode, a kernel that does not know. raynb asks the dashboard first. The head is the
    session's (token mode, as every embedded head by default); the kernels are fresh processes with a home of their
    own, so they know no token until the script writes one to ~/.ray/auth_token."""
    head = cluster.backend.head
    assert head.token_path, "the session head runs in token mode"
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    env.update(HOME=str(home), THE_TOKEN=Path(head.token_path).read_text().strip())
    results = {
        case: _script_result(TOKEN_SCRIPT, [head.dashboard_url, cluster.address, case], env, timeout=180)
        for case in ("fresh", "imported-first")
    }
    out = results["fresh"]
    assert "requires token authentication" in out["no_token"] and "~/.ray/auth_token" in out["no_token"]
    assert out["no_token_s"] < 29  # the hang alone takes 30 s: any hang crosses this, however loaded the machine
    assert out["mode"] == "token" and out["cpus"] == head.num_cpus  # connected, in token mode
    late = results["imported-first"]
    # Ray was imported before the token existed: raynb switches it with Ray's own reset and connects
    # (no time bound here: without the switch the connect never succeeds, and Ray 2.58's Ray Client in token mode
    # sometimes spends ~30 s on a first attempt that fails before a second one connects -- seen in full runs)
    assert late["late"] == "connected" and late["late_cpus"] == head.num_cpus, late


AFTER_TOKEN_SCRIPT = textwrap.dedent("""
    import json, os, sys
    import raynb
    from raynb import _embedded_head as local, _session
    out = {}
    c = raynb.up(local=True)                      # the default: a token head; its token file lives in its state dir
    out["mode_on_token_head"] = os.environ.get("RAY_AUTH_MODE")
    c.down()                                      # ... and goes with it
    out["env_after_down"] = [os.environ.get(k) for k in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH")]
    c = raynb.up(local=True)                      # a new head: a new token at the same path (Ray caches the old one)
    import ray
    out["again_cpus"] = ray.cluster_resources().get("CPU")
    c.down()
    os.environ["RAYNB_HOME"] = sys.argv[1]
    head = local.start_head(num_cpus=1, timeout=180, auth=False, dashboard=True)
    try:
        _session.connect(head.client_address, timeout=60)   # no dashboard to ask
        out["cpus"] = ray.cluster_resources().get("CPU")
        # A kernel started with a token environment whose file is gone (what a kernel inherits from a shell that
        # once used a token head): the head's dashboard says 'disabled', so raynb turns token mode off.
        os.environ.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH="/nonexistent/auth_token")
        _session._switch_auth_mode(token=True)
        _session.connect(head.client_address, dashboard_url=head.dashboard_url, timeout=60)
        out["inherited_cpus"] = ray.cluster_resources().get("CPU")
        out["inherited_mode"] = os.environ.get("RAY_AUTH_MODE")
        ray.shutdown()
    finally:
        local.stop_head(head)
        local.remove_owner()
    print("RESULT " + json.dumps(out))
""")


def test_after_the_token_head_goes_a_head_without_auth_connects(tmp_path: Path) -> None:
    """A kernel that used the embedded head (token mode), stopped it, and then connects to a head without auth: the
    token file went with the head, and Ray in token mode with a missing token refuses every connection."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    env.update(RAYNB_HOME=str(tmp_path / "a"), RAYNB_LOCAL_DASHBOARD="0")  # the token heads need no dashboard
    out = _script_result(AFTER_TOKEN_SCRIPT, [str(tmp_path / "b")], env, timeout=400)
    assert out["mode_on_token_head"] == "token"
    assert out["env_after_down"] == [None, None]  # put back as the kernel had them
    assert out["again_cpus"] is not None and out["again_cpus"] >= 1
    assert out["cpus"] == 1.0
    assert out["inherited_cpus"] == 1.0 and out["inherited_mode"] == "disabled"
