"""A worker node lost in the middle of a checkpointing run: raynb against plain Ray Train, in one invocation (issue 38).

  python bench/node_loss.py [--rounds 2] [--out bench/results/NAME.json]      (root: private mounts per node)

Each round starts a cluster of its own on this machine (tests/multinode.py: a head and two worker nodes of one CPU,
each worker node with a private /tmp) and one S3 server for the whole invocation (tests/s3: SeaweedFS); then, in a
fresh Python, a 2-worker run with ``max_failures=1`` and its checkpoints on the S3 server -- through raynb
(``raynb.up(address=...)``, ``raynb.train``) or plain Ray Train (``ray.init``, ``TorchTrainer.fit()``) -- whose
training function is the same: 24 steps of 0.4 s, rank 0 saving a checkpoint at each odd step, resuming from
``ray.train.get_checkpoint()``. Both columns tell a progress board (a plain Ray actor on the head) of each step;
once rank 0 is at step 6 the script kills every process of a worker node that holds a rank (raylet, object store,
workers) and reads from the board:

- ``resume_s``: from the kill to the first step of a new worker process (what a user waits for);
- ``steps_redone``: the steps done twice -- the furthest step the first attempt reached, less the one the second
  began at, plus one;
- ``total_s``: the run, from the call to its end.

Columns alternate (raynb first in even rounds); medians and spreads printed. What stands in for EKS here: Ray nodes
as process groups on one machine (no kubelet, no EC2 instance going away), SeaweedFS for S3.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import textwrap
import time
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))
from machine import emit  # noqa: E402 - bench/machine.py, beside this script

from tests.integration.fresh_python import script_result  # noqa: E402
from tests.multinode import can_run, ray_nodes  # noqa: E402
from tests.s3.server import ACCESS_KEY, SECRET_KEY, s3_server  # noqa: E402

STEPS, KILL_AT = 24, 6

SCRIPT = textwrap.dedent("""
    import json, sys, threading, time
    import ray
    from raynb._cluster.processes import kill_all, pids_naming
    column, client_address, gcs_address, storage, name, steps, kill_at, *node_dirs = sys.argv[1:]
    STEPS, KILL_AT = int(steps), int(kill_at)
    t_call = time.time()
    if column == "raynb":
        import raynb
        cluster = raynb.up(address=client_address, progress=lambda m: None)
    else:
        ray.init(address=gcs_address, logging_level="ERROR")

    @ray.remote(num_cpus=0)
    class Board:
        def __init__(self):
            self.steps = []
        def step(self, rank, step, pid, node):
            self.steps.append((time.time(), rank, step, pid, node))
        def read(self):
            return self.steps

    head = next(n for n in ray.nodes() if n["Alive"] and n["Resources"].get("node:__internal_head__"))
    on_head = ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy(head["NodeID"], soft=False)
    board = Board.options(name="board-" + name, namespace="bench", scheduling_strategy=on_head).remote()
    ray.get(board.read.remote())

    def train(config):
        import json, os, tempfile, time
        from pathlib import Path
        import ray, ray.train

        board = ray.get_actor(config["board"], namespace="bench")
        rank = ray.train.get_context().get_world_rank()
        node = ray.get_runtime_context().get_node_id()
        start, ckpt = 0, ray.train.get_checkpoint()
        if ckpt is not None:
            with ckpt.as_directory() as d:
                start = json.loads(Path(d, "state.json").read_text())["step"] + 1
        for step in range(start, config["steps"]):
            time.sleep(0.4)
            board.step.remote(rank, step, os.getpid(), node)
            with tempfile.TemporaryDirectory() as d:
                keep = rank == 0 and step % 2 == 1
                if keep:
                    Path(d, "state.json").write_text(json.dumps({"step": step}))
                checkpoint = ray.train.Checkpoint.from_directory(d) if keep else None
                ray.train.report({"step": step, "loss": 1.0 / (step + 1)}, checkpoint=checkpoint)

    config = {"board": "board-" + name, "steps": STEPS}
    outcome = {}
    if column == "raynb":
        from raynb._settings import resolve
        settings = resolve({"workers": 2, "storage_path": storage, "max_failures": 1})
        run = raynb.train(train, settings=settings, config=config, display=False, name=name, wait=False)
        done = run.done
    else:
        from ray.train import FailureConfig, RunConfig, ScalingConfig
        from ray.train.torch import TorchTrainer
        trainer = TorchTrainer(train, train_loop_config=config, scaling_config=ScalingConfig(num_workers=2),
                               run_config=RunConfig(name=name, storage_path=storage,
                                                    failure_config=FailureConfig(max_failures=1)))
        def fit():
            try:
                outcome["error"] = trainer.fit().error
            except Exception as e:
                outcome["error"] = e
        fitting = threading.Thread(target=fit)
        fitting.start()
        done = lambda: not fitting.is_alive()
    while not done():
        steps = ray.get(board.read.remote())
        if any(rank == 0 and step >= KILL_AT for _, rank, step, _, _ in steps):
            break
        time.sleep(0.1)
    nodes = {n["NodeID"]: n for n in ray.nodes() if n["Alive"]}
    holding = {node for *_, node in steps}
    victim = next(d for d in node_dirs for i in holding if i in nodes and d in nodes[i]["ObjectStoreSocketName"])
    t_kill = time.time()
    kill_all(pids_naming(victim))
    if column == "raynb":
        run.wait()
        status = run.status
    else:
        fitting.join()
        status = "failed" if outcome.get("error") else "succeeded"
    t_end = time.time()
    steps = ray.get(board.read.remote())
    before = {pid for t, _, _, pid, _ in steps if t < t_kill}
    after = [(t, step) for t, _, step, pid, _ in steps if pid not in before]
    first_after = min(after) if after else (None, None)
    reached = max(step for t, _, step, pid, _ in steps if pid in before)
    out = {
        "status": status,
        "resume_s": round(first_after[0] - t_kill, 2) if first_after[0] else None,
        "resumed_at_step": first_after[1],
        "steps_redone": reached - first_after[1] + 1 if first_after[1] is not None else None,
        "total_s": round(t_end - t_call, 2),
        "killed_at_step": max(step for t, _, step, _, _ in steps if t < t_kill),
    }
    if column == "raynb":
        from raynb.display import render_bundle
        out["view"] = render_bundle(run)["text/plain"].splitlines()[0]
        out["error"] = str(run.error)[:2000] if run.error else None
        try:
            cluster.down(progress=lambda m: None)
        except Exception as e:
            out["down"] = str(e)  # the registry still counts the run as going after run.wait() returned
            out["registry"] = [(r["name"], r["status"]) for r in raynb.runs().rows]
    print("RESULT " + json.dumps(out))
