"""Many Ray nodes for real, on this machine: a head and two worker nodes with a disk of their own each
(tests/multinode.py) and a real S3 server (tests/s3), reached by address from a fresh Python as any running cluster
is -- one cluster for every check here, paid once.

- A path written under /tmp on one node is absent on the others; raynb refuses a checkpointing run whose storage is
  that node-local path before any worker starts.
- The doctor's storage round trip across two nodes: S3 passes; a /tmp path declared shared fails, naming the node
  that could not read it and the path.
- A kernel of another Ray (2.55.1, SageMaker Distribution's) reaches this head, which raynb did not start (``ray start
  --head`` by hand), by its dashboard's address (``http://HOST:PORT``): through Ray Jobs, a run that says it never
  checkpoints trains across two nodes, the run a Ray Job of its own; the doctor's storage round trip runs its node
  tasks through raynb's agent; ``down`` leaves the cluster running.
- A whole worker node lost in the middle of a checkpointing run (its raylet and workers killed): with
  ``max_failures=1`` Ray Train starts the group again on the nodes that remain, from the checkpoint on the S3 server;
  the view names the node lost and the step it resumed at; ``run.metrics`` has every step once."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from tests.integration.fresh_python import script_result
from tests.multinode import can_run, ray_nodes
from tests.s3.server import s3_server, weed_binary

pytestmark = pytest.mark.skipif(not can_run(), reason="private mounts per node need root and unshare")

SCRIPT = textwrap.dedent("""
    import json, os, sys, time, ray, raynb
    from raynb.display import render_bundle
    from raynb.errors import UsageError
    from raynb._client.cluster_side import run_task
    from raynb._cluster.processes import kill_all, pids_naming
    address, storage, node_dirs = sys.argv[1], sys.argv[2], sys.argv[3:]
    out = {}
    c = raynb.up(address=address, progress=lambda m: None)
    nodes = [n for n in ray.nodes() if n["Alive"]]
    out["nodes"] = len(nodes)
    head = next(n for n in nodes if n["Resources"].get("node:__internal_head__"))
    worker = next(n for n in nodes if n is not head)

    def write(p):
        open(p, "w").write("on one node")
        return os.path.exists(p)

    p = "/tmp/raynb-written-on-the-worker-node"
    out["written"] = run_task(write, p, node_id=worker["NodeID"])
    out["seen_on_head"] = run_task(os.path.exists, p, node_id=head["NodeID"])

    def fn(config):
        for step in range(3):
            raynb.report(step=step, loss=1.0 / (step + 1), node=ray.get_runtime_context().get_node_id())

    try:
        raynb.train(fn, workers=2)
        out["refused"] = None
    except UsageError as e:
        out["refused"] = {"what": e.what, "fix": e.fix}

    def storage_check():
        (check,) = [c for c in raynb.doctor().checks if c.name == "checkpoint storage"]
        return {"state": check.state, "detail": check.detail, "fix": check.fix}

    # from here on the settings come from `%config RayNB` in an IPython shell, as a notebook's would: the Python API
    # and the doctor read them as the magics do
    from IPython.core.interactiveshell import InteractiveShell

    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "raynb")
    ip.run_line_magic("config", f"RayNB.storage_path = {storage!r}")
    out["doctor_s3"] = storage_check()
    ip.run_line_magic("config", "RayNB.storage_path = '/tmp/raynb-said-to-be-shared/runs'")  # said to be shared:
    ip.run_line_magic("config", "RayNB.shared_mount_path = '/tmp/raynb-said-to-be-shared'")  # it is not
    out["doctor_tmp"] = storage_check()
    out["worker_node"] = worker["NodeID"]
    ip.run_line_magic("config", f"RayNB.storage_path = {storage!r}")
    ip.run_line_magic("config", "RayNB.shared_mount_path = None")

    def resumable(config):
        import json, tempfile, time
        from pathlib import Path
        import ray, ray.train

        rank = ray.train.get_context().get_world_rank()
        node = ray.get_runtime_context().get_node_id()
        start, ckpt = 0, ray.train.get_checkpoint()
        if ckpt is not None:
            with ckpt.as_directory() as d:
                start = json.loads(Path(d, "state.json").read_text())["step"] + 1
        for step in range(start, 20):
            time.sleep(0.4)
            with tempfile.TemporaryDirectory() as d:
                keep = rank == 0 and step % 2 == 1
                if keep:
                    Path(d, "state.json").write_text(json.dumps({"step": step}))
                checkpoint = ray.train.Checkpoint.from_directory(d) if keep else None
                ray.train.report({"step": step, "loss": 1.0 / (step + 1), "node": node}, checkpoint=checkpoint)

    # storage from `%config` alone: the default (~/ray_results) would be refused on these 3 nodes
    run = raynb.train(resumable, workers=2, max_failures=1, display=False, name="node-loss", wait=False)
    while run.step < 6 and not run.done():
        time.sleep(0.1)
    out["launcher_node"] = ray.get(run._channel.launcher.node.remote())  # and so Train's controller
    out["head_node"] = head["NodeID"]
    by_dir = {d: n["NodeID"] for n in ray.nodes() if n["Alive"] for d in node_dirs if d in n["ObjectStoreSocketName"]}
    on = {r["node"] for r in run.records}
    victim = next((d for d, node in by_dir.items() if node in on), None)  # a worker node that holds a rank
    assert victim, f"no worker node holds a rank: {on} {by_dir} {run.status} {run.error}"
    kill_all(pids_naming(victim))  # the whole node: its raylet, object store and workers
    out["killed"] = {"node": by_dir[victim], "at_step": run.step, "time": time.time()}
    out["ended"] = run.wait(300)
    out["loss_status"] = run.status
    out["attempt"] = run.attempt
    out["banner"] = render_bundle(run)["text/plain"].splitlines()[0]
    out["metrics"] = run.metrics[["rank", "step", "attempt", "node"]].to_dict("records")
    out["error"] = str(run.error)[:3000] if run.error else None
    out["checkpoint"] = (run.result or {}).get("checkpoint")
    out["checkpoints"] = [[e["attempt"], e["step"]] for e in run.events if e["kind"] == "checkpoint"]
    started = {(e["rank"], e["attempt"]): e["node_id"] for e in run.events if e["kind"] == "worker_started"}
    done = [e for e in run.events if e["kind"] == "worker_done"]
    out["paths"] = [[started.get((e["rank"], e["attempt"])), e.get("metrics_over")] for e in done]
    c.down(progress=lambda m: None)
    print("RESULT " + json.dumps(out))
