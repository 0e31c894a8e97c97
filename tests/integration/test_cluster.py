"""The embedded cluster: reuse, status, dashboard, resource preflight, and the Ray token-auth trap."""

from __future__ import annotations

import os
import re
import subprocess
import textwrap
import time
import urllib.request
from pathlib import Path

import pytest

import raynb
from raynb._cluster import embedded_head as local
from raynb.errors import InsufficientResourcesError
from tests.integration.fresh_python import script_result


def test_every_head_socket_listens_on_loopback_only(cluster: raynb.Cluster) -> None:
    assert cluster.address.startswith("ray://127.0.0.1:")
    from raynb._cluster.session import dashboard_get

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


def test_one_machine_starts_no_preemption_watcher(cluster: raynb.Cluster) -> None:
    """Train's preemption watcher looks for nodes being drained; the embedded head's one machine has none, so its
    processes (and the runs' actors, which inherit their environment) turn it off."""
    environs = {}
    for pid in local.processes_of(cluster.backend.head):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
            environs[cmd.rsplit(b"/", 1)[-1]] = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            pass
    assert b"raylet" in environs, sorted(environs)
    assert b"RAY_TRAIN_ENABLE_PREEMPTION_WATCHER=0" in environs[b"raylet"]


def test_second_up_reuses_the_running_head(cluster: raynb.Cluster) -> None:
    again = local.start_head()
    assert again.reused and again.ports == cluster.backend.head.ports


def test_a_handle_found_by_name_knows_its_methods_without_asking_the_cluster(cluster: raynb.Cluster) -> None:
    """Over Ray Client a handle from ``ray.get_actor`` (or handed back by an actor) asks the cluster for its methods
    by a task on its first call -- in a fresh connection a new worker process, seconds before ``down`` or ``attach``
    can ask anything. raynb's handles know them from the class in the kernel (``_client.handles.typed``)."""
    import ray

    from raynb._client.handles import typed
    from raynb._client.spares import find_registry, registry
    from raynb._remote.registry import RunRegistry
    from raynb._shared.seam import NAMESPACE, REGISTRY_NAME

    registry()
    raw = ray.get_actor(REGISTRY_NAME, namespace=NAMESPACE)
    assert raw._method_num_returns is None  # what Ray Client hands out: it would ask the cluster
    h = typed(raw, RunRegistry)
    assert h is raw and {"get", "active", "register", "stop"} <= set(h._method_num_returns)
    assert isinstance(ray.get(h.started_at.remote(), timeout=60), float)
    with pytest.raises(TypeError):  # the signature is known here: a missing argument is said before anything is sent
        h.get.remote()
    from raynb._client import spares

    spares._known = None  # as in a new connection to a head whose registry exists: get_if_exists finds it
    assert registry()._method_num_returns is not None and find_registry() is registry()


def test_status_and_dashboard_magics(cluster: raynb.Cluster, ip) -> None:
    import ray

    st = ip.run_line_magic("raycluster", "status")
    assert st.cpus == ray.cluster_resources()["CPU"] and len(st.nodes) == 1 and st.nodes[0].is_head
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
    from raynb._cluster import session
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


def test_token_auth_head_is_detected_instead_of_hanging(cluster: raynb.Cluster, tmp_path: Path) -> None:
    """The trap: a head in token mode, a kernel that does not know. raynb asks the dashboard first. The head is the
    session's (token mode, as every embedded head by default); the kernels are fresh processes with a home of their
    own, so they know no token until the script writes one to ~/.ray/auth_token."""
    import ray

    head, cpus = cluster.backend.head, ray.cluster_resources()["CPU"]
    assert head.token_path, "the session head runs in token mode"
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    env.update(HOME=str(home), THE_TOKEN=Path(head.token_path).read_text().strip())
    results = {
        case: script_result(TOKEN_SCRIPT, [head.dashboard_url, cluster.address, case], env, timeout=180)
        for case in ("fresh", "imported-first")
    }
    out = results["fresh"]
    assert "requires token authentication" in out["no_token"] and "~/.ray/auth_token" in out["no_token"]
    assert out["no_token_s"] < 29  # the hang alone takes 30 s: any hang crosses this, however loaded the machine
    assert out["mode"] == "token" and out["cpus"] == cpus  # connected, in token mode
    late = results["imported-first"]
    # Ray was imported before the token existed: raynb switches it with Ray's own reset and connects
    # (no time bound here: without the switch the connect never succeeds, and Ray 2.58's Ray Client in token mode
    # sometimes spends ~30 s on a first attempt that fails before a second one connects -- seen in full runs)
    assert late["late"] == "connected" and late["late_cpus"] == cpus, late


