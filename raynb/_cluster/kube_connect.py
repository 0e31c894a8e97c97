"""In the kernel: how raynb reaches the Kubernetes API: the kubeconfig (or a pod's service account), who this kernel is
there, and what each refusal tells the user -- every API error becomes a :class:`KubeError` that names what was
refused and what to do (RBAC verb and resource, missing CRD, missing namespace, unreachable API server, expired
credentials). The calls themselves are in ``kube_api.py``."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._identity import local_identity
from ..errors import KubeError

__all__ = [
    "Target",
    "connect_api",
    "api_call",
    "whoami",
    "ensure_crd",
    "GROUP",
    "VERSION",
    "PLURAL",
    "core_api",
    "custom_api",
    "plain",
    "status_of",
]

GROUP, VERSION, PLURAL = "ray.io", "v1", "rayclusters"
OPERATOR_INSTALL = (
    "helm repo add kuberay https://ray-project.github.io/kuberay-helm/ && helm install kuberay-operator "
    "kuberay/kuberay-operator --version 1.6.1 -n kuberay-operator --create-namespace"
)
#: Where a pod's service account credentials are mounted (Kubernetes' fixed path; tests point it elsewhere).
SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


@dataclass
class Target:
    """A Kubernetes API client and where it points."""

    api: Any
    server: str
    context: str | None
    user: str | None
    default_namespace: str | None
    identity: str | None = None  # who the API server says we are (whoami), asked once

    def where(self) -> str:
        return f"context {self.context!r} ({self.server})" if self.context else self.server


def _kubeconfig_docs(files: list[str]) -> list[tuple[str, dict[str, Any]]]:
    """Each kubeconfig file KUBECONFIG lists, parsed once (unreadable ones left to the client library to name)."""
    import yaml

    out = []
    for f in files:
        try:
            out.append((f, yaml.safe_load(Path(f).read_text()) or {}))
        except (OSError, yaml.YAMLError):
            continue
    return out


def _first_current_context(docs: list[tuple[str, dict[str, Any]]]) -> str | None:
    """kubectl's rule for several files: the first that sets current-context decides (the client library's merger
    takes another)."""
    return next((str(d["current-context"]) for _f, d in docs if d.get("current-context")), None)


def _check_exec_credential(docs: list[tuple[str, dict[str, Any]]], user: str | None) -> None:
    """A user whose credentials come from a command (``aws eks get-token``) that this kernel cannot run would go to
    the API server unauthenticated and be refused as ``system:anonymous``: say so instead."""
    import shutil

    for f, doc in docs:
        entry = next((u.get("user") or {} for u in doc.get("users") or [] if u.get("name") == user), None)
        if entry is None:
            continue
        command = (entry.get("exec") or {}).get("command")
        if command and shutil.which(command) is None and not Path(command).is_file():
            raise KubeError(
                f"The kubeconfig's user {user!r} gets its credentials by running `{command}`, which this kernel "
                "cannot find.",
                saw=f"{command!r} is not on this kernel's PATH ({os.environ.get('PATH', '')})",
                fix=f"install it into the kernel's environment (for `aws`: pip install awscli) or give its full path "
                f"in {f}; Jupyter kernels do not read your shell's profile, so a PATH set there is not seen",
            )
        return


def connect_api(*, context: str | None = None, kubeconfig: str | None = None) -> Target:
    """Kubeconfig (``KUBECONFIG`` or ~/.kube/config; ``context`` or the current one), else the in-cluster config."""
    from kubernetes import client, config

    listed = [kubeconfig] if kubeconfig else [p for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    files = [p for p in listed or [str(Path.home() / ".kube" / "config")] if Path(p).is_file()]
    path = os.pathsep.join(files) or (listed or [str(Path.home() / ".kube" / "config")])[0]
    if files:  # every file KUBECONFIG lists, merged as kubectl merges them
        try:
            contexts, active = config.list_kube_config_contexts(config_file=path)
        except config.ConfigException as e:
            raise KubeError(
                f"The kubeconfig {path} cannot be read: {e}",
                fix="regenerate it, e.g. `aws eks update-kubeconfig --name <cluster> --region <region>`",
            ) from None
        names = [c["name"] for c in contexts]
        if context is not None and context not in names:
            raise KubeError(
                f"The kubeconfig has no context {context!r}.",
                saw=f"contexts in {path}: " + (", ".join(names) or "none"),
                fix="pass one of those with --context",
            )
        docs = _kubeconfig_docs(files)
        chosen = next(c for c in contexts if c["name"] == (context or _first_current_context(docs) or active["name"]))
        _check_exec_credential(docs, chosen["context"].get("user"))
        api = config.new_client_from_config(config_file=path, context=chosen["name"])
        return Target(
            api,
            api.configuration.host,
            chosen["name"],
            chosen["context"].get("user"),
            chosen["context"].get("namespace"),
        )
    if os.environ.get("KUBERNETES_SERVICE_HOST"):  # inside a pod (e.g. JupyterHub on the same EKS cluster)
        from kubernetes.config.incluster_config import InClusterConfigLoader

        cfg = client.Configuration()
        sa = SERVICE_ACCOUNT_DIR
        try:
            InClusterConfigLoader(token_filename=str(sa / "token"), cert_filename=str(sa / "ca.crt")).load_and_set(cfg)
        except config.ConfigException as e:
            raise KubeError(
                "This kernel runs in a pod, but its service account credentials cannot be read.",
                saw=f"{e} (in {sa})",
                fix="mount a service account token (automountServiceAccountToken: "
                "true), or give a kubeconfig with --kubeconfig",
            ) from None
        ns_file = sa / "namespace"
        ns = ns_file.read_text().strip() if ns_file.exists() else None
        return Target(client.ApiClient(cfg), cfg.host, None, f"the pod's service account (namespace {ns})", ns)
    raise KubeError(
        "No Kubernetes configuration found.",
        saw=f"no file at {path} (KUBECONFIG={os.environ.get('KUBECONFIG', '') or 'unset'}), and this "
        "kernel is not running inside a pod",
        fix="write a kubeconfig (`aws eks update-kubeconfig --name <cluster> --region <region>`), or pass "
        "--kubeconfig FILE; `%raycluster up --local` needs none",
    )


def status_of(e: Exception) -> int:
    return int(getattr(e, "status", 0) or 0)


def _message_of(e: Exception) -> str:
    import json

    body = getattr(e, "body", None)
    try:
        return str(json.loads(body)["message"]) if body else str(getattr(e, "reason", e))
    except (ValueError, KeyError, TypeError):
        return str(body or e)


@contextmanager
def api_call(target: Target, verb: str, resource: str, namespace: str | None) -> Iterator[None]:
    """Translate the API's refusals into errors a notebook user can act on."""
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    where = f" in namespace {namespace!r}" if namespace else ""
    try:
        yield
    except ApiException as e:
        status, msg = status_of(e), _message_of(e)
        if status == 403:
            who = target.user or "this identity"
            raise KubeError(
                f"Kubernetes does not allow {who} to {verb} {resource}{where}.",
                saw=msg,
                fix=f"ask a cluster admin for a Role granting `{verb}` on `{resource}`{where}; manifests/rbac.yaml "
                "is everything raynb needs for one user's cluster, rendered with `python -m raynb.manifest --rbac "
                "--set RBAC_SUBJECT=User:<you> [--set RAY_CLUSTER_NAME=...] | kubectl apply -f -`",
            ) from None
        if status == 401:
            raise KubeError(
                f"The Kubernetes API at {target.server} rejected the credentials.",
                saw=msg,
                fix="refresh them (`aws eks update-kubeconfig ...`, or log in again), then rerun",
            ) from None
        if status == 404 and namespace and f'namespaces "{namespace}" not found' in msg:
            raise KubeError(
                f"The namespace {namespace!r} does not exist.",
                saw=msg,
                fix=f"`kubectl create namespace {namespace}`, or pick another with --namespace / "
                "NAMESPACE=... in the values file",
            ) from None
        if (
            status == 404
            and resource.endswith("ray.io")
            and ("the server could not find the requested resource" in msg or "404 page not found" in msg)
        ):
            raise _no_crd(target) from None
        if status == 400 and "no logs found" in msg:
            raise KubeError(
                "The container has not written any log yet.",
                saw=msg,
                fix="wait for it to start; `%raycluster status` shows the pod's phase",
            ) from None
        if status == 0:
            raise KubeError(
                f"Cannot reach the Kubernetes API server at {target.server}.",
                saw=msg,
                fix="check the network path (VPN, security groups) and the kubeconfig's server URL",
            ) from None
        if status == 404:
            raise  # "not found" of one object: the caller decides what that means
        raise KubeError(
            f"Kubernetes refused to {verb} {resource}{where} (HTTP {status}).",
            saw=msg,
            fix="the message above is the API server's; `kubectl` with the same request shows the same",
        ) from None
    except HTTPError as e:
        raise KubeError(
            f"Cannot reach the Kubernetes API server at {target.server}.",
            saw=f"{type(e).__name__}: {e}",
            fix="check the network path (VPN, security groups) and the kubeconfig's server URL",
        ) from None