""")


OTHER_RAY_KERNEL = textwrap.dedent("""
    import json, os, sys, time, ray, raynb
    from ray.job_submission import JobSubmissionClient

    def fn(config):  # travels as its source: this file is on the kernel's disk only
        import ray, raynb

        for step in range(3):
            raynb.report(step=step, loss=1.0 / (step + 1), node=ray.get_runtime_context().get_node_id())

    dashboard, storage = sys.argv[1:]
    said = []
    c = raynb.up(address=dashboard, progress=said.append)  # the dashboard's address: Ray Jobs, whatever the versions
    run = raynb.train(fn, workers=2, checkpoints=False, display=False)
    jobs = JobSubmissionClient(dashboard)
    (job,) = [j.submission_id for j in jobs.list_jobs() if (j.metadata or {}).get("raynb_run") == run.name]
    t0 = time.time()
    while not jobs.get_job_status(job).is_terminal() and time.time() - t0 < 60:
        time.sleep(0.5)
    out = {"ray": ray.__version__, "status": c.status().text(), "run": run.status, "error": str(run.error),
           "nodes": sorted({r["node"] for r in run.records}), "run_job": jobs.get_job_status(job).value}
    os.environ["RAYNB_STORAGE_PATH"] = storage  # the doctor's round trip across two nodes, through the agent
    (check,) = [c for c in raynb.doctor().checks if c.name == "checkpoint storage"]
    out["doctor_s3"] = {"state": check.state, "detail": check.detail}
    c.down(progress=said.append)
    out["said"] = said
    print("RESULT " + json.dumps(out))
