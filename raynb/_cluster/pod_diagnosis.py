"""In the kernel: why a RayCluster's pods are not running yet, in words: pure functions of pod and event dicts (as the
API gives them).

The scheduler's ``PodScheduled=False/Unschedulable`` message and the kubelet's container ``waiting`` reasons say what
is wrong; this module turns them into one line a notebook user can act on, with the values-file knob to turn.
:func:`progress_of` says what is under way instead (a node being provisioned by Karpenter or the Cluster Autoscaler,
an image being pulled, a container starting), from the events those write: a wait that makes progress is not a problem.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Literal

from .kube_state import kube_time

__all__ = ["Diagnosis", "Progress", "diagnose_pod", "diagnose_pods", "is_hopeless", "progress_of"]

#: Image errors that do not heal by waiting (the kubelet retries them forever).
_HOPELESS_IMAGE = re.compile(
    r"not found|manifest unknown|unauthorized|denied|InvalidImageName|repository does not "
    r"exist|no such host",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Diagnosis:
    pod: str
    reason: str  # Unschedulable | ImagePullBackOff | ErrImagePull | CrashLoopBackOff | ...
    message: str  # what Kubernetes said
    hint: str  # what to do

    def line(self) -> str:
        return f"{self.pod}: {self.reason}: {self.message}\n    → {self.hint}"


@dataclass(frozen=True)
class Progress:
    """What is under way for a pod that is not running yet."""

    pod: str
    stage: Literal["provisioning", "pulling", "starting"]
    detail: str  # in words, e.g. "Karpenter is launching a node for it (nodeclaim/gpu-x7k2p)"
    since: datetime | None  # when that stage began, by its event

    def line(self, now: datetime) -> str:
        took = f" for {_duration((now - self.since).total_seconds())}" if self.since else ""
        return f"{self.pod}: {self.detail}{took}"


def _duration(seconds: float) -> str:
    s = max(0, int(seconds))
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


def _when(e: Mapping[str, Any]) -> datetime | None:
    """An event's time: ``eventTime`` (events.k8s.io writers such as Karpenter) or ``lastTimestamp`` (core/v1)."""
    return kube_time(e.get("eventTime") or e.get("lastTimestamp") or e.get("firstTimestamp"))


