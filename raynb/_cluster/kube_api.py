"""In the kernel: every Kubernetes API call raynb makes on a RayCluster: server-side apply, waiting with diagnostics,
status, pods, nodes, logs, the head's token, delete.

Knows RayClusters, pods, nodes and events; knows nothing of Ray Train. Reaching the API and the wording of its
refusals (``api_call``) are in ``kube_connect.py``; a refusal only one call can get keeps its wording here, beside it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from typing import Any

from ..errors import ClusterStartError, KubeError
from ..manifest import head_image
from .kube_connect import GROUP, PLURAL, VERSION, Target, api_call, core_api, custom_api, plain, status_of
from .kube_state import KubeStatus, RayClusterRef, conditions, kube_time, node_row, pod_row, readiness
from .pod_diagnosis import Diagnosis, Progress, diagnose_pods, is_hopeless, progress_of

__all__ = [
    "apply_raycluster",
    "get_raycluster",
    "wait_ready",
    "delete_raycluster",
    "list_rayclusters",
    "head_pod_name",
    "pods",
    "nodes",
    "daemonsets",
    "resource_slices",
    "ray_token",
    "apply_owned",
    "pod_logs",
    "kube_status",
    "FIELD_MANAGER",
]

FIELD_MANAGER = "raynb"


def get_raycluster(target: Target, ref: RayClusterRef) -> dict[str, Any] | None:
    from kubernetes.client.exceptions import ApiException

    try:
        with api_call(target, "get", "rayclusters.ray.io", ref.namespace):
            return plain(
                target, custom_api(target).get_namespaced_custom_object(GROUP, VERSION, ref.namespace, PLURAL, ref.name)
            )
    except ApiException as e:
        if status_of(e) == 404:
            return None
        raise


def apply_raycluster(target: Target, obj: Mapping[str, Any]) -> dict[str, Any]:
    """Server-side apply (field manager ``raynb``, strict field validation): what ``kubectl apply --server-side``
    does with the same YAML."""
    md = obj["metadata"]
    with api_call(target, "patch", "rayclusters.ray.io", md["namespace"]):
        out = custom_api(target).patch_namespaced_custom_object(
            GROUP,
            VERSION,
            md["namespace"],
            PLURAL,
            md["name"],
            dict(obj),
            field_manager=FIELD_MANAGER,
            force=True,
            field_validation="Strict",  # a field the operator's CRD lacks fails here, never dropped in silence
            _content_type="application/apply-patch+yaml",
        )
    return plain(target, out)


def apply_owned(target: Target, obj: dict[str, Any], owner: Mapping[str, Any] | None) -> None:
    """Server-side apply ``obj`` (a namespaced object of a built-in kind) as a dependent of the RayCluster ``owner``:
    Kubernetes' garbage collector deletes it with the cluster (``owner`` None: not yet one, as what the RayCluster's
    pods need before it exists)."""
    from kubernetes import dynamic

    obj["metadata"].pop("ownerReferences", None)
    if owner is not None:
        meta = owner["metadata"]
        obj["metadata"]["ownerReferences"] = [
            {"apiVersion": f"{GROUP}/{VERSION}", "kind": "RayCluster", "name": meta["name"], "uid": meta["uid"]}
        ]
    res = dynamic.DynamicClient(target.api).resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
    plural = f"{res.name}.{res.group}" if res.group else res.name
    with api_call(target, "patch", plural, obj["metadata"]["namespace"]):
        res.server_side_apply(
            body=obj, name=obj["metadata"]["name"], namespace=obj["metadata"]["namespace"], field_manager=FIELD_MANAGER
        )


def pods(target: Target, ref: RayClusterRef) -> list[dict[str, Any]]:
    with api_call(target, "list", "pods", ref.namespace):
        items = core_api(target).list_namespaced_pod(ref.namespace, label_selector=f"ray.io/cluster={ref.name}").items
    return sorted(
        (plain(target, p) for p in items),
        key=lambda p: (p["metadata"].get("labels", {}).get("ray.io/node-type") != "head", p["metadata"]["name"]),
    )


def _events_by_pod(target: Target, namespace: str) -> dict[str, list[dict[str, Any]]]:
    from kubernetes.client.exceptions import ApiException

    try:
        items = core_api(target).list_namespaced_event(namespace, field_selector="involvedObject.kind=Pod").items
    except ApiException:  # events are a nicety: without RBAC for them the pod conditions still speak
        return {}
    out: dict[str, list[dict[str, Any]]] = {}
    for e in items:
        d = plain(target, e)
        out.setdefault(d.get("involvedObject", {}).get("name", ""), []).append(d)
    return out


def diagnose(target: Target, ref: RayClusterRef) -> tuple[list[Diagnosis], list[Progress]]:
    """What keeps the pods from running, and what is under way for them (one read of pods and events)."""
    pod_list, events = pods(target, ref), _events_by_pod(target, ref.namespace)
    progress = [progress_of(p, events.get(p["metadata"]["name"], [])) for p in pod_list]
    return diagnose_pods(pod_list, events), [p for p in progress if p is not None]


#: How often a stage still under way is said again while `up` waits (a pull of a multi-GB image takes minutes).
_REPEAT_S = 30.0
#: How long a pod no node matches goes unmentioned: Karpenter batches pending pods for 1-10 s and the Cluster
#: Autoscaler scans every 10 s, so the first FailedScheduling of a pool that scales from zero is routine.
_AUTOSCALER_GRACE_S = 20.0
#: Past its timeout, a wait also goes on while the cluster moved this recently (a pod's stage, or the operator's count
#: of ready pods, changed): pods bound to nodes that just joined run before KubeRay marks the RayCluster ready.
_MOVED_S = 10.0
_NO_MATCH = "didn't match Pod's node affinity/selector"


def wait_ready(
    target: Target, ref: RayClusterRef, *, timeout: float, progress: Callable[[str], None] = print, poll: float = 1.0
) -> dict[str, Any]:
    """Wait until the head and every worker are ready; say what is under way (a node provisioned, an image pulled)
    and what is wrong (pending pods explained) as it goes. ``timeout`` is extended while a node is being provisioned
    or an image pulled, or while the cluster moved in the last ``_MOVED_S``, up to three times ``timeout``: never
    forever."""
    t0 = time.monotonic()
    last_line, said = "", set()
    moved_at, stages = 0.0, frozenset[tuple[str, str]]()  # when the readiness line or a pod's stage last changed
    diags: list[Diagnosis] = []
    shown: dict[str, tuple[str, float]] = {}  # pod -> (what was said, when)
    under_way: list[Progress] = []
    extended = False
    rc: dict[str, Any] | None = None
    while True:
        rc = get_raycluster(target, ref)
        if rc is None:
            raise ClusterStartError(
                f"The RayCluster {ref.namespace}/{ref.name} disappeared while raynb waited.",
                fix="someone deleted it; run `%raycluster up` again",
            )
        failure = conditions(rc).get("ReplicaFailure")
        if failure and failure.get("status") == "True":
            raise ClusterStartError(
                f"KubeRay could not create the pods of {ref.namespace}/{ref.name}.",
                saw=f"{failure.get('reason')}: {failure.get('message')}",
                fix="fix what the message names (often quota, admission policy or RBAC of the "
                "operator), then `%raycluster down` and `%raycluster up`",
            )
        ok, line = readiness(rc)
        elapsed = time.monotonic() - t0
        if ok:
            progress(f"RayCluster {ref.name} ready after {elapsed:.0f} s ({line})")
            return rc
        if line != last_line:
            progress(f"[{elapsed:4.0f} s] {line}")
            last_line, moved_at = line, elapsed
        diags, under_way = diagnose(target, ref)
        if (now_stages := frozenset((p.pod, p.stage) for p in under_way)) != stages:
            stages, moved_at = now_stages, elapsed
        now = datetime.now(timezone.utc)
        for p in under_way:
            said_before, at = shown.get(p.pod, ("", -_REPEAT_S))
            if p.detail != said_before or elapsed - at >= _REPEAT_S:
                progress(f"[{elapsed:4.0f} s] {p.line(now)}")
                shown[p.pod] = (p.detail, elapsed)
        for d in diags:
            key = (d.pod, d.reason, d.message)
            no_node_yet = _NO_MATCH in d.message and "Insufficient" not in d.message and "taint" not in d.message
            if elapsed < _AUTOSCALER_GRACE_S and d.reason == "Unschedulable" and no_node_yet:
                continue  # an autoscaler may be about to add the node: said if it still holds after the grace
            if key not in said:
                said.add(key)
                progress(f"[{elapsed:4.0f} s] waiting: {d.line()}")
        hopeless = [d for d in diags if is_hopeless(d)]
        if hopeless:
            raise ClusterStartError(
                f"The RayCluster {ref.name} cannot start: a pod's image cannot be pulled.",
                saw="\n".join(d.line() for d in hopeless),
                fix="fix DLC_IMAGE (or the registry access), then `%raycluster down` and `%raycluster up`",
            )
        moving = still_under_way(under_way) or elapsed - moved_at < _MOVED_S
        if elapsed > timeout and moving and elapsed < 3 * timeout:
            extended = True
        elif elapsed > timeout:
            waited_on = [p.line(now) for p in under_way]
            more = f", then {elapsed - timeout:.0f} s more while it progressed" if extended else ""
            raise ClusterStartError(
                f"The RayCluster {ref.namespace}/{ref.name} was not ready after {timeout:.0f} s{more} ({line}).",
                saw="\n".join([d.line() for d in diags] + [f"still under way: {w}" for w in waited_on])
                or "no pod reported a problem; the operator may be slow "
                "(kubectl logs -n kuberay-operator deploy/kuberay-operator)",
                fix="act on the reasons above; the RayCluster is left in place (`%raycluster status` to watch it, "
                "`%raycluster down` to remove it, `%raycluster up --timeout SECONDS` to wait longer)",
            )
        time.sleep(poll)


def still_under_way(under_way: list[Progress]) -> bool:
    """Whether a wait past its timeout goes on (up to three times it): a node is being added, an image pulled, or a
    container started on a node that has just joined. The last counts too: the moment Karpenter's nodes join, the
    pods leave "provisioning" for "starting" before they run, and a wait that stopped there gave up on a cluster
    seconds from ready (the node-pool test on a loaded 2-core host)."""
    return any(p.stage in ("provisioning", "pulling", "starting") for p in under_way)


def head_pod_name(target: Target, ref: RayClusterRef) -> str:
    """The running head pod's name (looked up each time: a replaced head gets a new name)."""
    for p in pods(target, ref):
        labels = p["metadata"].get("labels", {})
        if labels.get("ray.io/node-type") == "head" and not p["metadata"].get("deletionTimestamp"):
            return str(p["metadata"]["name"])
    raise KubeError(
        f"The RayCluster {ref.namespace}/{ref.name} has no head pod.",
        fix="`%raycluster status` shows its pods; `%raycluster up` recreates it",
    )


