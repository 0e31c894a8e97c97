"""In the kernel: the EFA/GPU checklist of ``%raycluster doctor`` on Kubernetes.

:func:`evaluate` is pure (RayCluster, pods, nodes, DaemonSets, DRA ResourceSlices as API dicts -> one check per
function below); :func:`kube_checks` reads them.
What each check protects against is the sample's silent failure: without the EFA request, the device plugin or the
four variables, NCCL falls back to TCP sockets at half the cross-node speed and says nothing.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .._checks import Check

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


@dataclass(frozen=True)
class _Facts:
    """What every check reads: the API objects, and what follows from them once."""

    rc: Mapping[str, Any]
    pods: Sequence[Mapping[str, Any]]
    nodes: Sequence[Mapping[str, Any]] | None  # None: this identity may not list nodes
    daemonsets: Sequence[Mapping[str, Any]] | None
    resource_slices: Sequence[Mapping[str, Any]] | None
    values: Mapping[str, str]

    @property
    def efa_wanted(self) -> bool:
        return self.values.get("EFA_PER_NODE", "0") not in ("", "0")

    @property
    def itype(self) -> str:
        return self.values.get("GPU_NODE_TYPE", "?")

    @property
    def worker_nodes(self) -> set[str]:
        """Nodes a worker pod is placed on."""
        return {
            p.get("spec", {}).get("nodeName")
            for p in self.pods
            if p["metadata"].get("labels", {}).get("ray.io/node-type") == "worker"
        } - {None}

    @property
    def gpu_nodes(self) -> list[Mapping[str, Any]]:
        """The nodes running workers, else those of the GPU instance type (before any worker is placed)."""
        nodes = self.nodes or []
        placed = self.worker_nodes
        return [n for n in nodes if n["metadata"]["name"] in placed] or [
            n for n in nodes if n["metadata"].get("labels", {}).get("node.kubernetes.io/instance-type") == self.itype
        ]


def _allocatable(node: Mapping[str, Any], resource: str) -> int:
    try:
        return int(str(((node.get("status") or {}).get("allocatable") or {}).get(resource, "0")) or 0)
    except ValueError:
        return 0


def _efa_requested(f: _Facts) -> Check:
    name = "EFA requested by worker pods"
    containers = _worker_containers(f.rc)
    efa_req = [
        str(((c.get("resources") or {}).get("limits") or {}).get("vpc.amazonaws.com/efa", "0")) for c in containers
    ]
    if not f.efa_wanted:
        return Check(name, "n/a", f"{f.itype} has no EFA: NCCL uses TCP between nodes")
    if containers and all(r not in ("0", "") for r in efa_req):
        return Check(name, "ok", f"vpc.amazonaws.com/efa: {', '.join(efa_req)} per pod")
    return Check(
        name,
        "fail",
        "a worker container has no vpc.amazonaws.com/efa limit: the pod gets no EFA device and NCCL falls back to "
        "sockets",
        f"set EFA_PER_NODE (the {f.itype} preset gives it) and `%raycluster up --recreate`",
    )


def _nodes_advertise(f: _Facts) -> Check:
    name = "GPU nodes advertise EFA and GPUs"
    if f.nodes is None:
        return Check(
            name,
            "warn",
            "this identity may not list nodes",
            "ask an admin to run %raycluster doctor, or grant `list nodes`",
        )
    gpu_nodes = f.gpu_nodes
    want_gpu = int(f.values.get("GPUS_PER_NODE", "0") or 0)
    if not gpu_nodes:
        return Check(
            name,
            "n/a",
            f"no node of type {f.itype} yet (a node pool that scales from zero adds one for a pending worker pod)",
            "`%raycluster status` shows pending pods and why",
        )
    bad = [
        f"{n['metadata']['name']}: {_allocatable(n, 'nvidia.com/gpu')} GPU, "
        f"{_allocatable(n, 'vpc.amazonaws.com/efa')} EFA allocatable"
        for n in gpu_nodes
        if _allocatable(n, "nvidia.com/gpu") < want_gpu
        or (f.efa_wanted and _allocatable(n, "vpc.amazonaws.com/efa") < 1)
    ]
    if bad:
        return Check(
            name,
            "fail",
            "; ".join(bad),
            "the device plugins advertise them: see the device plugin check; for EFA the node group must be created "
            "with EFA interfaces (eksctl `efaEnabled: true`, Karpenter: an EC2NodeClass with EFA interfaces)",
        )
    return Check(name, "ok", f"{len(gpu_nodes)} node(s) with ≥ {want_gpu} GPU" + (" and EFA" if f.efa_wanted else ""))


def _dra_drivers(f: _Facts, word: str) -> list[str]:
    """DRA drivers publishing devices on the GPU nodes whose name says ``word`` (e.g. efa, gpu)."""
    names = {n["metadata"]["name"] for n in f.gpu_nodes}
    return sorted(
        {
            str(sl.get("spec", {}).get("driver", ""))
            for sl in f.resource_slices or []
            if word in str(sl.get("spec", {}).get("driver", "")).lower()
            and (not names or sl.get("spec", {}).get("nodeName") in names or sl.get("spec", {}).get("allNodes"))
        }
    )


def _install_hint(label: str) -> str:
    if label.startswith("NVIDIA"):
        return (
            "kubectl apply -f https://raw.githubusercontent.com/NVIDIA/k8s-device-plugin/v0.17.0/deployments/static/"
            "nvidia-device-plugin.yml"
        )
    return "helm install aws-efa-k8s-device-plugin eks/aws-efa-k8s-device-plugin -n kube-system"


def _device_plugins(f: _Facts) -> Check:
    """Whoever runs a plugin (a DaemonSet, EKS Auto Mode's node, Bottlerocket's host), the GPU nodes' allocatable says
    whether it works; DaemonSets and DRA ResourceSlices explain why not, or stand in before a GPU node exists."""
    name = "EFA and NVIDIA device plugins ready"
    wanted = {"NVIDIA device plugin": "nvidia.com/gpu"}
    if f.efa_wanted:
        wanted["EFA device plugin"] = "vpc.amazonaws.com/efa"
    found = {
        label: next((d for d in f.daemonsets or [] if any(s in d["metadata"]["name"] for s in _PLUGINS[label])), None)
        for label in wanted
    }

    def state(d: Mapping[str, Any]) -> tuple[int, int, str]:
        st = d.get("status") or {}
        ready, desired = int(st.get("numberReady") or 0), int(st.get("desiredNumberScheduled") or 0)
        return ready, desired, f"{d['metadata']['namespace']}/{d['metadata']['name']} {ready}/{desired} ready"

    shown = [state(d)[2] for d in found.values() if d is not None]
    gpu_nodes = f.gpu_nodes
    if f.nodes is not None and gpu_nodes:
        silent = [label for label, res in wanted.items() if not any(_allocatable(n, res) > 0 for n in gpu_nodes)]
        if not silent:
            by = "; ".join(shown) or "no plugin DaemonSet: the nodes run them (EKS Auto Mode, Bottlerocket)"
            return Check(name, "ok", f"{' and '.join(wanted.values())} advertised by {len(gpu_nodes)} node(s) ({by})")
    elif f.daemonsets is None:
        return Check(
            name,
            "warn",
            "this identity may list neither the GPU nodes nor DaemonSets",
            "ask an admin: kubectl describe nodes | grep -A8 Allocatable",
        )
    else:  # no GPU node to ask yet (or nodes unreadable): the DaemonSets are all there is to read
        # desired 0 is a pool scaled to zero when nodes are readable; with nodes unreadable it may be a mismatch
        silent = [
            label
            for label, d in found.items()
            if d is None or state(d)[0] < state(d)[1] or (state(d)[1] == 0 and f.nodes is None)
        ]
        if not silent:
            return Check(name, "ok", "; ".join(shown))
    problems, fix = [], []
    efa_dra = _dra_drivers(f, "efa") or _dra_drivers(f, "dra.net")
    for label in silent:
        d = found[label]
        if label.startswith("EFA") and efa_dra:
            problems.append(
                f"EFA is offered through DRA ({', '.join(efa_dra)} ResourceSlices), so vpc.amazonaws.com/efa is never "
                "advertised and the workers' EFA request cannot be met"
            )
            fix.append(
                "run the EFA device plugin on the GPU nodes (" + _install_hint(label) + "), or claim EFA through a "
                "ResourceClaim in a template of your own (--template)"
            )
        elif d is None:
            problems.append(f"{label} missing")
            fix.append(_install_hint(label))
        else:
            ready, desired, _ = state(d)
            on_nodes = f.nodes is not None and gpu_nodes
            problems.append(
                f"{label}: the GPU nodes advertise no {wanted[label]}"
                if on_nodes
                else f"{label} {ready}/{desired} ready"
            )
            fix.append(f"kubectl -n {d['metadata']['namespace']} describe ds {d['metadata']['name']}")
    return Check(name, "fail", "; ".join(problems + shown), "; ".join(dict.fromkeys(fix)))


def _one_zone(f: _Facts) -> Check:
    name = "GPU nodes in one availability zone"
    placed = f.worker_nodes
    if f.nodes is None or not placed:
        return Check(
            name, "n/a", "no worker pods placed yet" if f.nodes is not None else "this identity may not list nodes"
        )
    zones = sorted(
        {
            n["metadata"].get("labels", {}).get("topology.kubernetes.io/zone", "?")
            for n in f.nodes
            if n["metadata"]["name"] in placed
        }
    )
    if len(zones) == 1:
        return Check(name, "ok", zones[0])
    return Check(
        name, "fail", ", ".join(zones), "EFA does not cross availability zones: pin the GPU node group to one subnet/AZ"
    )


def _security_group(f: _Facts) -> Check:
    """What raynb cannot see from Kubernetes, said with how to check it."""
    name = "EFA security group admits itself"
    if not f.efa_wanted:
        return Check(name, "n/a", f"{f.itype} has no EFA")
    return Check(
        name,
        "n/a",
        "not visible from Kubernetes: EFA needs the nodes' security group to allow all traffic to and from itself; "
        "without that NCCL logs `Selected provider is efa` and then hangs (`Unreachable remote`)",
        "aws ec2 describe-security-groups --group-ids <the GPU nodes' group> and look for an inbound and an "
        "outbound rule whose source/destination is that same group",
    )


def _efa_variables(f: _Facts) -> Check:
    name = "NCCL/EFA variables on workers"
    if not f.efa_wanted:
        return Check(name, "n/a", f"{f.itype} has no EFA")
    problems = []
    for c in _worker_containers(f.rc):
        env = {e["name"]: e.get("value") for e in c.get("env") or []}
        problems += [f"{k}={env.get(k)!s} (want {v})" for k, v in EFA_VARIABLES.items() if env.get(k) != v]
    if problems:
        return Check(
            name,
            "fail",
            "; ".join(sorted(set(problems))),
            "use manifests/raycluster.yaml (it sets all four) or add them to the worker env",
        )
    return Check(name, "ok", ", ".join(f"{k}={v}" for k, v in EFA_VARIABLES.items()))


def _dev_shm(f: _Facts) -> Check:
    name = "/dev/shm on workers"
    shm_ok = []
    for t in _worker_templates(f.rc):
        mem_vols = {v["name"] for v in t.get("volumes") or [] if (v.get("emptyDir") or {}).get("medium") == "Memory"}
        shm_ok.append(
            any(
                m.get("mountPath") == "/dev/shm" and m.get("name") in mem_vols
                for c in t["containers"]
                for m in c.get("volumeMounts") or []
            )
        )
    if shm_ok and all(shm_ok):
        return Check(name, "ok", "memory-backed emptyDir")
    return Check(
        name,
        "fail",
        "no memory-backed /dev/shm: the container runtime's default is 64 MiB, too small for NCCL SHM and Ray's "
        "object store",
        "mount an emptyDir {medium: Memory} at /dev/shm (SHM_SIZE)",
    )


def _versions(f: _Facts, notebook_ray: str, notebook_python: str) -> Check:
    """The image's versions, as the RayCluster declares them, against the kernel's."""
    image_ray = f.rc.get("spec", {}).get("rayVersion", "")
    image_py = f.rc.get("metadata", {}).get("annotations", {}).get("raynb.io/python-version", "") or f.values.get(
        "PYTHON_VERSION", ""
    )
    same = image_ray == notebook_ray and (not image_py or image_py == notebook_python)
    detail = f"notebook Ray {notebook_ray} / Python {notebook_python}; image Ray {image_ray} / Python {image_py or '?'}"
    if same:
        return Check("notebook vs image versions", "ok", detail)
    return Check(
        "notebook vs image versions",
        "fail",
        detail,
        f'a Python {image_py} kernel with `pip install "ray[client,train,default]=={image_ray}"` (or environment.yml)',
    )


def evaluate(
    rc: Mapping[str, Any],
    pods: Sequence[Mapping[str, Any]],
    nodes: Sequence[Mapping[str, Any]] | None,
    daemonsets: Sequence[Mapping[str, Any]] | None,
    values: Mapping[str, str],
    *,
    notebook_ray: str,
    notebook_python: str,
    resource_slices: Sequence[Mapping[str, Any]] | None = None,
) -> list[Check]:
    """The checklist. ``nodes``/``daemonsets``/``resource_slices`` None: not readable with this identity."""
    f = _Facts(rc, pods, nodes, daemonsets, resource_slices, values)
    return [
        _efa_requested(f),
        _nodes_advertise(f),
        _device_plugins(f),
        _one_zone(f),
        _security_group(f),
        _efa_variables(f),
        _dev_shm(f),
        _versions(f, notebook_ray, notebook_python),
    ]


def kube_checks(target: Any, ref: Any, values: Mapping[str, str]) -> list[Check]:
    """Read what :func:`evaluate` needs through the API (cluster-scoped lists may be refused: then 'warn')."""
    from . import kube_api as kube

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
    slices = kube.resource_slices(target)
    import ray

    return evaluate(
        rc,
        kube.pods(target, ref),
        nodes,
        ds,
        values,
        notebook_ray=ray.__version__,
        notebook_python=f"{sys.version_info[0]}.{sys.version_info[1]}",
        resource_slices=slices,
    )
