"""Why a RayCluster's pods are not running yet, in words: pure functions of pod and event dicts (as the API gives them).

The scheduler's ``PodScheduled=False/Unschedulable`` message and the kubelet's container ``waiting`` reasons say what
is wrong; this module turns them into one line a notebook user can act on, with the values-file knob to turn.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Diagnosis", "diagnose_pod", "diagnose_pods", "is_hopeless"]

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
            "GPU_NODE_TYPE=g6e.12xlarge) drops the request"
        )
    elif re.search(r"Insufficient (cpu|memory)", message):
        hints.append(
            f"the pod asks for cpu {req.get('cpu', '?')} / memory {req.get('memory', '?')}, more than a node "
            "has free: lower WORKER_CPU / WORKER_MEMORY (or HEAD_CPU / HEAD_MEMORY for the head)"
        )
    if all_unmatched or (unmatched and not total):
        sel = pod.get("spec", {}).get("nodeSelector") or {}
        want = ", ".join(f"{k}={v}" for k, v in sel.items()) or "(none)"
        hints.append(
            f"no node carries the labels {want}: label the node group so, or change SYSTEM_NODE_ROLE / "
            "GPU_NODE_ROLE / GPU_NODE_TYPE in the values file"
        )
    if "untolerated taint" in message:
        hints.append("the matching nodes are tainted: add a toleration to the pod template, or untaint the nodes")
    if not hints:
        hints.append("the scheduler's message above says why; `kubectl describe pod` shows the same")
    return "; ".join(hints)


def diagnose_pod(pod: Mapping[str, Any], events: Iterable[Mapping[str, Any]] = ()) -> list[Diagnosis]:
    """What keeps one pod from running, if anything (empty for a running, ready pod)."""
    name = pod.get("metadata", {}).get("name", "?")
    status = pod.get("status") or {}
    out: list[Diagnosis] = []
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            msg = cond.get("message") or ""
            if not msg:  # some schedulers only emit the event
                msg = next(
                    (e.get("message", "") for e in reversed(list(events)) if e.get("reason") == "FailedScheduling"), ""
                )
            out.append(Diagnosis(name, cond.get("reason") or "Unschedulable", msg, _scheduling_hint(msg, pod)))
    for cs in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
        waiting = (cs.get("state") or {}).get("waiting") or {}
        reason = waiting.get("reason")
        if reason in ("ImagePullBackOff", "ErrImagePull", "InvalidImageName", "ErrImageNeverPull"):
            out.append(
                Diagnosis(
                    name,
                    reason,
                    waiting.get("message") or cs.get("image", ""),
                    f"the node cannot pull {cs.get('image')}: check DLC_IMAGE, and that the nodes can "
                    "reach the registry (public.ecr.aws needs a NAT gateway or VPC endpoint)",
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