def delete_raycluster(
    target: Target, ref: RayClusterRef, *, timeout: float = 120.0, progress: Callable[[str], None] = print
) -> bool:
    """Delete the RayCluster and wait until its pods and services are gone. False if there was nothing to delete."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    try:
        with api_call(target, "delete", "rayclusters.ray.io", ref.namespace):
            custom_api(target).delete_namespaced_custom_object(
                GROUP,
                VERSION,
                ref.namespace,
                PLURAL,
                ref.name,
                body=client.V1DeleteOptions(propagation_policy="Foreground"),
            )
    except ApiException as e:
        if status_of(e) == 404:
            return False
        raise
    t0 = time.monotonic()
    while True:
        left = pods(target, ref)
        with api_call(target, "list", "services", ref.namespace):
            svcs = (
                core_api(target)
                .list_namespaced_service(ref.namespace, label_selector=f"ray.io/cluster={ref.name}")
                .items
            )
        rc = get_raycluster(target, ref)
        if not left and not svcs and rc is None:
            progress(f"RayCluster {ref.namespace}/{ref.name} deleted ({time.monotonic() - t0:.0f} s)")
            return True
        if time.monotonic() - t0 > timeout:
            raise KubeError(
                f"The RayCluster {ref.namespace}/{ref.name} was deleted, but {len(left)} pod(s) and "
                f"{len(svcs)} service(s) are still there after {timeout:.0f} s.",
                saw=", ".join(p["metadata"]["name"] for p in left),
                fix="pods stuck in Terminating usually mean an unreachable node; "
                "`kubectl get pods -n " + ref.namespace + "` shows them",
            )
        time.sleep(0.5)


def list_rayclusters(target: Target, namespace: str | None) -> list[dict[str, Any]]:
    c = custom_api(target)
    with api_call(target, "list", "rayclusters.ray.io", namespace):
        if namespace:
            items = c.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)["items"]
        else:
            items = c.list_cluster_custom_object(GROUP, VERSION, PLURAL)["items"]
    return [plain(target, i) for i in items]


def nodes(target: Target) -> list[dict[str, Any]]:
    with api_call(target, "list", "nodes", None):
        return [plain(target, n) for n in core_api(target).list_node().items]


def daemonsets(target: Target) -> list[dict[str, Any]]:
    from kubernetes import client

    with api_call(target, "list", "daemonsets", None):
        return [plain(target, d) for d in client.AppsV1Api(target.api).list_daemon_set_for_all_namespaces().items]


def ray_token(target: Target, ref: RayClusterRef) -> str | None:
    """The Ray token KubeRay keeps for a RayCluster in token mode (the Secret named after it, key ``auth_token``);
    None when there is no such Secret (auth disabled, or a KubeRay < 1.5 that ignored ``authOptions``)."""
    import base64

    from kubernetes.client.exceptions import ApiException

    try:
        with api_call(target, "get", "secrets", ref.namespace):
            secret = core_api(target).read_namespaced_secret(ref.name, ref.namespace)
    except ApiException as e:
        if status_of(e) == 404:
            return None
        raise
    data = (secret.data or {}).get("auth_token")
    return base64.b64decode(data).decode().strip() if data else None


def resource_slices(target: Target) -> list[dict[str, Any]] | None:
    """DRA ResourceSlices (resource.k8s.io/v1, Kubernetes >= 1.34); None where the API or the permission is missing."""
    from kubernetes import dynamic

    try:
        res = dynamic.DynamicClient(target.api).resources.get(api_version="resource.k8s.io/v1", kind="ResourceSlice")
        return [dict(i.to_dict()) for i in res.get().items]
    except Exception:  # noqa: BLE001 -- no DRA API here, or not allowed: the doctor says it cannot see them
        return None


def pod_logs(target: Target, ref: RayClusterRef, which: str = "head", *, tail: int = 200) -> tuple[str, str]:
    """(pod name, its container log). ``which``: ``head``, ``worker`` / ``worker-N`` (N-th worker), or a pod name."""
    all_pods = pods(target, ref)
    workers = [p for p in all_pods if p["metadata"].get("labels", {}).get("ray.io/node-type") == "worker"]
    names = [p["metadata"]["name"] for p in all_pods]
    if which == "head":
        name = head_pod_name(target, ref)
    elif which == "worker" or (which.startswith("worker-") and which[7:].isdigit()):
        i = int(which[7:]) if which != "worker" else 0
        if i >= len(workers):
            raise KubeError(
                f"There is no worker {i}: the cluster has {len(workers)} worker pod(s).",
                fix="use worker-0 ... or a pod name from `%raycluster status`",
            )
        name = workers[i]["metadata"]["name"]
    elif which in names:
        name = which
    else:
        raise KubeError(
            f"No pod {which!r} in the RayCluster {ref.name}.",
            saw=", ".join(names) or "no pods",
            fix="use head, worker-N or one of those names",
        )
    with api_call(target, "get", "pods/log", ref.namespace):
        text = core_api(target).read_namespaced_pod_log(name, ref.namespace, tail_lines=tail)
    return name, text if isinstance(text, str) else str(text)


# ---- status -------------------------------------------------------------------------------------------------------


def kube_status(target: Target, ref: RayClusterRef) -> KubeStatus:
    rc = get_raycluster(target, ref)
    if rc is None:
        raise KubeError(
            f"No RayCluster {ref.name!r} in namespace {ref.namespace!r}.",
            fix="`%raycluster list` shows the RayClusters; `%raycluster up` creates one",
        )
    _, line = readiness(rc)
    image = head_image(rc)
    prows = [pod_row(p) for p in pods(target, ref)]
    used = {r.node for r in prows}
    try:
        nrows = [node_row(n) for n in nodes(target) if n["metadata"]["name"] in used]
    except KubeError:  # listing nodes is cluster-scoped: many notebook users may not
        nrows = []
    created = kube_time(rc.get("metadata", {}).get("creationTimestamp"))
    return KubeStatus(ref, line, image, prows, nrows, created.timestamp() if created else None)
