"""A kernel whose Ray is not the cluster's (SageMaker Distribution's pip Ray 2.55.1, a venv of its own:
``tests/other_ray.py``; raynb from this project on ``PYTHONPATH``) against the session's 2.58.0 head: refused by Ray
Client, it reaches the head through Ray Jobs and raynb's agent (issue 37). Each kernel is a fresh Python running a
file, as a notebook's code is (a function travels as its source, read from the file). The first test starts the
agent; the next finds it running."""

from __future__ import annotations

import subprocess
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

import raynb

pytestmark = pytest.mark.journey  # the second test finds the agent the first started

OTHER_RAY_SCRIPT = textwrap.dedent("""
    import contextlib, io, json, sys, time, urllib.error, urllib.request
    import ray, raynb
    from ray.job_submission import JobSubmissionClient
    from raynb.errors import ConnectError, VersionMismatchError

    def train_fn(config):  # travels as its source: this file is on the kernel's disk only
        import ray
        import raynb

        rank = ray.train.get_context().get_world_rank()
        print(f"rank {rank} runs Ray {ray.__version__}")
        for step in range(4):
            raynb.report(step=step, loss=1.0 / (step + 1))
            if rank == 1 and step == 2:
                raise ValueError(f"rank {rank} gives up at step {step}")

    address, token, dashboard = sys.argv[1:4]
    out = {"ray": ray.__version__}
    for case, dash, via in (("forced ray client", dashboard, "client"), ("no dashboard", None, None)):
        try:
            raynb.up(address=address, token_file=token, dashboard_url=dash, via=via, progress=lambda m: None)
            out[case] = "connected"
        except VersionMismatchError as e:
            out[case] = {"what": e.what, "saw": e.saw, "fix": e.fix}
    said = []
    c = raynb.up(address=address, token_file=token, dashboard_url=dashboard, progress=said.append)
    out["said"], out["status"] = said, c.status().text()
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):  # what the workers print comes to the kernel's output
        run = raynb.train(train_fn, workers=2, display=False)
    err = run.error
    out["run"] = {
        "status": run.status,
        "steps": sorted({(r["rank"], r["step"]) for r in run.records}),
        "error": str(err) if err else None,
        "ranks": err.ranks if err else None,
        "logs": raynb.run_logs(run.name),
        "listed": [(r["name"], r["status"]) for r in raynb.runs().rows],
        "name": run.name,
        "printed": printed.getvalue(),
    }
    jobs = JobSubmissionClient(dashboard, headers={"Authorization": "Bearer " + open(token).read().strip()})
    mine = [j.submission_id for j in jobs.list_jobs() if (j.metadata or {}).get("raynb_run") == run.name]
    t0 = time.time()
    while mine and not jobs.get_job_status(mine[0]).is_terminal() and time.time() - t0 < 60:
        time.sleep(0.5)  # the run's job ends once the run did
    out["run_job"] = {"ids": mine, "status": jobs.get_job_status(mine[0]).value, "logs": jobs.get_job_logs(mine[0])}
    out["doctor"] = {c.name: (c.state, c.detail) for c in raynb.doctor().checks}  # its node tasks, through the agent
    agent = out["agent"] = raynb.current().status().reached.rsplit(" ", 1)[-1]
    try:
        urllib.request.urlopen(urllib.request.Request(agent + "/raynb/v1/list_runs", data=b"{}", method="POST"))
        out["no secret"] = "answered"
    except urllib.error.HTTPError as e:
        out["no secret"] = e.code
    raynb.down(progress=said.append)
    out["down"] = said[-1]
    print("RESULT " + json.dumps(out))
""")


def _kernel(script: str, cluster: raynb.Cluster, tmp_path: Path, *args: str, timeout: float = 400) -> dict:
    """Run ``script`` from a file in the other Ray's Python, given the head's address, token file and dashboard
    (then ``args``); what its ``RESULT`` line says."""
    from tests.other_ray import other_ray_env, run_in_other_ray

    head = cluster.backend.head
    file = tmp_path / f"kernel-{len(list(tmp_path.glob('kernel-*.py')))}.py"
    file.write_text(script)
    argv = [cluster.address, str(head.token_path), str(head.dashboard_url), *args]
    return run_in_other_ray(file, argv, other_ray_env(), timeout=timeout)