LIMITED_SCRIPT = textwrap.dedent("""
    import json, sys, ray, raynb
    said = []
    c = raynb.up(local=True, progress=said.append)
    out = {"cpus": ray.cluster_resources()["CPU"], "status": c.status().cpus, "said": said,
           "ray_train_imported": "ray.train" in sys.modules}
    c.down()
    print("RESULT " + json.dumps(out))
""")


@pytest.mark.skipif(os.geteuid() != 0 or not Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us").exists(),
                    reason="a CPU cgroup of its own needs root and cgroup v1's cpu controller")  # fmt: skip
def test_a_head_in_a_container_limited_to_one_cpu_offers_one(tmp_path: Path) -> None:
    """What a SageMaker Studio space or a JupyterHub pod is: a CPU quota (here 1 CPU) on a bigger machine, and its
    /sys/fs/cgroup showing that quota. The embedded head leaves the count to Ray, which reads the quota: it offers 1
    CPU, not the machine's count, and says so when the kernel connects."""
    cg = Path("/sys/fs/cgroup/cpu") / f"raynb-test-{os.getpid()}"
    cg.mkdir()
    (cg / "cpu.cfs_period_us").write_text("100000")
    (cg / "cpu.cfs_quota_us").write_text("100000")  # one CPU's worth of every period
    # a mount namespace where this cgroup's files are /sys/fs/cgroup/cpu, as a container's are; the head inherits it
    inside = f'echo $$ > {cg}/cgroup.procs && mount --bind {cg} /sys/fs/cgroup/cpu && exec "$@"'
    wrapper = ("unshare", "--mount", "--propagation", "private", "sh", "-c", inside, "sh")
    env = {**os.environ, "RAYNB_HOME": str(tmp_path / "home"), "RAYNB_LOCAL_DASHBOARD": "0", "RAYNB_LOCAL_AUTH": "0"}
    env["RAYNB_CONNECT_TIMEOUT_S"] = "120"  # raynb's own error, inside the script's time, should it not connect
    try:
        out = script_result(LIMITED_SCRIPT, [], env, timeout=300, wrapper=wrapper)
    except AssertionError as e:  # the head's own account too: it goes with tmp_path
        log = tmp_path / "home" / "local" / "head.log"
        raise AssertionError(f"{e}\n--- head.log:\n{log.read_text()[-4000:] if log.exists() else '(none)'}") from None
    finally:
        for _ in range(50):
            try:
                cg.rmdir()
                break
            except OSError:  # its last processes are still exiting
                time.sleep(0.2)
    assert (os.cpu_count() or 1) > 1, "the machine must have more CPUs than the limit for this to tell"
    assert out["cpus"] == 1.0 and out["status"] == 1.0, out
    assert any("Ray finds here" in m for m in out["said"]) and any("(1 CPUs, 0 GPUs)" in m for m in out["said"]), out
    # and, this being a fresh kernel's `up`: it imported Ray Train while it waited, not the first run (kernel_imports)
    assert out["ray_train_imported"] is True, out


SLOW_HEAD_SCRIPT = textwrap.dedent("""
    import faulthandler, json, time
    from raynb._cluster import embedded_head as local
    from raynb.errors import ClusterStartError

    faulthandler.dump_traceback_later(100, exit=True)  # a hang prints where it hangs, and ends
    t0 = time.monotonic()
    try:
        local.start_head(timeout=0.5, dashboard=False, auth=False)
        out = {"said": "started"}
    except ClusterStartError as e:
        out = {"said": e.what}
    out.update(s=time.monotonic() - t0, left=local.find_head() is not None)
    print("RESULT " + json.dumps(out))
""")


