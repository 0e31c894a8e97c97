"""%%raytrain / raynb.train on a real local head over Ray Client, CPU workers with gloo: one run that carries the
checks every run needs (terminal IPython's text view among them), the refusals before any worker starts, and a
restart from a checkpoint on S3; a run gone with an earlier head."""

from __future__ import annotations

import itertools
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

import raynb
from raynb._runs.run import active_run
from raynb._settings import resolve
from raynb.errors import CaptureError
from tests.s3.server import s3_server, weed_binary

TRAIN_CELL = """
import time
import torch
import ray.train.torch
import raynb
torch.manual_seed(0)
X = torch.randn(512, 8)
Y = X @ torch.arange(1.0, 9.0).unsqueeze(1)
model = ray.train.torch.prepare_model(torch.nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=config["lr"])
for step in range(config["steps"]):
    loss = torch.nn.functional.mse_loss(model(X), Y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    raynb.report(loss=loss, samples=len(X))
    time.sleep(config.get("sleep", 0.0))
"""


NCCL_FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "nccl" / "h200" / "proof-p2p.vm.3441.log"
ENV_KEYS = (
    "NCCL_DEBUG",
    "NCCL_DEBUG_SUBSYS",
    "NCCL_DEBUG_FILE",
    "NCCL_NET",
    "NCCL_NVLS_ENABLE",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST",
    "PYTHONUNBUFFERED",
    "RAY_TRAIN_ENABLE_PRINT_PATCH",
    "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S",
    "FOO",
    "RAYNB_PRELOAD",
)
# one cell, four parts, each read back from its own records: what reached the worker (step 1); globals, --config, a
# module beside the notebook and plain ray.train.report (`value`, `report_ms`); training (`loss`, `samples`); NCCL's
# log growing on rank 0 (events)
KITCHEN_CELL = (
    "import os, time, raynb, ray.train\n"  # a cell is a function: a name it imports anywhere is its own throughout
    "import safetensors\n"  # imported by the worker's process before the function asks (raynb's setup hook)
    "raynb.report(step=1, **{k: os.environ.get(k, '<unset>') for k in KEYS})\n"
    "for i in range(config['n']):\n"
    "    t0 = time.perf_counter()\n"
    "    ray.train.report({'value': nb_helpers.scale(i) + OFFSET, 'cwd_ok': os.path.exists('nb_helpers.py')})\n"
    "    raynb.report(report_ms=(time.perf_counter() - t0) * 1000)\n"
    "print('hello from a worker', flush=True)\n"
    + TRAIN_CELL
    + """
from raynb._shared.worker_env import expand_debug_file
if ray.train.get_context().get_world_rank() == 0:
    path = expand_debug_file(os.environ["NCCL_DEBUG_FILE"])
    lines = open(FIXTURE).read().splitlines(keepends=True)
    cut = next(i for i, line in enumerate(lines) if " via P2P" in line)
    with open(path, "a") as f:  # what NCCL writes at init: no channel yet
        f.writelines(lines[:cut])
    time.sleep(3)  # the watcher reads every second
    with open(path, "a") as f:  # the first collective connects the channels
        f.writelines(lines[cut:])
    time.sleep(3)
"""
)


def _sched_by_process(*titles: str) -> dict[str, list[tuple[int, int]]]:
    """(scheduling policy, nice value) of every thread of this machine's processes with these titles (this head's,
    in the tests)."""
    out: dict[str, list[tuple[int, int]]] = {t: [] for t in titles}
    for proc in Path("/proc").iterdir():
        try:
            title = (proc / "cmdline").read_bytes().split(b"\0")[0].decode().strip().split(".")[0]  # ray::Cls.method
            if title in out:
                for task in (proc / "task").iterdir():
                    fields = (task / "stat").read_text().rsplit(")", 1)[1].split()  # proc(5): from field 3 on
                    out[title].append((int(fields[38]), int(fields[16])))
        except (OSError, ValueError):
            pass
    return out


def test_unpicklable_global_is_named(ip) -> None:
    ip.run_cell("import threading\nshared_lock = threading.Lock()")
    with pytest.raises(CaptureError) as ei:
        ip.run_cell_magic("raytrain", "--workers 2", "with shared_lock:\n    pass")
    assert "`shared_lock`" in ei.value.message