def test_a_kernel_of_another_ray_trains_through_ray_jobs(cluster: raynb.Cluster, tmp_path: Path) -> None:
    """A kernel with SageMaker Distribution's Ray 2.55.1 (a venv of pip's, raynb from this project) against the
    session's 2.58.0 head. Ray Client refuses it -- asked for, or where no dashboard is known -- naming both versions
    and what to install; given the dashboard, raynb reaches the head through Ray Jobs and its agent instead: a run of
    a function in the kernel's file trains on the head's Ray, a failing rank is named with the kernel file's line,
    what the workers printed and the run list come back, the run was a Ray Job of its own (its workers' lines in the
    job's log, FAILED as the run), the doctor's checks run (its node tasks through the agent), the agent refuses a call
    without its secret, and ``down`` only disconnects."""
    import ray

    from tests.other_ray import OTHER_RAY

    out = _kernel(OTHER_RAY_SCRIPT, cluster, tmp_path)
    here = ray.__version__  # the session head's, as every process of the test venv's
    assert out["ray"] == OTHER_RAY
    for case in ("forced ray client", "no dashboard"):
        refused = out[case]
        assert isinstance(refused, dict), f"{case}: a Ray {OTHER_RAY} kernel must not connect over Ray Client"
        assert f"Ray {OTHER_RAY} here vs {here}" in refused["saw"], refused
        assert f"ray[client,train,default]=={here}" in refused["fix"], refused
    why = f"kernel Ray {OTHER_RAY}, cluster Ray {here}"
    assert any("through Ray Jobs" in m and why in m for m in out["said"]), out["said"]
    assert f"/ Ray {OTHER_RAY}, cluster" in out["status"] and "through Ray Jobs: kernel" in out["status"]
    run = out["run"]
    assert run["status"] == "failed" and run["ranks"] == [1], run
    assert [0, 0] in run["steps"] and [1, 2] in run["steps"], run["steps"]
    lines = [x.strip() for x in OTHER_RAY_SCRIPT.splitlines()]
    line = 1 + lines.index('raise ValueError(f"rank {rank} gives up at step {step}")')
    assert "Rank 1 of 2 failed with ValueError: rank 1 gives up at step 2" in run["error"], run["error"]
    assert f"line {line}" in run["error"], run["error"]
    assert f"rank 0 runs Ray {here}" in run["logs"] and f"rank 1 runs Ray {here}" in run["logs"], run["logs"]
    assert (run["name"], "failed") in [tuple(r) for r in run["listed"]]
    assert f"[rank 1] rank 1 runs Ray {here}" in run["printed"], run["printed"]
    run_job = out["run_job"]
    assert len(run_job["ids"]) == 1 and run_job["status"] == "FAILED", run_job
    assert f"[rank 1] rank 1 runs Ray {here}" in run_job["logs"], run_job["logs"]
    assert f"raynb: run {run['name']} failed: " in run_job["logs"], run_job["logs"]
    doctor = out["doctor"]
    assert doctor["Ray and Python versions"][0] == "ok", doctor
    assert "through Ray Jobs, which needs no match" in doctor["Ray and Python versions"][1], doctor
    assert f"cluster Ray {here}" in doctor["Ray and Python versions"][1], "read on the cluster's node"
    assert doctor["checkpoint storage"][0] == "ok" and doctor["GPUs"][0] == "ok", doctor
    assert out["no secret"] == 401
    port = out["agent"].rsplit(":", 1)[-1]
    listening = [
        ln.split()[3] for ln in subprocess.run(["ss", "-ltnH"], capture_output=True, text=True).stdout.splitlines()
    ]
    assert [a for a in listening if a.endswith(":" + port)] == [f"127.0.0.1:{port}"], (
        "the agent listens as the head does"
    )
    assert out["down"].endswith("raynb did not start that cluster, so it keeps running"), out["down"]
    assert cluster.backend.head.alive()


