"""The whole Kubernetes path in a real Jupyter kernel: `%raycluster up --values` → KubeRay → port-forward through the
API server's pods/portforward → kwok's ClusterPortForward → a real `ray start --head` on 127.0.0.1 → Ray Client →
`%%raytrain`. Also `logs` (kwok's ClusterLogs serves the real head's log file through pods/log), `doctor`, `status`,
the tunnels being re-opened after they drop, a run refused before its workers start when its checkpoints would be
stranded on one node, a run that goes on while the notebook's connection is cut past Ray Client's reconnect grace, and
`down`.

The cut is a real network cut between the notebook and the cluster (a laptop that sleeps, Wi-Fi that drops): the
kernel reaches the API server through a TCP relay here, and the relay drops every connection and then swallows new
ones (accepted, never answered) for the cut, so the port-forward's tunnels die and Ray Client's reconnects hang
until they give up. The cluster itself (API server, kwok's nodes, the head) stays healthy, as it would on EKS. The
grace is raynb's ``client_reconnect_grace_s`` (30 s by default, 10 s in the tests, so the cut is 20 s, not a minute).

What is modelled: the head "pod" is the local Ray head, so the versions match by construction and the kernel takes Ray
Client (the test sets PYTHON_VERSION to this Python; test_errors.py checks that a mismatch under `--via client` is
refused before anything is created, test_jobs_on_kubernetes.py that under auto it goes through Ray Jobs); the GPU
nodes are kwok's. The values file's STORAGE_PATH and STRICT_EFA reach a real run: Ray Train writes under the storage
path, and the workers get NCCL_NET=Libfabric."""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import HERE_PY, NAME, VALUES, mount_head_token, sets

from raynb._cluster import kube_api as kube
from raynb._cluster import kube_connect
from raynb._shared import run_notice
from tests.notebook.kernels import errors, kernel, run, text

GRACE_S = float(os.environ.get("RAYNB_CLIENT_RECONNECT_GRACE_S", "30"))
BLOCK_S = GRACE_S + 10  # past the grace: the kernel's Ray Client session is gone, the run must not be
STEPS = int(BLOCK_S) + 20  # one a second: the run goes on through the whole cut and ends after it
CUT_CELL = (
    "%%raytrain --workers 2 --background --name outlives-tunnel --out bg\nimport time, raynb\n"
    f"for step in range(1, {STEPS + 1}):\n    time.sleep(1.0)\n    raynb.report(loss=1.0 / step)\n"
)


def _printed(msgs: list[dict]) -> str:
    return "".join(m["content"]["text"] for m in msgs if m["msg_type"] == "stream")


