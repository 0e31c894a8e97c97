"""A kernel of SageMaker Distribution's Ray (2.55.1, Python of this machine) against a RayCluster whose image is the
DLC's (Ray 2.58.0, Python 3.13, as the values file says): ``raynb.up(values=...)`` makes the RayCluster through the
real control plane and KubeRay, and -- Ray Client being out of reach for a kernel like that -- reaches it through Ray
Jobs: the agent is a Ray Job submitted through the dashboard's port-forward, it listens on every address of the head
pod, and the kernel reaches it through a port-forward of its own. A run of a function in the kernel's file trains on
the cluster's Ray; ``down`` deletes the RayCluster.

Modelled: the head pod is this machine's Ray head behind kwok's ClusterPortForward (which sends the agent's port to the
same port here: conftest's agent_port; on EKS the agent has the pod's 8266); the kernel is a fresh Python of the other
Ray's venv (tests/other_ray.py), not a Jupyter kernel (tests/integration/test_jobs_path.py drives one by address)."""

from __future__ import annotations

import json
import platform
import textwrap
from pathlib import Path

from conftest import NAME, VALUES

from raynb._cluster import kube_api as kube
from raynb._cluster import kube_connect

KERNEL = textwrap.dedent("""
    import json, platform, sys
    import ray, raynb
    values, sets = sys.argv[1], json.loads(sys.argv[2])
    said = []
    c = raynb.up(values=values, set=sets, progress=said.append)
    out = {"kernel": [platform.python_version(), ray.__version__], "reached": c.reached, "said": said}

    def fn(config):
        import platform, ray, raynb
        for step in range(5):
            raynb.report(step=step, loss=1.0 / (step + 1), runtime=f"{platform.python_version()} / {ray.__version__}")

    run = raynb.train(fn, workers=2, display=False, name="jobs-through-k8s", wait=False)
    run.wait(300)
    out["status"], out["error"] = run.status, str(run.error)
    rows = run.metrics.to_dict("records")
    out["steps"] = sorted({r["step"] for r in rows})
    out["ranks"] = sorted({r["rank"] for r in rows})
    out["where"] = sorted({str(r.get("runtime")) for r in rows})
    out["forwards"] = {str(p): f.tunnels_opened for p, f in c.backend.forwards.items()}
    out["forward_errors"] = {str(p): f.last_error for p, f in c.backend.forwards.items()}
    c.down(progress=said.append)
    print("RESULT " + json.dumps(out))
""")


def test_a_kernel_of_another_ray_reaches_a_raycluster_through_ray_jobs(
    head_behind_pods, agent_port: int, clean, shared_volume, tmp_path: Path
) -> None:
    from tests.other_ray import OTHER_RAY, other_ray_env, run_in_other_ray

    script = tmp_path / "kernel.py"
    script.write_text(KERNEL)
    env = other_ray_env(RAYNB_AGENT_PORT=str(agent_port))
    out = run_in_other_ray(script, [VALUES, json.dumps(shared_volume)], env, timeout=420)
    reached = out["reached"]
    assert out["kernel"][1] == OTHER_RAY
    assert reached.startswith("through Ray Jobs: kernel ") and f"/ Ray {OTHER_RAY}, cluster " in reached, reached
    assert f"(kernel Ray {OTHER_RAY}, cluster Ray 2.58.0)" in reached, reached  # the dashboard's answer
    assert "raynb's agent at http://127.0.0.1:" in reached, reached  # through a port-forward of its own
    assert "starting raynb's agent on the cluster: a Ray Job, raynb's package shipped with it" in out["said"], out
    assert out["status"] == "succeeded", out
    assert out["steps"] == list(range(5)) and out["ranks"] == [0, 1], out
    assert out["where"] == [f"{platform.python_version()} / 2.58.0"], out["where"]  # the head "pod"'s Python and Ray
    assert set(out["forwards"]) == {"10001", "8265", str(agent_port)}, out["forwards"]
    assert out["forwards"]["10001"] == 0, out["forwards"]  # no Ray Client
    # one tunnel per kernel thread that calls the agent, its connection kept alive (6 here; one per call was 112)
    assert 1 <= out["forwards"][str(agent_port)] <= 12, out["forwards"]
    # tunnels opened several at once (one per HTTP call) each on the forward's own API client, one at a time: before,
    # two at once left the client library's websocket call_api in place and every later call failed
    assert not any("Missing required parameter" in (e or "") for e in out["forward_errors"].values()), out
    gone = kube.get_raycluster(kube_connect.connect_api(), kube.RayClusterRef(NAME, "ray-train")) is None
    assert gone and f"RayCluster ray-train/{NAME} deleted" in out["said"][-1], out