""")


def one(column: str, s3: Any, index: int) -> dict[str, Any]:
    # the S3 credentials in this process's environment, which the nodes inherit as pods get a role's
    credentials = {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY}
    os.environ.update(credentials, AWS_EC2_METADATA_DISABLED="true")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env["RAYNB_HOME"] = f"/tmp/raynb-bench-node-loss-{os.getpid()}-{index}"
    with ray_nodes(workers=2, cpus=1) as nodes:
        args = [column, nodes.client_address, nodes.gcs_address, s3.uri("bench"), f"{column}-{index}"]
        args += [str(STEPS), str(KILL_AT), *nodes.temp_dirs[1:]]
        return script_result(SCRIPT, args, env, timeout=600)


def _spread(xs: list[float]) -> dict[str, float]:
    return {"median": round(statistics.median(xs), 2), "min": min(xs), "max": max(xs)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", help="also write the JSON record to this file (bench/results/...)")
    args = ap.parse_args()
    if not can_run():
        sys.exit("node_loss.py needs root and unshare (a private /tmp per Ray node)")
    rounds: dict[str, list[dict[str, Any]]] = {"raynb": [], "plain": []}
    started = datetime.now().isoformat(timespec="seconds")
    with s3_server(Path(f"/tmp/raynb-bench-s3-{os.getpid()}")) as s3:
        for i in range(args.rounds):
            order = ("raynb", "plain") if i % 2 == 0 else ("plain", "raynb")
            for column in order:
                t = time.monotonic()
                rounds[column].append(one(column, s3, i))
                print(f"{column} round {i}: {rounds[column][-1]} ({time.monotonic() - t:.0f} s)", file=sys.stderr)
    summary: dict[str, Any] = {}
    for column, rs in rounds.items():
        ok = [r for r in rs if r["status"] == "succeeded" and r["resume_s"] is not None]
        summary[column] = {
            "succeeded": f"{len(ok)} of {len(rs)}",
            **{k: _spread([r[k] for r in ok]) for k in ("resume_s", "steps_redone", "total_s") if ok},
        }
    both = all("resume_s" in summary[c] for c in rounds)
    record = {
        "benchmark": "node_loss",
        "started": started,
        "what": f"2 workers, {STEPS} steps of 0.4 s, rank 0 checkpoints odd steps to S3 (SeaweedFS), max_failures=1; "
        f"a worker node holding a rank killed once rank 0 reaches step {KILL_AT}",
        "rounds": rounds,
        "summary": summary,
        "resume_ratio_raynb_over_plain": round(
            summary["raynb"]["resume_s"]["median"] / summary["plain"]["resume_s"]["median"], 2
        )
        if both
        else None,
        "stands_in_for_eks": "Ray nodes as process groups with a private /tmp on one 2-core machine; SeaweedFS for S3",
    }
    emit(record, args.out)


if __name__ == "__main__":
    main()