def test_a_head_too_slow_to_answer_ends_up_in_an_error_not_a_hang(tmp_path: Path) -> None:
    """A head that does not answer within `up`'s timeout (a loaded machine) is stopped and named, within a bounded
    time: it hung forever once, `stop_head` taking the file lock `start_head` held."""
    env = {**os.environ, "RAYNB_HOME": str(tmp_path / "home")}
    out = script_result(SLOW_HEAD_SCRIPT, [], env, timeout=150)
    assert out["said"] == "The embedded Ray head did not answer within 0.5 s.", out
    assert out["s"] < 60 and out["left"] is False, out  # the stop is bounded (15 s + 5 s) and complete


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs a second CPU to leave out")
def test_a_kernel_pinned_to_one_cpu_gets_a_one_cpu_head(tmp_path: Path) -> None:
    """A kernel confined by `taskset -c 0` (as schedulers and some containers pin processes): Ray reads a cgroup's
    quota and cpuset but not a process's affinity, so raynb offers the CPUs the kernel may use, and says why."""
    env = {**os.environ, "RAYNB_HOME": str(tmp_path / "home"), "RAYNB_LOCAL_DASHBOARD": "0", "RAYNB_LOCAL_AUTH": "0"}
    env["RAYNB_CONNECT_TIMEOUT_S"] = "120"
    out = script_result(LIMITED_SCRIPT, [], env, timeout=300, wrapper=("taskset", "-c", "0"))
    assert out["cpus"] == 1.0 and out["status"] == 1.0, out
    assert any("1 CPUs: this process may run on 1 of the machine's" in m for m in out["said"]), out["said"]


def test_a_cluster_reached_by_address_is_used_and_left_running(cluster: raynb.Cluster) -> None:
    """A running cluster raynb did not start, by its Ray Client address and token file (the session's head, reached
    as any running cluster would be): connected with raynb shipped along, its status, the doctor's tasks on it and its
    runs through it; `down` only disconnects, and the head goes on."""
    from raynb._current import set_current

    head, said = cluster.backend.head, []
    try:
        c = raynb.up(
            address=cluster.address,
            token_file=head.token_path,
            dashboard_url=head.dashboard_url,
            progress=said.append,
        )
        assert (c.kind, c.name) == ("address", cluster.address.removeprefix("ray://"))
        assert c.backend.runtime_env()["py_modules"], "raynb travels with the connection: the cluster may lack it"
        st = c.status()
        assert st.kind == "address" and st.nodes and st.cpus == cluster.status().cpus
        checks = {x.name: x for x in raynb.doctor().checks}
        assert checks["Ray and Python versions"].state == "ok", checks["Ray and Python versions"]
        assert checks["GPU nodes advertise EFA and GPUs"].state == "n/a"
        assert isinstance(raynb.runs().names(), list)
        c.down(progress=said.append)
        assert said[-1].endswith("raynb did not start that cluster, so it keeps running"), said
        assert head.alive() and raynb.current() is None
    finally:
        cluster.connect()
        set_current(cluster)


def test_an_unclaimed_spare_leaves_the_way_ray_expects(cluster: raynb.Cluster) -> None:
    """A spare launcher and sink nobody claims in time go by themselves through Ray's graceful exit: a process that
    simply exits is, to Ray, a worker that "died by an unexpected system error", and every connected notebook printed
    that as a red paragraph whenever an idle spare went. A claim that comes once the spare is leaving is refused (the
    kernel then starts another), never taken by an actor on its way out."""
    import ray

    from raynb._client.spares import sink_actor
    from raynb._remote.launcher import Launcher

    launcher = ray.remote(num_cpus=0, max_concurrency=4)(Launcher).remote(ttl_s=1.0)
    sink = sink_actor(ttl_s=1.0)
    assert ray.get([launcher.alive.remote(), sink.summary.remote()], timeout=60)
    ids = {"launcher": launcher._actor_id.hex(), "sink": sink._actor_id.hex()}

    @ray.remote(num_cpus=0)
    def gcs_says(actor_id: str) -> tuple[str, str]:  # on the cluster: the kernel may be a Ray Client
        info = ray._private.state.actors(actor_id=actor_id)
        return info["State"], str(info["DeathCause"])

    ended: dict[str, str] = {}
    deadline = time.monotonic() + 60
    while len(ended) < 2 and time.monotonic() < deadline:
        for who, actor_id in ids.items():
            state, cause = ray.get(gcs_says.remote(actor_id), timeout=60)
            if state == "DEAD":
                ended[who] = cause
        time.sleep(0.5)
    assert set(ended) == {"launcher", "sink"}, f"still alive after 60 s: {set(ids) - set(ended)}"
    for who, cause in ended.items():
        assert "INTENDED_USER_EXIT" in cause, (who, cause)
    for actor in (launcher, sink):  # a claim now: the actor is gone, so the kernel starts another pair
        with pytest.raises(ray.exceptions.RayActorError):
            ray.get(actor.claim.remote(), timeout=30)