def test_syntax_error_points_at_the_cell_line(ip) -> None:
    result = ip.run_cell("%%raytrain --workers 2\nx = 1\nfor i in range(3)\n    pass")
    assert "line 3" in result.error_in_exec.message


def test_a_run_from_before_the_head_started_is_said_to_be_gone_with_it(cluster: raynb.Cluster) -> None:
    """The head started again (on Kubernetes: its pod was replaced) after a run this machine saw start: attaching
    says the run went with the old head and where its checkpoints are, not "no such run". The journal entry is the
    one a kernel writes when a run starts (`remember`), dated before this head started."""
    from raynb._client.cluster_side import head_started_at
    from raynb._runs.journal import remember
    from raynb.errors import UsageError

    head_since = head_started_at()
    assert head_since is not None
    remember("before-the-head", head_since - 60, "s3://bucket/ray?endpoint_override=http://s3:8333")
    with pytest.raises(UsageError) as ei:
        raynb.attach("before-the-head")
    assert "The run 'before-the-head' is gone with this cluster's head" in ei.value.what, ei.value.message
    assert ei.value.fix and ei.value.fix.startswith(
        "checkpoints it saved are under s3://bucket/ray/before-the-head?endpoint_override=http://s3:8333: run the "
        "cell again with `--name before-the-head`"
    ), ei.value.fix
    with pytest.raises(UsageError, match="No run named 'never-here' on this cluster"):
        raynb.attach("never-here")  # a name this machine never saw: not "gone"