FAILS_ONCE = """%%raytrain --workers 2 --max-failures 1 --out again
import os, ray, raynb
rank = ray.train.get_context().get_world_rank()
for step in range(6):
    raynb.report(step=step, loss=1.0 / (step + 1))
    if rank == 1 and step == 2 and not os.path.exists(MARKER):
        open(MARKER, "w").close()
        raise RuntimeError("rank 1 fails once")
"""


def test_the_magics_in_a_jupyter_kernel_of_ray_2_55_1(cluster: raynb.Cluster, tmp_path: Path) -> None:
    """A real Jupyter kernel of the Ray 2.55.1 environment, driven message by message as a notebook's:
    ``%raycluster up --address`` reaches the head through Ray Jobs; a ``%%raytrain`` cell whose rank 1 fails once
    (a notebook global names its marker file) starts again under ``--max-failures 1`` and succeeds, the live view
    saying which attempt; Hugging Face's Trainer with Ray's callback, Ray's guide pasted unchanged, trains and
    checkpoints; an interrupt (the kernel's stop button) aborts a run, its workers end and the kernel stays usable;
    ``down`` leaves the head running."""
    import ray

    from tests.compat.test_upstream_idioms import HF_GUIDE
    from tests.notebook.kernels import STEP, errors, html_of, kernel, run, text, train_workers
    from tests.other_ray import OTHER_RAY, other_ray_env, other_ray_python

    head = cluster.backend.head

    def cell(code: str, timeout: float = 300, on_msg: Any = None) -> list[dict]:
        out = run(kc, code, timeout=timeout, on_msg=on_msg)
        assert not errors(out), text(out)[-4000:]
        return out

    with kernel(env=other_ray_env(), cwd=str(tmp_path), python=str(other_ray_python())) as (km, kc):
        up = cell(
            "%load_ext raynb\nimport ray\nprint('kernel Ray', ray.__version__)\n"
            f"%raycluster up --address {cluster.address} --token-file {head.token_path} "
            f"--dashboard-url {head.dashboard_url}",
            timeout=240,
        )
        assert f"kernel Ray {OTHER_RAY}" in text(up) and "through Ray Jobs" in text(up), text(up)

        views: list[str] = []
        cell(f"MARKER = {str(tmp_path / 'failed-once')!r}")
        cell(FAILS_ONCE, on_msg=lambda m: views.append(html_of(m)))
        said = text(cell("print(again.status, again.attempt, sorted({(r['attempt'], r['step']) for r in again.records "
                         "if r['rank'] == 1}))"))  # fmt: skip
        assert said.startswith("succeeded 2 ["), said
        assert "(1, 2)" in said and "(2, 5)" in said, said  # rank 1's steps on each attempt
        assert any("attempt 2 of 2" in v for v in views), "the live view says the run started again"

        cell(f"%%raytrain --workers 2 --out hf\n{HF_GUIDE}", timeout=400)
        said = text(
            cell(
                "m = hf.metrics\nprint(hf.status, m.loss.iloc[0] > m.loss.iloc[-1], bool((hf.result or {}).get('checkpoint')))"
            )
        )
        assert said.strip() == "succeeded True True", said

        steps: list[int] = []
        interrupted: list[float] = []

        def watch(m: dict) -> None:
            steps.extend(int(s) for s in STEP.findall(html_of(m)))
            if steps and max(steps) >= 3 and not interrupted:
                km.interrupt_kernel()
                interrupted.append(time.monotonic())

        loop = "import time, raynb\nfor i in range(10_000):\n    time.sleep(0.2)\n    raynb.report(loss=1.0 / (i + 1))"
        msgs = run(kc, f"%%raytrain --workers 2 --out r\n{loop}", on_msg=watch)
        assert interrupted, "the run never reached step 3"
        errs = errors(msgs)
        assert len(errs) == 1 and errs[0]["ename"] == "RunAborted", text(msgs)
        while train_workers() and time.monotonic() - interrupted[0] < 30:
            time.sleep(0.2)
        assert train_workers() == [], "the workers must be stopped by the interrupt, not left running"
        said = text(cell("print(r.status, r.aborted_at_step >= 3)\n%raycluster down"))
        assert "aborted True" in said and "raynb did not start that cluster, so it keeps running" in said, said
    assert head.alive() and ray.__version__ != OTHER_RAY