def test_a_process_started_ahead_serves_the_next_actor_of_its_env_with_torch_imported(cluster: raynb.Cluster) -> None:
    """The launcher starts a run's Train processes as the run begins (``_remote/train_processes.py``): Ray hands an
    actor of the same runtime env the very process it started ahead, and raynb's setup hook has imported torch there
    before the actor arrives."""
    import ray

    from raynb._shared.worker_env import PRELOAD_HOOK, PRELOAD_VAR, SETUP_HOOK_VAR

    mark = f"RAYNB_TEST_AHEAD={os.urandom(4).hex()}"
    ahead = {PRELOAD_VAR: "safetensors,plotly.io:to_html"}  # one of the packages imported ahead, and one not
    env = {"env_vars": {mark.split("=")[0]: mark.split("=")[1], SETUP_HOOK_VAR: PRELOAD_HOOK, **ahead}}

    @ray.remote(num_cpus=0)
    def ahead_then_actor() -> dict[str, object]:  # on the cluster: the kernel may be a Ray Client
        from raynb._remote.train_processes import prestart_here

        @ray.remote(num_cpus=0, runtime_env=env)
        class Probe:
            def facts(self) -> dict[str, object]:
                import sys

                from raynb._remote import ahead_imports
                from raynb._remote.train_processes import preloaded_at

                deadline = time.monotonic() + 60
                while not ahead_imports.report().get("done") and time.monotonic() < deadline:
                    time.sleep(0.05)
                return {
                    "pid": os.getpid(),
                    "torch_preloaded": preloaded_at(),
                    "torch_in": "torch" in sys.modules,
                    "ahead_imports": ahead_imports.report().get("outcome"),
                    "plotly_in": "plotly.io" in sys.modules,
                }

        def started_ahead() -> list[int]:  # processes in this env, by their environment (set as Ray starts them)
            pids = []
            for pid in filter(str.isdigit, os.listdir("/proc")):
                try:
                    with open(f"/proc/{pid}/environ", "rb") as f:
                        if mark.encode() in f.read().split(b"\0"):
                            pids.append(int(pid))
                except OSError:
                    continue
            return pids

        prestart_here(env, 1)
        deadline = time.monotonic() + 60  # the raylet starts a few processes at a time (its CPU count): it may queue
        while not (ahead := started_ahead()) and time.monotonic() < deadline:
            time.sleep(0.1)
        return {**ray.get(Probe.remote().facts.remote(), timeout=120), "ahead": ahead}

    got = ray.get(ahead_then_actor.remote(), timeout=180)
    assert len(got["ahead"]) == 1 and got["pid"] == got["ahead"][0], got  # the process started ahead, not a new one
    assert got["torch_preloaded"] is not None and got["torch_in"], got
    # ... and then safetensors, one of the packages imported ahead; not plotly, whatever the variable says
    assert got["ahead_imports"] == {"safetensors": "ahead"} and not got["plotly_in"], got


def test_a_workers_flushes_over_ray_reach_the_sink_whole_and_in_order(cluster: raynb.Cluster) -> None:
    """A Train worker off the sink's node flushes over Ray: each flush one ``sink.batch`` call (its events, lines and
    records, taken as the node's socket takes a flush), the next only once the last was taken. The sink is threaded
    and runs overlapping calls in any order: as separate ``event`` and ``push`` calls, a restarted worker's first
    records reached it before its ``worker_started`` and counted in the attempt before -- a step lost from
    ``run.metrics`` after a node was lost (tests/integration/test_nodes.py, once in the suite)."""
    import ray

    from raynb._client.spares import sink_actor

    @ray.remote(num_cpus=0)
    def restarts(sink: object) -> list[str]:  # on the cluster: the kernel may be a Ray Client
        from raynb._remote.report import Reporter

        paths = []
        for attempt in range(1, 13):  # a worker of rank 1 started again and again, as Ray Train restarts a group
            rep = Reporter(sink, 1, flush_interval=0.005)  # no socket asked for: Ray's calls
            rep.event({"kind": "worker_started", "rank": 1})
            for step in range(3):
                rep.add({"step": step, "loss": 1.0 / attempt, "sent_in": attempt})
            rep.close()
            paths.append(rep.over)
        return paths

    sink = sink_actor()
    try:
        assert set(ray.get(restarts.remote(sink), timeout=120)) == {"ray"}
        _, records, events = ray.get(sink.read.remote(0, 0), timeout=30)
        assert [e["attempt"] for e in events if e["kind"] == "worker_started"] == list(range(1, 13))
        assert len(records) == 36 and all(r["attempt"] == r["sent_in"] for r in records), records
    finally:
        ray.kill(sink)