class Relay:
    """127.0.0.1:port -> target, byte for byte; ``cut()`` drops every connection and holds new ones unanswered."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target, self.cut_off, self._conns = target, False, []  # type: ignore[var-annotated]
        self._lsock = socket.create_server(("127.0.0.1", 0))
        self.port = self._lsock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            c, _ = self._lsock.accept()
            self._conns.append(c)
            if not self.cut_off:
                threading.Thread(target=self._pump, args=(c,), daemon=True).start()

    def _pump(self, c: socket.socket) -> None:
        up = socket.create_connection(self.target)
        self._conns.append(up)
        sel = selectors.DefaultSelector()
        sel.register(c, selectors.EVENT_READ, up)
        sel.register(up, selectors.EVENT_READ, c)
        try:
            while not self.cut_off:
                for key, _ in sel.select(timeout=0.5):
                    data = key.fileobj.recv(65536)  # type: ignore[union-attr]
                    if not data:
                        return
                    key.data.sendall(data)
        except OSError:
            return
        finally:
            for s in (c, up):
                s.close()

    def cut(self) -> None:
        self.cut_off = True
        for s in self._conns:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def restore(self) -> None:
        self.cut_off = False


@pytest.fixture
def relayed_kubeconfig(stack, tmp_path: Path) -> Iterator[tuple[Relay, Path]]:
    host, port = stack.server.removeprefix("https://").rsplit(":", 1)
    relay = Relay((host, int(port)))
    cfg = tmp_path / "kubeconfig"
    cfg.write_text(Path(stack.kubeconfig).read_text().replace(stack.server, f"https://{host}:{relay.port}"))
    yield relay, cfg
    relay.restore()


def _notice(stack) -> tuple[str | None, run_notice.Notice | None]:
    """What the RayCluster says of its runs (the label, the annotation), read as kubectl would."""
    from kubernetes import client

    rc = client.CustomObjectsApi(stack.api()).get_namespaced_custom_object(
        "ray.io", "v1", "ray-train", "rayclusters", NAME
    )
    meta = rc["metadata"]
    return (meta.get("labels") or {}).get(run_notice.LABEL), run_notice.read(meta.get("annotations"))


def _idle_clusters(stack) -> list[str]:
    """``kubectl get rayclusters -l '!raynb.io/run'``: the RayClusters with no run going on."""
    from kubernetes import client

    found = client.CustomObjectsApi(stack.api()).list_namespaced_custom_object(
        "ray.io", "v1", "ray-train", "rayclusters", label_selector=f"!{run_notice.LABEL}"
    )
    return [i["metadata"]["name"] for i in found["items"]]


def test_raytrain_runs_through_the_kubernetes_path(
    stack, head_behind_pods, head_account, clean, shared_volume, relayed_kubeconfig: tuple[Relay, Path]
) -> None:
    _head, log = head_behind_pods
    relay, cfg = relayed_kubeconfig
    storage = Path(shared_volume["STORAGE_PATH"])  # on the claim every pod mounts
    up = f"%raycluster up --values {VALUES} --set PYTHON_VERSION={HERE_PY} {sets(shared_volume)} --set STRICT_EFA=true"
    with kernel(cwd=str(log.parent), env={"KUBECONFIG": str(cfg)}) as (_km, kc):
        assert not errors(run(kc, "%load_ext raynb"))
        out = run(kc, up + " --timeout 60", timeout=180)
        assert not errors(out), text(out)
        t = text(out)
        assert "ready after" in t and "through the Kubernetes API" in t and "connected to ray://127.0.0.1:" in t
        # the head pod runs as the account `up` made for it (head-identity.yaml); the kubelet mounts its token
        assert mount_head_token(stack, head_account) == NAME

        cell = (
            "%%raytrain --workers 2 --name through-k8s --out r\nimport os, raynb\n"
            "for step in range(30):\n    raynb.report(loss=1.0 / (step + 1), net=os.environ.get('NCCL_NET', '-'))\n"
        )
        out = run(kc, cell, timeout=300)
        assert not errors(out), text(out)
        assert "succeeded" in text(out)
        out = run(
            kc,
            "import json; df = r.metrics; print(json.dumps({'status': r.status, 'step': r.step, 'n': len(df), "
            "'steps': sorted(set(df['step'])), 'ranks': sorted(set(df['rank'])), 'nets': sorted(set(df['net'])), "
            "'first': float(df[df.step == 1]['loss'].mean()), 'last': float(df[df.step == 30]['loss'].mean()), "
            "'strict': r.settings.strict_efa, 'storage': r.settings.storage_path, 'path': r.result['path']}))",
        )
        got = json.loads(text(out).strip().splitlines()[-1])
        assert (got["status"], got["step"], got["n"], got["ranks"]) == ("succeeded", 30, 60, [0, 1])
        assert got["steps"] == list(range(1, 31)) and got["last"] < got["first"] / 10  # every step, from both ranks
        assert got["strict"] is True and got["nets"] == ["Libfabric"]  # STRICT_EFA from the values file
        assert got["storage"] == str(storage) and got["path"].startswith(str(storage / "through-k8s"))
        assert (storage / "through-k8s").is_dir()  # Ray Train really wrote there

        out = run(
            kc,
            "import raynb, json; c = raynb.current(); "
            "print(json.dumps({'kind': c.kind, 'address': c.address, "
            "'tunnels': {p: f.tunnels_opened for p, f in c.backend.forwards.items()}}))",
        )
        info = json.loads(text(out).strip().splitlines()[-1])
        assert info["kind"] == "kubernetes" and info["address"].startswith("ray://127.0.0.1:")
        assert info["tunnels"]["10001"] >= 1

        # every tunnel dropped: Ray Client reconnects and the forward opens new tunnels
        out = run(
            kc,
            "import ray\n[f.reset() for f in c.backend.forwards.values()]\n"
            "print('after reset', ray.get(ray.put(41)) + 1, c.backend.forwards[10001].tunnels_opened)",
            timeout=120,
        )
        assert not errors(out), text(out)
        after = text(out).split("after reset")[-1].split()
        assert after[0] == "42" and int(after[1]) > info["tunnels"]["10001"]

        out = run(kc, "%raycluster status")
        t = text(out)
        assert f"RayCluster ray-train/{NAME}" in t and f"{NAME}-head" in t and "g6.12xlarge" in t

        out = run(kc, "%raycluster list --namespace ray-train")
        assert NAME in text(out) and "workers 2/2 ready" in text(out), text(out)
        assert "COST" in text(out) and "≈ $9.20/h" in text(out), text(out)  # 2 × g6.12xlarge at the presets' price

        out = run(kc, "%raycluster logs head --tail 5")
        assert not errors(out), text(out)
        assert log.read_text().splitlines()[-1].split(" F ", 1)[1][:40] in text(out)
        assert f"==> ray-train/{NAME}-head-" in text(out)
        out = run(kc, "%raycluster logs worker-1 --tail 3")
        assert not errors(out), text(out)
        t = text(out)
        assert "ray-worker line 19" in t and "ray-worker line 16" not in t and "(last 3 lines)" in t
        pod = t.split("==> ray-train/", 1)[1].split()[0]
        assert "worker" in pod
        out = run(kc, f"%raycluster logs {pod} --tail 1")
        assert not errors(out), text(out)
        assert f"==> ray-train/{pod}" in text(out) and "ray-worker line 19" in text(out)

        # %config reaches list and down (no --namespace given)
        out = run(kc, "%config RayNB.kube_namespace = 'elsewhere'\n%raycluster list")
        assert NAME not in text(out), text(out)
        out = run(kc, "%config RayNB.kube_namespace = 'ray-train'\n%raycluster list")
        assert NAME in text(out), text(out)

        out = run(kc, "d = raynb.doctor(); print({x.name: x.state for x in d.checks})")
        states = eval(text(out).strip().splitlines()[-1])
        assert states["notebook vs image versions"] == "ok" and states["Ray and Python versions"] == "ok"
        assert states["EFA requested by worker pods"] == "ok"
        # kwok's GPU nodes advertise nvidia.com/gpu and EFA with no plugin DaemonSet (as EKS Auto Mode's do): ok
        assert states["EFA and NVIDIA device plugins ready"] == "ok"

        # a head and two GPU nodes, and a run whose storage is one node's own disk: refused before workers start
        run(kc, "%config RayNB.storage_path = '/tmp/raynb-one-node-only'")
        refused = errors(run(kc, "%%raytrain --workers 2\nimport raynb\nraynb.report(loss=1.0)", timeout=120))
        assert refused and "3 nodes" in refused[0]["evalue"], refused
        assert "STORAGE_PATH=s3://" in "".join(refused[0]["traceback"])
        run(kc, "%config RayNB.storage_path = None")  # back to the values file's

        # the notebook's connection cut past the grace while a background run goes on
        out = run(kc, CUT_CELL, timeout=300)
        assert not errors(out), text(out)
        deadline = time.monotonic() + 120
        while int(_printed(run(kc, "print(bg.step)")).split()[-1]) < 3 and time.monotonic() < deadline:
            time.sleep(0.5)  # a condition polled, not a deliberate wait (tests/BUDGET.md: run 24)
        relay.cut()
        seen: list[tuple[str | None, run_notice.Notice | None]] = []
        try:  # no notebook reaches the cluster now: what the RayCluster says of the run comes from its head alone
            end = time.monotonic() + BLOCK_S
            while time.monotonic() < end:
                seen.append(_notice(stack))
                time.sleep(1.0)
        finally:
            relay.restore()
        running = [(label, n.running[0]) for label, n in seen if n and n.running]
        assert running and all(label == "outlives-tunnel" for label, _ in running), seen
        assert {r["name"] for _, r in running} == {"outlives-tunnel"} and all("@" in r["user"] for _, r in running)
        # its step kept moving on the RayCluster while nobody followed it (the head writes it every 10 s)
        steps = [r["step"] or 0 for _, r in running]
        assert steps == sorted(steps) and steps[-1] > steps[0] and steps[-1] >= 3, running
        assert NAME not in _idle_clusters(stack)
        # The kernel may have lost its Ray Client session (past the grace): connect again, as a user would.
        out = run(kc, "print('status during the cut:', bg.status)", timeout=120)
        assert "status during the cut:" in text(out), text(out)
        out = run(kc, up + " --timeout 120", timeout=300)
        assert not errors(out), text(out)
        out = run(kc, "%raytrain attach outlives-tunnel --out a --wait", timeout=400)
        assert not errors(out), text(out)
        out = run(
            kc,
            "df = a.metrics\nimport json\nprint(json.dumps({'status': a.status, 'steps': sorted(set(df.step)), "
            "'ranks': sorted(set(df['rank'])), 'n': len(df)}))",
            timeout=120,
        )
        got = json.loads(_printed(out).strip().splitlines()[-1])
        # every step, from both ranks, including the ones reported while no notebook could reach the cluster
        assert got == {"status": "succeeded", "steps": list(range(1, STEPS + 1)), "ranks": [0, 1], "n": 2 * STEPS}, got
        # the run ended: the RayCluster says it is idle, and which run ended last
        deadline = time.monotonic() + 30
        while (notice := _notice(stack))[0] is not None and time.monotonic() < deadline:
            time.sleep(0.5)
        label, n = notice
        assert label is None and n is not None and not n.running, notice
        assert n.last and (n.last["name"], n.last["status"], n.last["step"]) == ("outlives-tunnel", "succeeded", STEPS)
        assert NAME in _idle_clusters(stack)
        out = run(kc, "%raycluster list --namespace ray-train")
        assert "RUNS" in text(out) and "(last: outlives-tunnel succeeded)" in text(out), text(out)
        (head_account / "token").unlink()  # the head pod goes with `down`

        # down NAME from a kernel not connected to it, in the namespace %config names
        out = run(kc, "raynb.current().disconnect()\n%config RayNB.kube_namespace = 'elsewhere'")
        assert not errors(out), text(out)
        out = run(kc, f"%raycluster down {NAME}", timeout=120)
        assert f"no RayCluster elsewhere/{NAME}: nothing to delete" in text(out), text(out)
        out = run(kc, f"%config RayNB.kube_namespace = 'ray-train'\n%raycluster down {NAME}", timeout=120)
        assert not errors(out), text(out)
        assert "deleted" in text(out)
    target = kube_connect.connect_api()
    assert kube.get_raycluster(target, kube.RayClusterRef(NAME, "ray-train")) is None