def _no_crd(target: Target) -> KubeError:
    return KubeError(
        "The KubeRay operator is not installed on this cluster: the RayCluster resource (ray.io/v1) is unknown.",
        saw=f"the API server at {target.server} serves no ray.io/v1 rayclusters",
        fix=f"install the operator (it brings the CRD): {OPERATOR_INSTALL}",
    )


def whoami(target: Target) -> str:
    """Who owns what this kernel creates: the person where a platform records one (SageMaker Studio, JupyterHub),
    else the Kubernetes identity (SelfSubjectReview, Kubernetes >= 1.28), else the login name."""
    person = local_identity()
    if ":" in person:
        return person
    if target.identity is None:
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
        try:
            review = client.AuthenticationV1Api(target.api).create_self_subject_review(body)
            target.identity = review.status.user_info.username or ""
        except (ApiException, OSError, AttributeError):
            target.identity = ""
    return target.identity or person


def ensure_crd(target: Target) -> None:
    """Fail with install instructions unless the API serves ray.io/v1 rayclusters (discovery needs no RBAC)."""
    from kubernetes import client

    with api_call(target, "discover", "API groups", None):
        groups = client.ApisApi(target.api).get_api_versions().groups or []
    ray = next((g for g in groups if g.name == GROUP), None)
    if ray is None or not any(v.version == VERSION for v in ray.versions):
        raise _no_crd(target)


def raycluster_schema(target: Target) -> dict[str, Any] | None:
    """The installed RayCluster CRD's schema as the API server publishes it (OpenAPI v3 discovery: any signed-in
    user may read it, no RBAC on CRDs needed); None where the server publishes none or cannot be read."""
    import json

    try:
        got = target.api.call_api(
            *target.api.param_serialize("GET", f"/openapi/v3/apis/{GROUP}/{VERSION}", auth_settings=["BearerToken"])
        )
        got.read()
        schema = json.loads(got.data)["components"]["schemas"]["io.ray.v1.RayCluster"]
    except Exception:  # noqa: BLE001 - an older API server, a proxy in front of it: the strict apply still checks
        return None
    return dict(schema)


def custom_api(target: Target) -> Any:
    from kubernetes import client

    return client.CustomObjectsApi(target.api)


def core_api(target: Target) -> Any:
    from kubernetes import client

    return client.CoreV1Api(target.api)


def plain(target: Target, obj: Any) -> Any:
    return obj if isinstance(obj, dict) else target.api.sanitize_for_serialization(obj)
