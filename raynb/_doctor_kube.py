"""The EFA/GPU checklist of ``%raycluster doctor`` on Kubernetes.

:func:`evaluate` is pure (RayCluster, pods, nodes, DaemonSets as API dicts -> checks); :func:`kube_checks` reads them.
What each check protects against is the sample's silent failure: without the EFA request, the device plugin or the
four variables, NCCL falls back to TCP sockets at half the cross-node speed and says nothing.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import Any

from ._checks import Check

__all__ = ["evaluate", "kube_checks", "EFA_VARIABLES"]

#: The four variables of the AWS Ray Train DLC sample (manifests/raycluster.yaml sets them) and the values
#: that turn EFA on.
EFA_VARIABLES = {"NCCL_DEBUG": "INFO", "NCCL_SOCKET_IFNAME": "eth0", "FI_PROVIDER": "efa", "NCCL_NET_PLUGIN": "ofi"}
_PLUGINS = {
    "NVIDIA device plugin": ("nvidia-device-plugin",),
    "EFA device plugin": ("efa-k8s-device-plugin", "efa-device-plugin"),
}


def _worker_containers(rc: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [c for g in rc.get("spec", {}).get("workerGroupSpecs", []) for c in g["template"]["spec"]["containers"]]


def _worker_templates(rc: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [g["template"]["spec"] for g in rc.get("spec", {}).get("workerGroupSpecs", [])]


def evaluate(
    rc: Mapping[str, Any],
    pods: Sequence[Mapping[str, Any]],
    nodes: Sequence[Mapping[str, Any]] | None,
    daemonsets: Sequence[Mapping[str, Any]] | None,
    values: Mapping[str, str],
    *,
    notebook_ray: str,
    notebook_python: str,
) -> list[Check]:
    """The checklist. ``nodes``/``daemonsets`` None: not readable with this identity (cluster-scoped lists)."""
    out: list[Check] = []
    efa_wanted = values.get("EFA_PER_NODE", "0") not in ("", "0")
    itype = values.get("GPU_NODE_TYPE", "?")
    containers = _worker_containers(rc)
    # 1. EFA requested by the worker pods
    efa_req = [
        str(((c.get("resources") or {}).get("limits") or {}).get("vpc.amazonaws.com/efa", "0")) for c in containers
    ]
    if not efa_wanted:
        out.append(Check("EFA requested by worker pods", "n/a", f"{itype} has no EFA: NCCL uses TCP between nodes"))
    elif all(r not in ("0", "") for r in efa_req) and containers:
        out.append(Check("EFA requested by worker pods", "ok", f"vpc.amazonaws.com/efa: {', '.join(efa_req)} per pod"))
    else:
        out.append(
            Check(
                "EFA requested by worker pods",
                "fail",
                "a worker container has no vpc.amazonaws.com/efa "
                "limit: the pod gets no EFA device and NCCL falls back to sockets",
                f"set EFA_PER_NODE (the {itype} preset gives it) and `%raycluster up --recreate`",
            )
        )
    # 2. GPU nodes advertise GPUs and EFA
    worker_nodes = {
        p.get("spec", {}).get("nodeName")
        for p in pods
        if p["metadata"].get("labels", {}).get("ray.io/node-type") == "worker"
    } - {None}
    if nodes is None:
        out.append(
            Check(
                "GPU nodes advertise EFA and GPUs",
                "warn",
                "this identity may not list nodes",
                "ask an admin to run %raycluster doctor, or grant `list nodes`",
            )
        )
    else:
        gpu_nodes = [n for n in nodes if n["metadata"]["name"] in worker_nodes] or [
            n for n in nodes if n["metadata"].get("labels", {}).get("node.kubernetes.io/instance-type") == itype
        ]
        want_gpu = values.get("GPUS_PER_NODE", "0")
        bad = []
        for n in gpu_nodes:
            alloc = (n.get("status") or {}).get("allocatable") or {}
            gpus, efa = str(alloc.get("nvidia.com/gpu", "0")), str(alloc.get("vpc.amazonaws.com/efa", "0"))
            if int(gpus or 0) < int(want_gpu or 0) or (efa_wanted and efa in ("0", "")):
                bad.append(f"{n['metadata']['name']}: {gpus} GPU, {efa} EFA allocatable")
        if not gpu_nodes:
            out.append(
                Check(
                    "GPU nodes advertise EFA and GPUs",
                    "fail",
                    f"no node of type {itype} (or running a worker) found",
                    "scale the GPU node group up; `%raycluster status` shows pending pods",
                )
            )
        elif bad:
            out.append(
                Check(
                    "GPU nodes advertise EFA and GPUs",
                    "fail",
                    "; ".join(bad),
                    "the device plugins advertise them: see the device plugin check; for EFA the node group "
                    "must be created with EFA interfaces (eksctl `efaEnabled: true`)",
                )
            )
        else:
            out.append(
                Check(
                    "GPU nodes advertise EFA and GPUs",
                    "ok",
                    f"{len(gpu_nodes)} node(s) with ≥ {want_gpu} GPU" + (" and EFA" if efa_wanted else ""),
                )
            )
    # 3. device plugins
    if daemonsets is None:
        out.append(
            Check(
                "EFA and NVIDIA device plugins ready",
                "warn",
                "this identity may not list DaemonSets",
                "ask an admin: kubectl get ds -A | grep device-plugin",
            )
        )
    else:
        missing, notready, seen = [], [], []
        for label, needles in _PLUGINS.items():
            if label.startswith("EFA") and not efa_wanted:
                continue
            ds = [d for d in daemonsets if any(s in d["metadata"]["name"] for s in needles)]
            if not ds:
                missing.append(label)
                continue
            st = ds[0].get("status") or {}
            desired, ready = int(st.get("desiredNumberScheduled") or 0), int(st.get("numberReady") or 0)
            seen.append(f"{ds[0]['metadata']['namespace']}/{ds[0]['metadata']['name']} {ready}/{desired} ready")
            if desired == 0 or ready < desired:
                notready.append(f"{label} {ready}/{desired} ready")
        if missing or notready:
            fix = []
            if "NVIDIA device plugin" in missing:
                fix.append(
                    "kubectl apply -f https://raw.githubusercontent.com/NVIDIA/k8s-device-plugin/v0.17.0/"
                    "deployments/static/nvidia-device-plugin.yml"
                )
            if "EFA device plugin" in missing:
                fix.append("helm install aws-efa-k8s-device-plugin eks/aws-efa-k8s-device-plugin -n kube-system")
            if notready:
                fix.append("kubectl -n kube-system describe ds <plugin> (pods not ready on some nodes)")
            out.append(
                Check(
                    "EFA and NVIDIA device plugins ready",
                    "fail",
                    "; ".join([f"{m} missing" for m in missing] + notready + seen),
                    "; ".join(fix),
                )
            )
        else:
            out.append(Check("EFA and NVIDIA device plugins ready", "ok", "; ".join(seen)))
    # 4. one availability zone
    if nodes is not None and worker_nodes:
        zones = sorted(
            {
                n["metadata"].get("labels", {}).get("topology.kubernetes.io/zone", "?")
                for n in nodes
                if n["metadata"]["name"] in worker_nodes
            }
        )
        out.append(
            Check(
                "GPU nodes in one availability zone",
                "ok" if len(zones) == 1 else "fail",
                ", ".join(zones),
                ""
                if len(zones) == 1
                else "EFA does not cross availability zones: pin the GPU node group to one subnet/AZ",
            )
        )
    else:
        out.append(
            Check(
                "GPU nodes in one availability zone",
                "n/a",
                "no worker pods placed yet" if nodes is not None else "this identity may not list nodes",
            )
        )
    # 5. the four variables
    if not efa_wanted:
        out.append(Check("NCCL/EFA variables on workers", "n/a", f"{itype} has no EFA"))
    else:
        problems = []
        for c in containers:
            env = {e["name"]: e.get("value") for e in c.get("env") or []}
            for k, v in EFA_VARIABLES.items():
                if env.get(k) != v:
                    problems.append(f"{k}={env.get(k)!s} (want {v})")
        out.append(
            Check(
                "NCCL/EFA variables on workers",
                "fail" if problems else "ok",
                "; ".join(sorted(set(problems))) or ", ".join(f"{k}={v}" for k, v in EFA_VARIABLES.items()),
                "use manifests/raycluster.yaml (it sets all four) or add them to the worker env" if problems else "",
            )
        )
    # 6. /dev/shm
    shm_ok = []
    for t in _worker_templates(rc):
        mem_vols = {v["name"] for v in t.get("volumes") or [] if (v.get("emptyDir") or {}).get("medium") == "Memory"}
        shm_ok.append(
            any(
                m.get("mountPath") == "/dev/shm" and m.get("name") in mem_vols
                for c in t["containers"]
                for m in c.get("volumeMounts") or []
            )
        )
    out.append(
        Check(
            "/dev/shm on workers",
            "ok" if shm_ok and all(shm_ok) else "fail",
            "memory-backed emptyDir"
            if shm_ok and all(shm_ok)
            else "no memory-backed /dev/shm: the container "
            "runtime's default is 64 MiB, too small for NCCL SHM and Ray's object store",
            "" if shm_ok and all(shm_ok) else "mount an emptyDir {medium: Memory} at /dev/shm (SHM_SIZE)",
        )
    )
    # 7. versions: the image's, as the RayCluster declares them
    image_ray = rc.get("spec", {}).get("rayVersion", "")
    image_py = rc.get("metadata", {}).get("annotations", {}).get("raynb.io/python-version", "") or values.get(
        "PYTHON_VERSION", ""
    )
    same = image_ray == notebook_ray and (not image_py or image_py == notebook_python)
    out.append(
        Check(
            "notebook vs image versions",
            "ok" if same else "fail",
            f"notebook Ray {notebook_ray} / Python {notebook_python}; image Ray {image_ray} / Python {image_py or '?'}",
            ""
            if same
            else f'a Python {image_py} kernel with `pip install '
            f'"ray[client,train,default]=={image_ray}"` (or environment.yml)',
        )
    )
    return out


def kube_checks(target: Any, ref: Any, values: Mapping[str, str]) -> list[Check]:
    """Read what :func:`evaluate` needs through the API (cluster-scoped lists may be refused: then 'warn')."""
    from . import _kube_api as kube

    rc = kube.get_raycluster(target, ref)
    if rc is None:
        return [
            Check(
                "RayCluster exists", "fail", f"no RayCluster {ref.namespace}/{ref.name}", "`%raycluster up` creates it"
            )
        ]
    try:
        nodes: list[dict[str, Any]] | None = kube.nodes(target)
    except kube.KubeError:
        nodes = None
    try:
        ds: list[dict[str, Any]] | None = kube.daemonsets(target)
    except kube.KubeError:
        ds = None
    import ray

    return evaluate(
        rc,
        kube.pods(target, ref),
        nodes,
        ds,
        values,
        notebook_ray=ray.__version__,
        notebook_python=f"{sys.version_info[0]}.{sys.version_info[1]}",
    )
