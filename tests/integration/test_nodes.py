"""Many Ray nodes for real, on this machine: a head and a worker node with a disk of its own each
(tests/multinode.py), reached by address from a fresh Python as any running cluster is. A path written under /tmp on
one node is absent on the other; raynb refuses a checkpointing run whose storage is that node-local path before any
worker starts; a run that says it never checkpoints trains across both nodes."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from tests.integration.fresh_python import script_result
from tests.multinode import can_run, ray_nodes

pytestmark = pytest.mark.skipif(not can_run(), reason="private mounts per node need root and unshare")

SCRIPT = textwrap.dedent("""
    import json, os, sys, ray, raynb
    from raynb.errors import UsageError
    from raynb._client.cluster_side import run_task
    out = {}
    c = raynb.up(address=sys.argv[1], progress=lambda m: None)
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
    run = raynb.train(fn, workers=2, checkpoints=False)
    out["status"] = run.status
    out["nodes_trained_on"] = sorted({r["node"][:8] for r in run.metrics.to_dict("records")})
    c.down(progress=lambda m: None)
    print("RESULT " + json.dumps(out))
""")


def test_two_nodes_with_disks_of_their_own(tmp_path: Path) -> None:
    with ray_nodes(workers=1, cpus=1) as nodes:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
        env["RAYNB_HOME"] = str(tmp_path / "home")
        out = script_result(SCRIPT, [nodes.client_address], env, timeout=400)
    assert out["nodes"] == 2
    assert out["written"] is True and out["seen_on_head"] is False, "each node has its own /tmp"
    refused = out["refused"]
    assert refused is not None and "This cluster has 2 nodes" in refused["what"], out
    assert "--checkpoints false" in refused["fix"]
    assert out["status"] == "succeeded", out
    assert len(out["nodes_trained_on"]) == 2, f"one rank on each node: {out['nodes_trained_on']}"