def _ordered(events: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    epoch = datetime.min.replace(tzinfo=timezone.utc)
    return sorted(events, key=lambda e: _when(e) or epoch)


_IMAGE = re.compile(r'image "([^"]+)"')


def progress_of(pod: Mapping[str, Any], events: Iterable[Mapping[str, Any]] = ()) -> Progress | None:
    """The stage a pending pod is in, from the events the autoscalers and the kubelet write (None: nothing under way
    that raynb can name, or the pod runs)."""
    name = pod.get("metadata", {}).get("name", "?")
    status = pod.get("status") or {}
    evs = _ordered(events)
    if not pod.get("spec", {}).get("nodeName"):
        # a FailedScheduling after the nomination is the scheduler's routine retry while the node boots; a later
        # NotTriggerScaleUp is the autoscaler giving up (diagnose_pod names that)
        growing = [e for e in evs if e.get("reason") in ("Nominated", "TriggeredScaleUp")]
        if not growing or any(e.get("reason") == "NotTriggerScaleUp" for e in evs[evs.index(growing[-1]) :]):
            return None
        last = growing[-1]
        msg = str(last.get("message", ""))
        if last.get("reason") == "Nominated":
            target = re.search(r"(nodeclaim/\S+|node/\S+)", msg)
            who = f" ({target[1].rstrip(',')})" if target else ""
            return Progress(name, "provisioning", f"Karpenter is launching a node for it{who}", _when(last))
        groups = re.search(r"\[(.*)\]", msg)
        return Progress(
            name,
            "provisioning",
            f"the Cluster Autoscaler is adding a node ({groups[1] if groups else msg})",
            _when(last),
        )
    statuses = (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or [])
    waiting = [((cs.get("state") or {}).get("waiting") or {}).get("reason") for cs in statuses]
    if statuses and not any(w in ("ContainerCreating", "PodInitializing") for w in waiting):
        return None  # running, or stuck in a way diagnose_pod names
    pulled = {m[1] for e in evs if e.get("reason") == "Pulled" and (m := _IMAGE.search(str(e.get("message", ""))))}
    pulling = [
        (m[1], e) for e in evs if e.get("reason") == "Pulling" and (m := _IMAGE.search(str(e.get("message", ""))))
    ]
    going = [(image, e) for image, e in pulling if image not in pulled]
    if going:
        image, e = going[-1]
        return Progress(name, "pulling", f"pulling {image} on {pod['spec']['nodeName']}", _when(e))
    return Progress(name, "starting", f"container starting on {pod['spec']['nodeName']}", None)


def _requests(pod: Mapping[str, Any]) -> dict[str, str]:
    out: dict[str, str] = {}
    for c in pod.get("spec", {}).get("containers", []):
        out.update((c.get("resources") or {}).get("requests") or {})
    return out


def _scheduling_hint(message: str, pod: Mapping[str, Any]) -> str:
    req = _requests(pod)
    hints = []
    # "0/3 nodes are available: 1 node(s) didn't match ..., 2 Insufficient nvidia.com/gpu": the first reason that
    # explains the nodes that did match is the one to act on (a full GPU node is also short of CPU, memory and EFA).
    total = re.search(r"0/(\d+) nodes are available", message)
    unmatched = re.search(r"(\d+) node\(s\) didn't match Pod's node affinity/selector", message)
    all_unmatched = bool(total and unmatched and total[1] == unmatched[1])
    if "Insufficient nvidia.com/gpu" in message:
        hints.append(
            f"no node has {req.get('nvidia.com/gpu', '?')} free nvidia.com/gpu: add GPU nodes to the node "
            "group, lower GPU_NODE_COUNT, or check that the NVIDIA device plugin runs on the GPU nodes "
            "(%raycluster doctor)"
        )
    elif "Insufficient vpc.amazonaws.com/efa" in message:
        hints.append(
            "no node offers a free vpc.amazonaws.com/efa: the EFA device plugin must run on EFA-enabled GPU "
            "nodes (%raycluster doctor checks it); an instance type without EFA (e.g. "
            "GPU_NODE_TYPE=g6.4xlarge) drops the request"
        )
    elif re.search(r"Insufficient (cpu|memory)", message):
        hints.append(
            f"the pod asks for cpu {req.get('cpu', '?')} / memory {req.get('memory', '?')}, more than a node "
            "has free: lower WORKER_CPU / WORKER_MEMORY (or HEAD_CPU / HEAD_MEMORY for the head)"
        )
    group = "SYSTEM" if pod.get("metadata", {}).get("labels", {}).get("ray.io/node-type") == "head" else "GPU"
    if all_unmatched or (unmatched and not total):
        sel = pod.get("spec", {}).get("nodeSelector") or {}
        want = ", ".join(f"{k}={v}" for k, v in sel.items()) or "(none)"
        knobs = f"{group}_NODE_SELECTOR" + (" or GPU_NODE_TYPE" if group == "GPU" else "")
        hints.append(
            f"no node carries the labels {want}: set {knobs} in the values file to labels your nodes have "
            "(`kubectl get nodes --show-labels`), or label the node group so"
        )
    taints = re.findall(r"untolerated taint(?:\(s\))? \{([^}]*)\}", message)
    if taints or "untolerated taint" in message or "taints that the pod didn't tolerate" in message:
        # Kubernetes >= 1.30 says "untolerated taint(s)" without the key: on a GPU pool it is the GPU taint
        keys = [t.split(":")[0].strip() for t in taints] or (["nvidia.com/gpu"] if group == "GPU" else ["KEY"])
        add = ", ".join(f"{{key: {k}, operator: Exists, effect: NoSchedule}}" for k in dict.fromkeys(keys))
        hints.append(
            f"the nodes are tainted ({'; '.join(taints) or 'see the message'}): tolerate it with "
            f"{group}_TOLERATIONS='{add}' in the values file (keep the GPU taint's entry for workers)"
        )
    if not hints:
        hints.append("the scheduler's message above says why; `kubectl describe pod` shows the same")
    return "; ".join(hints)


def diagnose_pod(pod: Mapping[str, Any], events: Iterable[Mapping[str, Any]] = ()) -> list[Diagnosis]:
    """What keeps one pod from running, if anything (empty for a running, ready pod)."""
    name = pod.get("metadata", {}).get("name", "?")
    status = pod.get("status") or {}
    events = list(events)
    out: list[Diagnosis] = []
    provisioning = (p := progress_of(pod, events)) is not None and p.stage == "provisioning"
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False" and not provisioning:
            # (while a node is being provisioned for it, "didn't match node selector" is the scheduler's routine)
            msg = cond.get("message") or ""
            if not msg:  # some schedulers only emit the event
                msg = next(
                    (e.get("message", "") for e in reversed(list(events)) if e.get("reason") == "FailedScheduling"), ""
                )
            out.append(Diagnosis(name, cond.get("reason") or "Unschedulable", msg, _scheduling_hint(msg, pod)))
            refused = [e for e in _ordered(events) if e.get("reason") == "NotTriggerScaleUp"]
            if refused:
                m = str(refused[-1].get("message", ""))
                out.append(
                    Diagnosis(
                        name,
                        "NotTriggerScaleUp",
                        m,
                        "the Cluster Autoscaler has no node group that could fit this pod: " + _scheduling_hint(m, pod),
                    )
                )
    for cs in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
        waiting = (cs.get("state") or {}).get("waiting") or {}
        reason = waiting.get("reason")
        if reason in ("ImagePullBackOff", "ErrImagePull", "InvalidImageName", "ErrImageNeverPull"):
            out.append(
                Diagnosis(
                    name,
                    reason,
                    waiting.get("message") or cs.get("image", ""),
                    f"the node cannot pull {cs.get('image')}: check DLC_IMAGE, and that the nodes can reach the "
                    "registry: public.ecr.aws has no VPC endpoint, so private subnets need a NAT gateway, or an ECR "
                    "pull-through cache rule for public.ecr.aws in your account (then DLC_IMAGE=<account>.dkr.ecr."
                    "<region>.amazonaws.com/<prefix>/deep-learning-containers/ray:<tag>)",
                )
            )
        elif reason in ("CrashLoopBackOff", "CreateContainerConfigError", "CreateContainerError", "RunContainerError"):
            out.append(
                Diagnosis(
                    name,
                    reason,
                    waiting.get("message") or "",
                    "the container starts and fails: `%raycluster logs` shows its output",
                )
            )
    if not out:
        for e in events:
            if e.get("type") == "Warning" and e.get("reason") in (
                "FailedMount",
                "FailedCreatePodSandBox",
                "FailedAttachVolume",
            ):
                out.append(
                    Diagnosis(
                        name,
                        e["reason"],
                        e.get("message", ""),
                        "the node could not set the pod up; `kubectl describe pod` has the details",
                    )
                )
    return out


def diagnose_pods(
    pods: Iterable[Mapping[str, Any]], events_by_pod: Mapping[str, Sequence[Mapping[str, Any]]] | None = None
) -> list[Diagnosis]:
    events_by_pod = events_by_pod or {}
    out: list[Diagnosis] = []
    for p in pods:
        out += diagnose_pod(p, events_by_pod.get(p.get("metadata", {}).get("name", ""), []))
    return out


def is_hopeless(d: Diagnosis) -> bool:
    """True when waiting longer cannot help (an image that does not exist); scheduling may heal (autoscalers)."""
    return d.reason in ("InvalidImageName", "ErrImageNeverPull") or (
        d.reason in ("ImagePullBackOff", "ErrImagePull") and bool(_HOPELESS_IMAGE.search(d.message))
    )