def test_one_run_carries_globals_modules_env_metrics_and_nccl(
    ip, cluster: raynb.Cluster, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """One cold run that checks what every run needs, each check on its own records: notebook globals, --config and
    a module beside the notebook reach the workers; plain ray.train.report takes raynb's non-blocking path; raynb's
    worker defaults, NCCL's summary-mode variables and --env (which wins) reach every rank; loss and samples from
    both ranks arrive while the run goes; raynb's sink runs in the idle scheduling class and its control path does
    not; and the live NCCL watcher, fed a growing real NCCL log (an H200 capture) on rank 0, turns it into the run's
    badge as the file grows. This IPython has no HTML front-end (it is terminal IPython's shell), so the run also shows its text view:
    a progress line that ends before a worker's print lands, and none of Ray's chatter. (The other --nccl modes and --strict-efa change only which variables the same path sets:
    tests/unit/test_nccl_env_badges.py follows them from the magic's line to the worker env.)"""
    (tmp_path / "nb_helpers.py").write_text("def scale(x):\n    return 10 * x\n")
    old = os.getcwd()
    os.chdir(tmp_path)
    sys.path.insert(0, str(tmp_path))
    ip.user_ns.update(KEYS=ENV_KEYS, FIXTURE=str(NCCL_FIXTURE))
    seen_live: set[int] = set()
    sched: dict[str, list[tuple[int, int]]] = {}
    running = threading.Event()

    def watch() -> None:
        """From beside the cell, as the notebook's view does: records of both ranks before the run ends."""
        while running.is_set():
            run = active_run()
            if run is not None and not run._done.is_set():
                seen_live.update(r["rank"] for r in run.records)
                if seen_live == {0, 1} and not sched:
                    sched.update(_sched_by_process("ray::MetricsSink", "ray::Launcher", "ray::RunRegistry"))
                    return
            time.sleep(0.1)

    try:
        ip.run_cell("import nb_helpers\nOFFSET = 5")
        running.set()
        threading.Thread(target=watch, daemon=True).start()
        result = ip.run_cell(
            "%%raytrain --workers 2 --name kitchen --env FOO=bar --env NCCL_DEBUG_SUBSYS=ALL --out k "
            '--config {"lr": 0.02, "steps": 60, "sleep": 0.1, "n": 20}\n' + KITCHEN_CELL
        )
        running.clear()
        assert result.error_in_exec is None, result.error_in_exec
    finally:
        running.clear()
        os.chdir(old)
        sys.path.remove(str(tmp_path))
        sys.modules.pop("nb_helpers", None)
    out, err = capfd.readouterr()
    run = ip.user_ns["k"]
    assert run.status == "succeeded" and run.error is None
    # the text view: its final line, no HTML, a worker's print on a line of its own (one per worker), no chatter
    lines = out.replace("\r", "\n").splitlines()
    final = [ln for ln in lines if "[kitchen] succeeded" in ln]
    assert final and "step 101" in final[-1] and "samples/s total" in final[-1], out[-2000:]
    assert "<div" not in out
    hello = [ln for ln in lines if "hello from a worker" in ln]
    assert len(hello) == 2 and all("[kitchen]" not in ln for ln in hello), hello
    assert "SIGTERM handler" not in out + err
    # Ray Train's INFO narration, dropped by Train itself at the level raynb gives it (no pattern of raynb's hides it)
    train_info = ("Requesting resources", "Started training worker group", "Setting up process group", "Moving model")
    assert not [t for t in train_info if t in out + err], out[-3000:]
    assert run.result["path"].endswith("kitchen") and run.first_step_at is not None and run.elapsed > 0
    df = run.metrics
    assert list(df.columns[:3]) == ["rank", "step", "time"] and {"loss", "samples"} <= set(df.columns)
    assert sorted(df["rank"].unique()) == [0, 1]
    # metrics from both ranks reached the notebook while the run went on
    assert seen_live == {0, 1}, "metrics from both ranks must reach the notebook while the run goes"
    # the run's sink (where each report is handled) runs in the time training leaves: every thread in Linux's idle
    # scheduling class; the launcher and the registry (the control path: starting, stopping, finishing) keep theirs
    assert sched["ray::MetricsSink"] and {p for p, _ in sched["ray::MetricsSink"]} == {os.SCHED_IDLE}, sched
    control = sched["ray::Launcher"] + sched["ray::RunRegistry"]
    assert sched["ray::Launcher"] and sched["ray::RunRegistry"], sched  # both found: the next line checks something
    assert all(p == os.SCHED_OTHER and n < 19 for p, n in control), sched
    # Ray Train gave each worker the runtime env the launcher started processes for as the run began (so Ray hands
    # those over), and the worker's process imported torch as it started (raynb's setup hook), off the run's path
    done = [e for e in run.events if e["kind"] == "worker_done"]
    assert sorted(e["rank"] for e in done) == [0, 1] and all(e["env_as_started_ahead"] is True for e in done), done
    assert all("torch_preloaded" in e["setup_at"] for e in done), done
    # ... and then the slow package the cell imports, read from its code (of the cell's other names: the standard
    # library, raynb, Ray and torch are the worker's already, nb_helpers lies beside the notebook), before the function
    # asked for it
    assert all(e["ahead_imports"] == {"safetensors": "ahead"} for e in done), done
    # the sink is on the workers' node: their batches came over its socket, not a Ray call each
    assert {e["metrics_over"] for e in done} == {"node socket"}, done
    # the kernel's copy of the picture came whole once, then as what its series added (``picture.dumps``)
    assert run.stream.pictures["whole"] == 1 and run.stream.pictures["changes"] >= 1, run.stream.pictures
    # training: 60 steps of loss and samples per rank, the loss falling
    trained = df.dropna(subset=["samples"])
    assert trained.groupby("rank")["samples"].count().tolist() == [60, 60]
    for _, g in trained.groupby("rank"):
        losses = g.sort_values("step")["loss"].tolist()
        assert losses[-1] < losses[0] * 0.2, "loss must fall"
    # notebook globals, --config and the module beside the notebook; ray.train.report without Ray's ~2 s stall
    values = df.dropna(subset=["value"])
    assert sorted(values[values["rank"] == 0]["value"].tolist()) == [10 * i + 5 for i in range(20)]
    assert values["cwd_ok"].all()
    # Ray's own path blocks a health-check interval per call (2 s by default, 0.25 s in the tests); raynb's takes
    # microseconds (the benchmark measures it): 20 ms is far above that on a loaded machine and far below Ray's waits
    assert df["report_ms"].dropna().median() < 20, "ray.train.report must take raynb's non-blocking path"
    # what reached each worker
    for rank in (0, 1):
        row = df[(df["rank"] == rank) & (df["step"] == 1)].iloc[0]
        env = {key: row[key] for key in ENV_KEYS}
        assert env["NCCL_DEBUG"] == "INFO" and env["NCCL_DEBUG_SUBSYS"] == "ALL"  # --env wins over raynb's INIT,NET,ENV
        assert env["NCCL_DEBUG_FILE"] == "/tmp/raynb-nccl-kitchen.%h.%p.log"  # absolute, per host and process
        assert (env["NCCL_NVLS_ENABLE"], env["TORCH_SYMM_MEM_DISABLE_MULTICAST"]) == ("0", "1")  # multicast off
        assert (env["PYTHONUNBUFFERED"], env["RAY_TRAIN_ENABLE_PRINT_PATCH"], env["FOO"]) == ("1", "0", "bar")
        assert env["NCCL_NET"] == "<unset>"
        # set in the launcher, not in a runtime env of its own; Ray Train hands it on (0.25 s: tests/conftest.py)
        assert env["RAY_TRAIN_HEALTH_CHECK_INTERVAL_S"] == "0.25"
        assert env["RAYNB_PRELOAD"] == "safetensors"
    # the run's launcher and sink have no runtime env of their own (this kernel's job has none on the embedded head),
    # so Ray's pre-started worker processes can serve them. Only the run's own: the Jobs path's agent, a Ray Job with
    # variables of its own, makes launchers on the same head in the same session
    from ray.util.state import list_actors

    own = {run._channel.launcher._actor_id.hex(), run._channel.sink._actor_id.hex()}
    ours = list_actors(address=cluster.dashboard_url, filters=[("ray_namespace", "=", "raynb")], detail=True)
    envs = {a.class_name: json.loads(a.serialized_runtime_env or "{}") for a in ours if a.actor_id in own}
    assert set(envs) == {"Launcher", "MetricsSink"}, envs
    assert not [name for name, env in envs.items() if env.get("env_vars")], envs
    # Ray Train's first actor on the cluster was made by the warm launcher at `up`, before any run: made by a Train
    # controller it would carry the controller's runtime env (Ray Train gives it variables of its own)
    (coordinator,) = list_actors(
        address=cluster.dashboard_url, filters=[("name", "=", "AutoscalingCoordinator")], detail=True
    )
    assert not json.loads(coordinator.serialized_runtime_env or "{}").get("env_vars"), coordinator
    # the NCCL watcher: a summary sent again as rank 0's log grew, from init lines to the connected channels
    summaries = [e["summary"] for e in run.events if e.get("kind") == "nccl" and e["rank"] == 0]
    assert len(summaries) >= 2, summaries
    assert summaries[0]["intra_node"] is None and summaries[0]["nccl_version"] == "2.28.9"  # init lines only
    assert summaries[-1]["intra_node"] == "p2p" and summaries[-1]["severity"] == "ok"
    assert run.nccl[0]["intra_node"] == "p2p" and 1 not in run.nccl  # rank 1 wrote no log
    assert "P2P" in run._repr_mimebundle_()["text/html"]  # the badge in the cell


def test_a_run_whose_launcher_is_lost_ends_failed_for_every_kernel(cluster: raynb.Cluster, monkeypatch) -> None:
    """The run's launcher (where fit() and Ray Train's controller run) killed mid-run, as losing its node would: the
    kernel that started the run ends it failed, naming the launcher, and the cluster's registry -- what every other
    kernel and ``down`` read -- says failed too. (Before, the kernel's run failed on the actor's error while the
    registry still said running, and ``down`` refused: "1 run(s) still going".) Then the ended run's sink stays a
    process for ``ended_sink_s`` (60 s by default, 0.5 s here), hands the run's history to a file on the head and
    exits -- each idle actor process costs its node ~0.01 cores, and a kernel of many cells left one per run -- and
    every read answers as before, from the registry: this kernel's, and a kernel that attaches afterwards."""
    import ray

    monkeypatch.setenv("RAYNB_ENDED_SINK_S", "0.5")

    def fn(config: dict) -> None:
        import time

        import torch

        import raynb

        print("rank 0 starts", flush=True)
        for step in range(100_000):
            time.sleep(0.1)
            raynb.report(step=step, threads=torch.get_num_threads())

    # its one worker reserves one of the two CPUs: its threads follow (Ray sets OMP_NUM_THREADS from the worker's
    # CPUs), though its process imported torch before its actor came (raynb's setup hook; torch reads the variable
    # as it loads: 2 threads here before worker.py followed the share)
    run = raynb.train(fn, workers=1, cpus_per_worker=1, display=False, name="launcher-lost", wait=False)
    deadline = time.monotonic() + 120
    while run.step < 2 and not run.done() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert run.step >= 2, (run.status, run.error)
    assert set(run.metrics.threads) == {1}, run.metrics
    ray.kill(run._channel.launcher, no_restart=True)
    assert run.wait(120), "the run did not end"
    assert run.status == "failed" and "the run's launcher (where fit() and Ray Train's controller ran) is gone" in str(
        run.error
    ), run.error
    (row,) = [r for r in raynb.runs().rows if r["name"] == "launcher-lost"]
    assert row["status"] == "failed", row
    # the ended run's sink retires
    sink, deadline = run._channel.sink, time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            ray.get(sink.summary.remote(), timeout=10)
        except ray.exceptions.RayActorError:
            break
        time.sleep(0.5)
    else:
        pytest.fail("the ended run's sink is still a process a minute later")
    steps = run._channel.watch(None, 10.0, 300.0)["step"]  # this kernel's handle is dead: the registry answers
    assert steps >= 2 and run._channel.sink is None
    again = raynb.attach("launcher-lost", display=False)
    assert again.status == "failed" and again._channel.sink is None
    assert again.metrics["step"].tolist() == list(range(steps + 1)), again.metrics
    assert "rank 0 starts" in raynb.run_logs("launcher-lost")
    (row,) = [r for r in raynb.runs().rows if r["name"] == "launcher-lost"]
    assert (row["status"], row["step"]) == ("failed", steps), row


def test_a_failing_rank_ends_the_cell_at_once_and_leaves_its_launcher_to_the_next_run(cluster: raynb.Cluster) -> None:
    """Issue 41: rank 1 raises on the run's only attempt while rank 0 goes on: the run is failed with rank 1's error
    as soon as that worker's event comes in, and the cluster's registry says so at once, Ray Train's controller
    winding the group down behind the cell; once it has, the run and the registry hold fit()'s own outcome; and the
    kernel keeps the run's launcher process for its next run (Ray Train and torch imported once per connection, not
    once per run: the stall test's run below takes it; the quickstart in tests/packaging fails a run right after
    another)."""
    import ray

    from raynb._client import spares
    from raynb._current import wait_for_ending
    from raynb._remote.launcher import RECLAIM_S

    def fails(config: dict) -> None:
        import time

        import ray.train

        if ray.train.get_context().get_world_rank() == 1:
            raise ValueError("rank 1 gives up")
        time.sleep(30)  # rank 0 goes on until Ray Train stops it

    run = raynb.train(fails, workers=2, display=False, name="fails-at-once")
    assert run.status == "failed" and "Rank 1 of 2 failed with ValueError: rank 1 gives up" in str(run.error), run.error
    (row,) = [r for r in raynb.runs().rows if r["name"] == "fails-at-once"]
    assert row["status"] == "failed", row  # for every kernel, `ls` and `down` at once
    wait_for_ending(60)
    assert run.result is not None and run.result["status"] == "failed" and run.result.get("failures"), run.result
    assert run._channel is not None
    entry = run._channel.entry()
    assert entry is not None and entry["outcome"].get("failures"), entry  # fit()'s own outcome, once it returned
    spare = spares._spare  # what the next cell claims (the next test's run takes it)
    assert spare is not None and spare[0]._actor_id == run._channel.launcher._actor_id, (
        "a new launcher for the next run"
    )
    # kept as long as a new spare, not the minute an ended run's launcher waits for its kernel: a cell run after a
    # look at the result must not pay a new launcher
    assert ray.get(spare[0].leaves_in.remote(), timeout=30) > RECLAIM_S


def test_a_run_says_how_far_it_is_and_the_cluster_stops_it_when_it_stalls(cluster: raynb.Cluster) -> None:
    """Issue 42 on a real run: a 4-s "compile" before the first step is no stall; with ``total_steps=20`` the view
    shows the bar and, half-way, a time left within the spread of what was really left; then the function blocks
    on purpose (a peer that never comes) -- the kernel names the stall (each rank's last report and printed line)
    and, with ``on_stall="stop"``, the cluster's registry stops the run, saying why, where ``%raytrain ls`` shows
    it."""
    from raynb.display import render_bundle

    def fn(config: dict) -> None:
        import time

        import raynb

        time.sleep(4.0)  # a compile: no step yet
        for step in range(20):
            raynb.report(step=step, loss=1.0 / (step + 1))
            print(f"finished step {step}", flush=True)
            time.sleep(0.25)
        print("waiting on a peer that never comes", flush=True)
        time.sleep(3600)

    settings = resolve({"workers": 2, "total_steps": 20, "on_stall": "stop", "stall_min_s": 3, "stall_factor": 5})
    run = raynb.train(fn, settings=settings, display=False, name="stalls", wait=False)
    seen: dict = {"stall_before_steps": []}
    deadline = time.monotonic() + 180
    while not run.done() and time.monotonic() < deadline:
        p = run.progress
        if p.done == 0:
            seen["stall_before_steps"].append(run.stall)
        if p.done >= 10 and "half" not in seen:
            seen["half"] = (time.time(), p.left_s, render_bundle(run)["text/html"])
        if run.stall is not None and "stall" not in seen:
            seen["stall"] = (run.stall, render_bundle(run)["text/html"], raynb.runs().rows)
        time.sleep(0.1)
    assert run.done(), (run.status, run.step, seen.keys())
    assert seen["stall_before_steps"] and not any(seen["stall_before_steps"]), "a compile is no stall"
    at, left, html = seen["half"]
    last = max(r["time"] for r in run.records if r.get("step") == 19)
    actual = last - at
    step_s = [b - a for a, b in itertools.pairwise(sorted(r["time"] for r in run.records if r["rank"] == 0))]
    spread = (max(step_s) - min(step_s)) * 10 + 0.5  # ten steps left, each as slow or fast as the slowest or fastest
    assert abs(left - actual) <= spread, (left, actual, spread)
    assert 'class="raynb-progress"' in html and "of 20 steps, ~0:0" in html, html
    verdict, html, rows = seen["stall"]
    assert "no new step for" in verdict["text"] and "rank 1 at step 19" in verdict["text"], verdict
    assert verdict["last_lines"] in ({0: "waiting on a peer that never comes", 1: "waiting on a peer that never comes"},
                                     {"0": "waiting on a peer that never comes", "1": "waiting on a peer that never comes"}), verdict  # fmt: skip
    assert 'class="raynb-stall"' in html and "waiting on a peer that never comes" in html, html
    (row,) = [r for r in rows if r["name"] == "stalls"]
    assert row["stall"] and row["progress"]["fraction"] == 1.0, row
    assert run.status == "aborted" and run.aborted_why.startswith("stalled, stopped by raynb (on_stall=stop)"), run
    (row,) = [r for r in raynb.runs().rows if r["name"] == "stalls"]
    assert row["status"] == "aborted" and row["why"].startswith("stalled, stopped by raynb"), row
    assert "aborted at step 19 (stalled, stopped by raynb" in render_bundle(run)["text/plain"]


@pytest.mark.s3
def test_a_lost_worker_restarts_the_run_from_its_checkpoint_on_s3(
    cluster: raynb.Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``max_failures=1``: rank 1 kills its own process (SIGKILL) at step 5 of the first attempt; Ray Train starts
    the workers again, the function resumes from its latest checkpoint (Ray's ``get_checkpoint`` idiom), the run
    succeeds, and the records and the view say which attempt they belong to. The storage is a real S3 server
    (SeaweedFS, tests/s3): Ray Train writes the checkpoints through pyarrow's S3 filesystem and reads them back for
    the restart, this test reads them there too, and a second run with the same name resumes from the newest one.

    Its checkpoints follow the Ray idiom `report(m, checkpoint=ckpt if rank == 0 else None)`: a call that names
    `checkpoint` must go to Ray on every rank (Ray Train synchronises the ranks on it; a rank taking raynb's fast path
    would leave rank 0 waiting), and the last checkpoint lands in the storage path. (Plain metric reports take the
    fast path: test_globals_config_local_module_and_plain_ray_train_report times them.)"""

    def fn(config: dict) -> None:
        import json
        import tempfile

        import ray.train

        rank = ray.train.get_context().get_world_rank()
        import torch

        torch.compile(lambda x: (x.sin() * 2 + 1).sum())(torch.randn(8))  # its graph lands in the node's cache
        ckpt = ray.train.get_checkpoint()
        start = 1
        if ckpt is not None:
            with ckpt.as_directory() as d:
                start = json.loads(Path(d, "state.json").read_text())["step"] + 1
        for step in range(start, 9):
            if ckpt is None and step == 5 and rank == 1:
                os.kill(os.getpid(), signal.SIGKILL)
            with tempfile.TemporaryDirectory() as d:
                keep = rank == 0 and step % 2 == 0
                if keep:
                    Path(d, "state.json").write_text(json.dumps({"step": step}))
                checkpoint = ray.train.Checkpoint.from_directory(d) if keep else None
                ray.train.report({"loss": 1.0 / step, "step": step}, checkpoint=checkpoint)

    from ray.train import ScalingConfig

    from raynb.display import render_bundle

    weed = s3_server(tmp_path / "s3") if weed_binary() is not None else None
    if weed is None:
        pytest.skip("SeaweedFS is not built: `bash tests/s3/build.sh` (make test builds it)")
    with weed as s3:
        storage = s3.uri("runs")
        settings = resolve({"workers": 2, "storage_path": storage, "max_failures": 1})
        run = raynb.train(fn, settings=settings, display=False, name="restart-test")
        assert run.status == "succeeded", run.error
        ckpt = run.result["checkpoint"]  # rank 0's last, through Ray, in the storage path: on the S3 server
        assert ckpt and ckpt.startswith("raynb/runs/restart-test/checkpoint_"), ckpt
        with s3.filesystem().open_input_stream(f"{ckpt}/state.json") as f:
            assert json.loads(f.read()) == {"step": 8}

        def resumed(config: dict) -> None:
            import json

            import ray.train
            import torch

            torch.compile(lambda x: (x.sin() * 2 + 1).sum())(torch.randn(8))  # the same graph: from the cache

            with ray.train.get_checkpoint().as_directory() as d:  # the same name: Ray Train finds the newest
                ray.train.report({"resumed_from": json.loads(Path(d, "state.json").read_text())["step"]})

        # the shape from Ray's own ScalingConfig (one worker; the settings say two); a node whose compile cache
        # starts empty, as a new pod's does: what the first run compiled comes from the run's storage (S3)
        first_done = [e for e in run.events if e["kind"] == "worker_done" and e["rank"] == 0]
        assert first_done[-1]["compile_cache_saved"] >= 1, first_done
        assert s3.filesystem().get_file_info("raynb/runs/.raynb/compile-cache").type.name == "Directory"
        again = raynb.train(resumed, settings=resolve({"storage_path": storage}), display=False, name="restart-test",
                            env={"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "empty-node-cache")},
                            scaling_config=ScalingConfig(num_workers=1))  # fmt: skip
        assert again.status == "succeeded" and list(again.metrics.resumed_from) == [8], again.error
        done = [e for e in again.events if e["kind"] == "worker_done"]
        assert [(e["compiled"], e["compiled_from_cache"]) for e in done] == [(0, 1)], done
        assert done[0]["compile_cache_loaded"] >= 1, done
        assert "compiled from cache (1 graph, read from the run's storage)" in render_bundle(again)["text/plain"]
        assert list(again.metrics["rank"]) == [0], again.metrics
        # the doctor's round trip through the same storage (a file written and read back by tasks on the cluster)
        monkeypatch.setenv("RAYNB_STORAGE_PATH", storage)
        (check,) = [c for c in raynb.doctor().checks if c.name == "checkpoint storage"]
        assert check.state == "ok" and "written and read back on the only node" in check.detail, check
    df = run.metrics
    assert run.attempt == 2 and set(df.attempt) == {1, 2}, df
    second = df[df.attempt == 2]
    # resumed after a checkpoint (step 2 or 4: Train registers a checkpoint a moment after its report), not from 1
    assert second.step.min() in (3, 5) and second.step.max() == 8, second
    banner = render_bundle(run)["text/plain"].splitlines()[0]
    # which rank died and why (Ray's state API), and where the function resumed
    assert "attempt 2 of 2 (restarted after rank 1 on " in banner and "died: " in banner, banner
    assert f"resumed at step {second.step.min()}" in banner, banner
    assert 'class="raynb-mark"' in render_bundle(run)["text/html"]  # the restart, marked on the charts
