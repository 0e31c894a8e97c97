"""On the head: the head's writes of the run notice (``_shared/run_notice.py``) on its own RayCluster, with the head
pod's service account -- in-cluster, as any pod reaches the Kubernetes API: the API server from
``KUBERNETES_SERVICE_HOST`` / ``_PORT``, the account's token, CA and namespace from the folder Kubernetes mounts into
the pod, the RayCluster's name from ``RAY_CLUSTER_NAME`` (KubeRay sets it in every Ray container). Standard library
only: the cluster's image needs no Kubernetes client.

What the account may do is the cluster's: ``up`` makes the head's ServiceAccount with ``get`` and ``patch`` on this
one RayCluster (``manifests/head-identity.yaml``); KubeRay's autoscaler account has them too. Outside a pod (the
embedded head, a cluster started by hand) there is nothing to write, and nothing is tried.
"""

from __future__ import annotations

import json
import os
import ssl
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["PodIdentity", "NoticeRefused", "patch_raycluster"]

#: where Kubernetes mounts a pod's service account (``RAYNB_SERVICEACCOUNT_DIR`` names another: the tests' head,
#: which is a process on the test machine standing behind a kwok pod)
SERVICEACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
FIELD_MANAGER = "raynb-head"


class NoticeRefused(Exception):
    """The API server said no (``status``: its HTTP status; 0: not reached)."""

    def __init__(self, status: int, text: str) -> None:
        super().__init__(f"{status}: {text}" if status else text)
        self.status = status


@dataclass(frozen=True)
class PodIdentity:
    """Who the head is to the Kubernetes API, and which RayCluster is its own."""

    server: str
    account_dir: Path
    namespace: str
    cluster: str

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> PodIdentity | None:
        """The head pod's identity; None outside a pod of a RayCluster (or before its token is mounted)."""
        env = os.environ if env is None else env
        host, port, cluster = (
            env.get("KUBERNETES_SERVICE_HOST"),
            env.get("KUBERNETES_SERVICE_PORT"),
            env.get("RAY_CLUSTER_NAME"),
        )
        d = Path(env.get("RAYNB_SERVICEACCOUNT_DIR") or SERVICEACCOUNT_DIR)
        if not (host and port and cluster) or not (d / "token").is_file():
            return None
        try:
            namespace = env.get("RAY_CLUSTER_NAMESPACE") or (d / "namespace").read_text().strip()
        except OSError:
            return None
        host = f"[{host}]" if ":" in host else host
        return cls(f"https://{host}:{port}", d, namespace, cluster)

    @property
    def where(self) -> str:
        return f"RayCluster {self.namespace}/{self.cluster}"


def patch_raycluster(ident: PodIdentity, body: dict[str, Any], timeout: float = 5.0) -> None:
    """JSON merge patch of the head's own RayCluster (the token is read at each call: the kubelet rotates it)."""
    url = (
        f"{ident.server}/apis/ray.io/v1/namespaces/{ident.namespace}/rayclusters/{ident.cluster}"
        f"?fieldManager={FIELD_MANAGER}"
    )
    ca = ident.account_dir / "ca.crt"
    ctx = ssl.create_default_context(cafile=str(ca) if ca.is_file() else None)
    try:
        token = (ident.account_dir / "token").read_text().strip()
    except OSError as e:
        raise NoticeRefused(0, f"the service account's token is not readable: {e}") from e
    req = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        method="PATCH",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/merge-patch+json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=ctx) as r:
            r.read()
    except urllib.error.HTTPError as e:
        try:
            msg = json.loads(e.read() or b"{}").get("message") or e.reason
        except ValueError:
            msg = e.reason
        raise NoticeRefused(e.code, str(msg)) from None
    except (urllib.error.URLError, OSError) as e:
        raise NoticeRefused(0, f"the Kubernetes API at {ident.server} did not answer: {e}") from None