STARTS_AND_DIES = textwrap.dedent("""
    import json, os, signal, sys, time
    import raynb

    def slow_fn(config):
        import time
        import raynb

        for step in range(config["steps"]):
            raynb.report(step=step, loss=1.0 / (step + 1))
            time.sleep(0.5)

    address, token, dashboard, name = sys.argv[1:5]
    said = []
    raynb.up(address=address, token_file=token, dashboard_url=dashboard, progress=said.append)
    run = raynb.train(slow_fn, workers=2, config={"steps": 400}, display=False, name=name, wait=False)
    while run.step < 2 and not run.done():
        time.sleep(0.2)
    print("RESULT " + json.dumps({"said": said, "step": run.step, "status": run.status}), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)  # the kernel dies; the run is the cluster's
""")

ATTACHES_AND_STOPS = textwrap.dedent("""
    import json, sys, time
    import raynb
    from ray.job_submission import JobSubmissionClient

    address, token, dashboard, name, at_kill = sys.argv[1:6]
    said = []
    raynb.up(address=address, token_file=token, dashboard_url=dashboard, progress=said.append)
    listed = {r["name"]: r["status"] for r in raynb.runs().rows}
    run = raynb.attach(name, display=False)
    while run.step < int(at_kill) + 3 and not run.done():
        time.sleep(0.2)
    seen_at = run.step
    # the agent goes (its job stopped, as a node restart or a colleague's `ray job stop` would): the run does not
    jobs = JobSubmissionClient(dashboard, headers={"Authorization": "Bearer " + open(token).read().strip()})
    (agent,) = [j for j in jobs.list_jobs() if (j.metadata or {}).get("raynb") == "agent" and j.status == "RUNNING"]
    jobs.stop_job(agent.submission_id)
    while not jobs.get_job_status(agent.submission_id).is_terminal():
        time.sleep(0.2)
    (run_job,) = [j.submission_id for j in jobs.list_jobs() if (j.metadata or {}).get("raynb_run") == name]
    driver = jobs.get_job_status(run_job).value  # with the agent gone, the run's own job is its driver
    listed_mid = {r["name"]: r["status"] for r in raynb.runs().rows}.get(name)  # through a new agent
    t0 = time.time()
    jobs.stop_job(run_job)  # `ray job stop` on the run's job stops the run
    t1 = time.time()
    ended = run.wait(60)
    t2 = time.time()
    while not jobs.get_job_status(run_job).is_terminal() and time.time() - t2 < 30:
        time.sleep(0.2)
    steps = sorted({r["step"] for r in run.records if r["rank"] == 0})
    print("RESULT " + json.dumps({
        "listed": listed.get(name), "seen_at": seen_at, "ended": ended, "status": run.status,
        "driver": driver, "listed_mid": listed_mid, "run_job": jobs.get_job_status(run_job).value,
        "run_job_logs": jobs.get_job_logs(run_job),
        "stop_s": t1 - t0, "wait_s": t2 - t1, "entry": raynb.runs().rows and [r for r in raynb.runs().rows if r["name"] == name],
        "said": said, "agents": sorted(j.status for j in jobs.list_jobs() if (j.metadata or {}).get("raynb") == "agent"),
        "steps": steps, "listed_after": {r["name"]: r["status"] for r in raynb.runs().rows}.get(name),
    }))
""")