""")


def test_nodes_with_disks_of_their_own_and_one_lost_mid_run(tmp_path: Path) -> None:
    if weed_binary() is None:
        pytest.skip("SeaweedFS is not built: `bash tests/s3/build.sh` (make test builds it)")
    # the S3 credentials (tests/conftest.py) are in the environment every Ray node inherits, as a pod's role would be
    from tests.other_ray import OTHER_RAY, other_ray_env, run_in_other_ray

    with s3_server(tmp_path / "s3") as s3, ray_nodes(workers=2, cpus=1, dashboard=True) as nodes:
        assert nodes.dashboard_url
        kernel = tmp_path / "other_ray_kernel.py"
        kernel.write_text(OTHER_RAY_KERNEL)
        env = other_ray_env(RAYNB_HOME=str(tmp_path / "home"))
        other = run_in_other_ray(kernel, [nodes.dashboard_url, s3.uri("runs")], env, timeout=300)
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
        env["RAYNB_HOME"] = str(tmp_path / "home")
        worker_dirs = list(nodes.temp_dirs[1:])
        out = script_result(SCRIPT, [nodes.client_address, s3.uri("runs"), *worker_dirs], env, timeout=600)
        checkpoint = out["checkpoint"]
        assert checkpoint and checkpoint.startswith("raynb/runs/node-loss/checkpoint_"), out  # on the S3 server
        assert s3.filesystem().get_file_info(f"{checkpoint}/state.json").size > 0
    # the other Ray's kernel, through Ray Jobs, on a head started by hand
    assert other["ray"] == OTHER_RAY and "through Ray Jobs: kernel" in other["status"], other
    # a run that says it never checkpoints trains across nodes (a rank on each of two)
    assert other["run"] == "succeeded" and len(other["nodes"]) == 2, other
    assert other["run_job"] == "SUCCEEDED", other
    assert other["doctor_s3"]["state"] == "ok", other["doctor_s3"]  # node tasks pinned to nodes, through the agent
    assert "read back on a worker node and the head" in other["doctor_s3"]["detail"], other["doctor_s3"]
    assert other["said"][-1].endswith("raynb did not start that cluster, so it keeps running"), other["said"]

    assert out["nodes"] == 3
    assert out["written"] is True and out["seen_on_head"] is False, "each node has its own /tmp"
    refused = out["refused"]
    assert refused is not None and "This cluster has 3 nodes" in refused["what"], out
    assert "--checkpoints false" in refused["fix"]
    # a cluster reached by address: the settings that work there, not a values file's
    assert "%config RayNB.storage_path" in refused["fix"] and "RAYNB_SHARED_MOUNT_PATH" in refused["fix"], refused
    assert "SHARED_PVC" not in refused["fix"] and "--recreate" not in refused["fix"], refused

    s3_check, tmp_check = out["doctor_s3"], out["doctor_tmp"]
    assert s3_check["state"] == "ok" and "read back on a worker node and the head" in s3_check["detail"], s3_check
    worker = out["worker_node"][:8]
    assert tmp_check["state"] == "fail", tmp_check
    detail = tmp_check["detail"]
    assert detail.startswith("/tmp/raynb-said-to-be-shared/runs: written on ") and "but reading it on" in detail
    assert f"a worker node ({worker} at " in detail, detail  # which node, and the path
    assert "mount the path on every node" in tmp_check["fix"] and "pod" not in tmp_check["fix"], tmp_check

    # the node lost mid-run; the run's launcher, where Ray Train's controller runs, on the head (were it on the node
    # lost, the run would go with it: one round in four here before it was pinned)
    assert out["launcher_node"] == out["head_node"], out
    assert out["ended"] and out["loss_status"] == "succeeded" and out["attempt"] == 2, (out["banner"], out["error"])
    lost = out["killed"]["node"]
    rows = out["metrics"]
    second = [r for r in rows if r["attempt"] == 2]
    resumed_at = min(r["step"] for r in second)
    # from rank 0's newest checkpoint (odd steps; rank 0, on a node that stayed, went on until Train saw the loss)
    assert resumed_at > 0 and resumed_at % 2 == 0, (resumed_at, out["killed"])
    assert lost not in {r["node"] for r in second}, "the second attempt ran on the nodes that remain"
    for rank in (0, 1):
        steps = [r["step"] for r in rows if r["rank"] == rank]
        assert sorted(steps) == list(range(20)), f"rank {rank}: every step once: {steps}"
    banner = out["banner"]
    assert "attempt 2 of 2 (restarted after node " in banner, banner
    assert f"({lost[:8]} at " in banner and ") was lost with rank" in banner, banner
    assert f"resumed at step {resumed_at} from step {resumed_at - 1}'s checkpoint" in banner, banner
    # a checkpoint written after that one, which Ray Train had not registered when the node went, is named
    newer = [step for attempt, step in out["checkpoints"] if attempt == 1 and step >= resumed_at]
    said = f"step {max(newer)}'s checkpoint was written" if newer else "checkpoint was written"
    assert (said in banner) == bool(newer), (banner, out["checkpoints"])
    # how each finishing rank's batches reached the run's sink (on the head): over its socket from the head's node,
    # a Ray call each from the others (a socket is a file of its node: each node here has its own /tmp)
    assert out["paths"], out
    for node, over in out["paths"]:
        assert over == ("node socket" if node == out["head_node"] else "ray"), out["paths"]
