"""In the kernel: the head pod's own Kubernetes account (``manifests/head-identity.yaml``): a ServiceAccount named after
the RayCluster, with ``get`` and ``patch`` on that one RayCluster, so the head can say what runs on it
(``_remote/kube_notice.py``). ``up`` makes it before the RayCluster and hands it to the RayCluster after."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .. import manifest
from ..errors import KubeError
from . import kube_api as kube
from . import kube_connect
from .backend import Say

__all__ = ["of", "docs", "make"]


def of(rc: Mapping[str, Any]) -> str | None:
    """The account a RayCluster's head pod runs as (None: the namespace's default)."""
    return rc.get("spec", {}).get("headGroupSpec", {}).get("template", {}).get("spec", {}).get("serviceAccountName")


def docs(vals: Mapping[str, str]) -> list[dict[str, Any]]:
    """The account, its Role and RoleBinding; with SERVICE_ACCOUNT (every pod's account, for pod IAM) the Role is
    bound to that one, which raynb does not make."""
    out = manifest.render_objects("head-identity.yaml", vals)
    if vals.get("SERVICE_ACCOUNT"):
        out = [d for d in out if d["kind"] != "ServiceAccount"]
        out[-1]["subjects"][0]["name"] = vals["SERVICE_ACCOUNT"]
    return out


def make(
    target: kube_connect.Target, vals: Mapping[str, str], obj: dict[str, Any], say: Say
) -> list[dict[str, Any]] | None:
    """The head pod's account and its right to patch this RayCluster (``head-identity.yaml``), with which the head
    says what runs on it (``_remote/kube_notice.py``). A user who may not make them gets a cluster without: its head
    pod runs as the namespace's default account (KubeRay's autoscaler account, where autoscaling is on)."""
    made = docs(vals)
    try:
        for d in made:
            kube.apply_owned(target, d, None)
    except KubeError as e:
        head = obj["spec"]["headGroupSpec"]["template"]["spec"]
        if head.get("serviceAccountName") == obj["metadata"]["name"]:
            del head["serviceAccountName"]
        say(
            f"the head pod gets no account of its own ({e.what}): the runs on this cluster will not show on the "
            "RayCluster (kubectl, colleagues' %raycluster list); the Role of `python -m raynb.manifest --rbac` allows it"
        )
        return None
    return made