def test_a_background_run_outlives_its_kernel_and_another_kernel_attaches_and_stops_it(
    cluster: raynb.Cluster, tmp_path: Path
) -> None:
    """Through Ray Jobs as over Ray Client, a run belongs to the cluster: a kernel starts one in the background and
    is killed (SIGKILL); a new kernel finds the agent running (no second one), lists the run as running, attaches --
    its whole history from step 0, then live. Then the agent's job is stopped under it: the run goes on, its own Ray
    Job still its driver (what a cluster's idle detection counts), and the kernel's next call starts a new agent.
    ``ray job stop`` on the run's job stops the run."""
    name = "jobs-outlives-its-kernel"
    first = _kernel(STARTS_AND_DIES, cluster, tmp_path, name)
    assert first["status"] == "running" and first["step"] >= 2, first
    assert not any("starting raynb's agent" in m for m in first["said"]), "the first test's agent is found"
    second = _kernel(ATTACHES_AND_STOPS, cluster, tmp_path, name, str(first["step"]))
    assert second["listed"] == "running", second
    assert second["seen_at"] >= first["step"] + 3, second
    assert second["driver"] == "RUNNING" and second["listed_mid"] == "running", second
    assert second["ended"] and second["status"] == "aborted", str(second)
    assert second["run_job"] == "STOPPED" and f"stopping run {name}" in second["run_job_logs"], second
    assert sum("stopped answering" in m for m in second["said"]) == 1, second["said"]  # one thread finds it
    assert second["agents"] == ["RUNNING", "STOPPED"], "one new agent, whichever of the kernel's threads noticed first"
    assert second["steps"][:3] == [0, 1, 2] and second["steps"][-1] >= second["seen_at"] - 1, second["steps"]
    assert second["steps"] == list(range(len(second["steps"]))), "every step once, none lost at the kernel's death"
    assert second["listed_after"] == "aborted", second


WARM_CELLS = textwrap.dedent("""
    import json, sys
    import raynb
    from raynb.errors import WarmCellError

    def doubled(config):  # a function in the kernel's file, run on every rank
        import ray

        return ray.train.get_context().get_world_rank() * 2 + config["plus"]

    address, token, dashboard = sys.argv[1:4]
    raynb.up(address=address, token_file=token, dashboard_url=dashboard, progress=lambda m: None)
    g = raynb.warm(workers=2)
    out = {"status": raynb.current().status().warm}
    ns = {"__name__": "__main__", "SHIFT": 5}
    cell = lambda src: g.run_cell(src, ns, display=False)
    out["first"] = cell("import ray\\nrank = ray.train.get_context().get_world_rank()\\nx = rank * 10\\nx + 1")
    out["state"] = cell("x + SHIFT")  # the rank's own x, the notebook's SHIFT
    out["pulled"] = g.pull("x", 1)
    out["call"] = g.run(doubled, {"plus": 3})
    try:
        cell("y = 1\\nraise RuntimeError('warm boom')")
    except WarmCellError as e:
        out["error"] = str(e)
    out["after_error"] = cell("x")
    out["stopped"] = g.stop()
    print("RESULT " + json.dumps(out))
""")


def test_warm_cells_through_ray_jobs_keep_each_ranks_state(cluster: raynb.Cluster, tmp_path: Path) -> None:
    """A warm group from the Ray 2.55.1 kernel: its mailbox is kept by the agent; cells travel as source with the
    notebook's values as plain data, each rank keeps what its cells assigned, a value comes back from rank 0 or is
    pulled from another, a function of the kernel's file runs on every rank, a failing cell names its line and leaves
    the group usable, and stop ends it."""
    out = _kernel(WARM_CELLS, cluster, tmp_path)
    assert out["status"].startswith("warm group warm-") and "2 CPU" in out["status"], out
    assert (out["first"], out["state"], out["pulled"], out["call"]) == (1, 5, 10, 3), out
    assert "RuntimeError: warm boom" in out["error"] and "line 3" in out["error"], out["error"]
    assert out["after_error"] == 0 and out["stopped"].endswith("stopped"), out
