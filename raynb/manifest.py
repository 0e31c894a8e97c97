"""In the kernel: the DLC RayCluster rendered -- template, values file, ``--set``, preset -> a validated dict. Pure.

The template (``manifests/raycluster.yaml``) uses ``${VARS}`` that plain ``envsubst`` fills from
``manifests/values.env``; raynb fills the same variables, then applies the preset of ``GPU_NODE_TYPE``
(``manifests/presets.yaml``): GPUs, EFA interfaces and CPU/memory per node come from it, so changing instance type is
one variable. An instance without EFA loses the EFA request and the EFA variables; one with GPUDirect RDMA gains
``FI_EFA_USE_DEVICE_RDMA=1``. ``python -m raynb.manifest [--values F] [--set K=V ...]`` prints the YAML.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Mapping
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from ._identity import default_cluster_name
from ._kuberay_crd import check_installed, validate  # re-exported: the manifest and its checks, one import
from .errors import ManifestError, RaynbError

__all__ = [
    "ManifestError",
    "MANIFESTS",
    "load_values",
    "load_presets",
    "resolve_values",
    "render",
    "render_yaml",
    "render_objects",
    "render_rbac",
    "validate",
    "check_installed",
    "values_from_spec",
    "head_image",
    "autoscaled",
    "main",
]

#: The manifests raynb renders, shipped inside the package (the repository's top-level manifests/ is the same set,
#: for kubectl users; tests/unit/test_manifest.py keeps the two identical).
MANIFESTS = Path(str(resources.files("raynb").joinpath("manifests")))
_VAR = re.compile(r"\$\{([A-Z_][A-Z0-9_]*)\}|\$([A-Z_][A-Z0-9_]*)")
#: Variables a preset supplies (unless given with --set).
DERIVED = ("GPUS_PER_NODE", "EFA_PER_NODE", "WORKER_CPU", "WORKER_MEMORY")
#: The taint of GPU node pools on EKS (AWS's Karpenter GPU NodePool guidance, EKS Auto Mode), tolerated by default.
GPU_TAINT_TOLERATION = "{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}"
_TOLERATION_KEYS = {"key", "operator", "value", "effect", "tolerationSeconds"}


def load_values(path: str | Path | None = None) -> dict[str, str]:
    """``KEY=VALUE`` lines (shell syntax: comments, ``export``, quotes), as ``envsubst`` users source them."""
    path = Path(path) if path else MANIFESTS / "values.env"
    try:
        text = path.read_text()
    except OSError as e:
        raise ManifestError(
            f"Cannot read the values file {path}: {e.strerror}.",
            fix=f"pass an existing file, e.g. --values {MANIFESTS / 'values.env'}",
        ) from None
    out: dict[str, str] = {}
    for n, raw in enumerate(text.split("\n"), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        line = line.removeprefix("export ").strip()
        key, sep, value = line.partition("=")
        if not sep or not re.fullmatch(r"[A-Z_][A-Z0-9_]*", key.strip()):
            raise ManifestError(
                f"Line {n} of {path} is not KEY=VALUE: {raw!r}",
                fix="use shell variable syntax, e.g. GPU_NODE_TYPE=g6.12xlarge",
            )
        out[key.strip()] = _shell_value(value.strip(), f"line {n} of {path}")
    return out


_DQ_ESCAPES = {'"': '"', "\\": "\\", "$": "$", "`": "`"}


def _shell_value(text: str, where: str) -> str:
    """One value as a shell reads it after ``KEY=``: 'single' (literal), "double" (\\ \" \\$ \\` escapes), or bare
    (up to a ``#`` comment). What raynb cannot read the way the shell would -- a variable to expand, a command, an
    unquoted space, an unclosed quote -- is an error, never a different value."""

    def bad(why: str) -> ManifestError:
        return ManifestError(
            f"The value on {where} cannot be read: {why}.",
            fix="write the value out literally; quote it with '...' if it holds spaces, # or $",
        )

    if text[:1] == "'":
        end = text.find("'", 1)
        if end < 0:
            raise bad("the ' quote is not closed")
        value, rest = text[1:end], text[end + 1 :]
    elif text[:1] == '"':
        chars, i = [], 1
        while i < len(text) and text[i] != '"':
            c = text[i]
            if c == "\\" and i + 1 < len(text) and text[i + 1] in _DQ_ESCAPES:
                chars.append(text[i + 1])
                i += 2
                continue
            if c in "$`":
                raise bad(f"{c} would be expanded by the shell")
            chars.append(c)
            i += 1
        if i >= len(text):
            raise bad('the " quote is not closed')
        value, rest = "".join(chars), text[i + 1 :]
    else:
        comment = re.search(r"(?:^|\s)#", text)  # the shell starts a comment only at a word's start
        value = (text[: comment.start()] if comment else text).strip()
        if re.search(r"\s", value):
            raise bad("an unquoted space ends the value in the shell")
        if re.search(r"[$`\\\"';&|<>()]", value):
            raise bad("it holds a character the shell treats specially")
        return value
    rest = rest.strip()
    if rest and not rest.startswith("#"):
        raise bad(f"{rest!r} follows the closing quote")
    return value


@lru_cache(maxsize=4)
def load_presets(path: str | None = None) -> dict[str, dict[str, Any]]:
    with open(path or MANIFESTS / "presets.yaml") as f:
        return yaml.safe_load(f)


def resolve_values(
    values: Mapping[str, str] | None = None,
    overrides: Mapping[str, str] | None = None,
    presets: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, str]:
    """Values file + overrides, with the instance preset's numbers for what the overrides do not set."""
    base = values if values is not None else load_values()
    merged = {**base, **(overrides or {})}
    if not merged.get("RAY_CLUSTER_NAME"):
        merged["RAY_CLUSTER_NAME"] = default_cluster_name()  # ray-train-<you>: see _identity.py
    for group, legacy in (("SYSTEM", "system"), ("GPU", None)):
        # values files from before the *_SELECTOR variables: their role label, and the GPU taint tolerated
        if f"{group}_NODE_SELECTOR" not in merged:
            role = merged.get(f"{group}_NODE_ROLE", legacy)
            merged[f"{group}_NODE_SELECTOR"] = f"role: {role}" if role else ""
        merged.setdefault(f"{group}_TOLERATIONS", GPU_TAINT_TOLERATION if group == "GPU" else "")
    merged.setdefault("RAY_AUTH_MODE", "token")
    _resolve_scaling(merged, base, overrides or {})
    presets = presets if presets is not None else load_presets()
    itype = merged.get("GPU_NODE_TYPE", "")
    preset = presets.get(itype)
    given = set(overrides or {})
    if preset is None:
        if not set(DERIVED) <= given:
            raise ManifestError(
                f"Unknown GPU instance type {itype!r}.",
                saw=f"presets exist for {', '.join(sorted(presets))}",
                fix="pick one of those, or give all of " + ", ".join(f"--set {k}=..." for k in DERIVED) + ".",
            )
        merged["GPUDIRECT_RDMA"] = merged.get("GPUDIRECT_RDMA", "false")
        return merged
    derived = {
        "GPUS_PER_NODE": str(preset["gpus"]),
        "EFA_PER_NODE": str(preset["efa"]),
        "WORKER_CPU": str(preset["vcpus"] - 8),
        "WORKER_MEMORY": f"{preset['memory_gib'] * 5 // 6}Gi",
    }
    for k, v in derived.items():
        if k not in given:
            merged[k] = v
    merged["GPUDIRECT_RDMA"] = "true" if preset.get("gdr") else "false"
    merged.setdefault("HUGEPAGES_2MI", str(preset.get("hugepages_2mi", "")))
    return merged


def _resolve_scaling(merged: dict[str, str], values: Mapping[str, str], overrides: Mapping[str, str]) -> None:
    """GPU_MIN_NODES .. GPU_NODE_COUNT worker nodes; AUTOSCALING follows from the two. A values file whose minimum
    equals its count means a fixed size, so ``--set GPU_NODE_COUNT=N`` alone moves both."""
    if "GPU_MIN_NODES" not in overrides and values.get("GPU_MIN_NODES", "") in ("", values.get("GPU_NODE_COUNT")):
        merged["GPU_MIN_NODES"] = merged.get("GPU_NODE_COUNT", "")
    try:
        most, least = int(merged.get("GPU_NODE_COUNT") or 0), int(merged.get("GPU_MIN_NODES") or 0)
        idle = int(merged.setdefault("IDLE_TIMEOUT_S", "600"))
    except ValueError:
        raise ManifestError(
            "GPU_NODE_COUNT, GPU_MIN_NODES and IDLE_TIMEOUT_S are whole numbers; "
            f"the values give {merged.get('GPU_NODE_COUNT')!r}, {merged.get('GPU_MIN_NODES')!r} and "
            f"{merged.get('IDLE_TIMEOUT_S')!r}.",
            fix="e.g. --set GPU_NODE_COUNT=2 --set GPU_MIN_NODES=0 --set IDLE_TIMEOUT_S=600",
        ) from None
    if not 0 <= least <= most or idle < 0:
        raise ManifestError(
            f"GPU_MIN_NODES={least} must be between 0 and GPU_NODE_COUNT={most} (IDLE_TIMEOUT_S={idle}: 0 or more).",
            fix=f"--set GPU_MIN_NODES=0 scales the workers from zero up to {most}; --set GPU_MIN_NODES={most} "
            "keeps the cluster at its full size",
        )
    merged["GPU_MIN_NODES"] = str(least)
    merged["AUTOSCALING"] = "true" if least < most else "false"


def autoscaled(values: Mapping[str, str]) -> bool:
    """Do the (resolved) values make the workers an autoscaled group (fewer nodes at rest than at most)?"""
    return values.get("AUTOSCALING") == "true"


def _substitute(text: str, values: Mapping[str, str]) -> str:
    missing = sorted({m[1] or m[2] for m in _VAR.finditer(text)} - set(values))
    if missing:
        raise ManifestError(
            f"The values do not set {', '.join(missing)}.",
            fix="add them to the values file or pass --set " + " --set ".join(f"{k}=..." for k in missing),
        )
    return _VAR.sub(lambda m: values[m[1] or m[2]], text)


def render(
    values: Mapping[str, str] | None = None,
    overrides: Mapping[str, str] | None = None,
    *,
    template: str | Path | None = None,
) -> dict[str, Any]:
    """The RayCluster object for these values (preset applied; EFA request and variables only where EFA exists)."""
    vals = resolve_values(values, overrides)
    text = Path(template or MANIFESTS / "raycluster.yaml").read_text()
    try:
        obj = yaml.safe_load(_substitute(text, vals))
    except yaml.YAMLError as e:
        raise ManifestError(
            f"The rendered manifest is not valid YAML: {e}",
            fix="check values that contain ':' or '#', quote them in the values file",
        ) from None
    _check_placement(obj)
    if vals["RAY_AUTH_MODE"] == "disabled":  # what KubeRay before 1.5.1 can take: it has no authOptions at all
        obj["spec"].pop("authOptions", None)
    for group in obj["spec"]["workerGroupSpecs"]:
        for c in group["template"]["spec"]["containers"]:
            res = c.setdefault("resources", {})
            env = c.setdefault("env", [])
            if vals["EFA_PER_NODE"] in ("0", ""):
                for part in ("requests", "limits"):
                    res.get(part, {}).pop("vpc.amazonaws.com/efa", None)
                c["env"] = [e for e in env if e["name"] not in ("FI_PROVIDER", "NCCL_NET_PLUGIN")]
            else:
                if vals.get("GPUDIRECT_RDMA") == "true" and not any(e["name"] == "FI_EFA_USE_DEVICE_RDMA" for e in env):
                    env.append({"name": "FI_EFA_USE_DEVICE_RDMA", "value": "1"})
                if vals.get("HUGEPAGES_2MI"):  # the preset's (p4d/p5): libfabric's EFA buffers
                    for part in ("requests", "limits"):
                        res.setdefault(part, {})["hugepages-2Mi"] = vals["HUGEPAGES_2MI"]
    _add_storage(obj, vals)
    annotations = obj["metadata"].setdefault("annotations", {})
    annotations["raynb.io/python-version"] = vals.get("PYTHON_VERSION", "")
    annotations["raynb.io/gpu-node-type"] = vals.get("GPU_NODE_TYPE", "")
    if vals.get("STORAGE_PATH"):  # kept on the cluster: from_name, attach and resume by name find it there
        annotations["raynb.io/storage-path"] = vals["STORAGE_PATH"]
    return obj


def _add_storage(obj: dict[str, Any], vals: Mapping[str, str]) -> None:
    """The shared volume (SHARED_PVC at SHARED_MOUNT_PATH) and the service account (SERVICE_ACCOUNT, for pod IAM) in
    every pod, head and workers alike."""
    groups = [obj["spec"]["headGroupSpec"], *obj["spec"]["workerGroupSpecs"]]
    for group in groups:
        spec = group["template"]["spec"]
        if vals.get("SERVICE_ACCOUNT"):
            spec["serviceAccountName"] = vals["SERVICE_ACCOUNT"]
        if vals.get("SHARED_PVC"):
            mount = vals.get("SHARED_MOUNT_PATH") or "/mnt/shared"
            spec.setdefault("volumes", []).append(
                {"name": "shared", "persistentVolumeClaim": {"claimName": vals["SHARED_PVC"]}}
            )
            for c in spec["containers"]:
                c.setdefault("volumeMounts", []).append({"name": "shared", "mountPath": mount})


def render_rbac(values: Mapping[str, str] | None = None, overrides: Mapping[str, str] | None = None) -> list[Any]:
    """The Role and RoleBinding one user needs for one cluster (``manifests/rbac.yaml``): its Secret readable by
    name only. ``RBAC_SUBJECT``: ``User:alice``, ``Group:NAME`` or ``ServiceAccount:NAME`` (default Group:raynb-users)."""
    vals = resolve_values(values, overrides)
    kind, _, name = vals.get("RBAC_SUBJECT", "Group:raynb-users").partition(":")
    if kind not in ("User", "Group", "ServiceAccount") or not name:
        raise ManifestError(
            f"RBAC_SUBJECT must be User:NAME, Group:NAME or ServiceAccount:NAME, not {vals['RBAC_SUBJECT']!r}.",
            fix="e.g. --set RBAC_SUBJECT=User:alice",
        )
    vals |= {"RBAC_SUBJECT_KIND": kind, "RBAC_SUBJECT_NAME": name}
    role, binding = [d for d in yaml.safe_load_all(_substitute((MANIFESTS / "rbac.yaml").read_text(), vals)) if d]
    # a User or Group is an RBAC subject; a ServiceAccount is the namespace's own
    extra = {"namespace": vals["NAMESPACE"]} if kind == "ServiceAccount" else {"apiGroup": "rbac.authorization.k8s.io"}
    binding["subjects"][0].update(extra)
    return [role, binding]


def render_objects(file: str, values: Mapping[str, str]) -> list[dict[str, Any]]:
    """What ``up`` applies beside the RayCluster for resolved ``values``: ``networkpolicy.yaml`` (only the cluster's
    pods reach its pods), ``head-identity.yaml`` (the head pod's account, which may patch this RayCluster alone)."""
    return [d for d in yaml.safe_load_all(_substitute((MANIFESTS / file).read_text(), values)) if d]


def _check_placement(obj: Mapping[str, Any]) -> None:
    """Node selectors are label -> string; tolerations are Kubernetes toleration objects: said before any API call."""
    groups = [("SYSTEM", obj["spec"]["headGroupSpec"])] + [("GPU", g) for g in obj["spec"]["workerGroupSpecs"]]
    for var, group in groups:
        spec = group["template"]["spec"]
        selector = spec.get("nodeSelector") or {}
        bad = {k: v for k, v in selector.items() if not isinstance(v, str)} if isinstance(selector, dict) else selector
        if bad:
            raise ManifestError(
                f"{var}_NODE_SELECTOR must give label values as text; it gives {bad!r}.",
                fix=f"quote such values inside the value, e.g. {var}_NODE_SELECTOR='gpu: \"true\"'",
            )
        tolerations = spec.get("tolerations") or []
        if not all(isinstance(t, dict) and t and set(t) <= _TOLERATION_KEYS for t in tolerations):
            raise ManifestError(
                f"{var}_TOLERATIONS is not a list of Kubernetes tolerations: {tolerations!r}.",
                fix=f"write each as {{key: K, operator: Exists, effect: NoSchedule}}, comma-separated, e.g. "
                f"{var}_TOLERATIONS='{GPU_TAINT_TOLERATION}'",
            )


def render_yaml(
    values: str | Path | Mapping[str, str] | None = None,
    set: Mapping[str, object] | None = None,  # the name the magic's --set maps to
    *,
    template: str | Path | None = None,
) -> str:
    """The twin of ``%raycluster render [--values F] [--set K=V ...]``: a values file (or a dict of values; default:
    the packaged values.env) and overrides -> the RayCluster YAML that ``kubectl apply --server-side -f -`` takes."""
    vals = dict(values) if isinstance(values, Mapping) else load_values(values)
    return yaml.safe_dump(render(vals, {k: str(v) for k, v in (set or {}).items()}, template=template), sort_keys=False)


def head_image(rc: Mapping[str, Any]) -> str:
    """The image of the RayCluster's head container (the DLC image on raynb's clusters)."""
    return str(rc["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0].get("image", "?"))


def values_from_spec(rc: Mapping[str, Any]) -> dict[str, str]:
    """The inverse of :func:`render`, as far as a live RayCluster tells: the values raynb needs to work with a cluster
    it did not create in this kernel (versions, image, instance type, GPUs, EFA, GPUDirect RDMA)."""
    ann = rc.get("metadata", {}).get("annotations", {})
    groups = rc["spec"].get("workerGroupSpecs", [])
    vals = {
        "RAY_VERSION": rc["spec"].get("rayVersion", ""),
        "PYTHON_VERSION": ann.get("raynb.io/python-version", ""),
        "DLC_IMAGE": head_image(rc),
        "GPU_NODE_TYPE": ann.get("raynb.io/gpu-node-type", ""),
        "RAY_AUTH_MODE": str((rc["spec"].get("authOptions") or {}).get("mode", "disabled")),
        "STORAGE_PATH": ann.get("raynb.io/storage-path", ""),
        "GPU_NODE_COUNT": str(sum(int(g.get("maxReplicas", g.get("replicas", 0))) for g in groups)),
        "GPU_MIN_NODES": str(sum(int(g.get("minReplicas", g.get("replicas", 0))) for g in groups)),
        "AUTOSCALING": "true" if rc["spec"].get("enableInTreeAutoscaling") else "false",
        "IDLE_TIMEOUT_S": str((rc["spec"].get("autoscalerOptions") or {}).get("idleTimeoutSeconds", "")),
    }
    head = rc["spec"].get("headGroupSpec", {}).get("template", {}).get("spec", {})
    claim = next((v for v in head.get("volumes") or [] if v.get("name") == "shared"), None)
    if claim:
        vals["SHARED_PVC"] = claim["persistentVolumeClaim"]["claimName"]
        vals["SHARED_MOUNT_PATH"] = next(
            (m["mountPath"] for m in head["containers"][0].get("volumeMounts") or [] if m.get("name") == "shared"), ""
        )
    for g in rc["spec"].get("workerGroupSpecs", []):
        for c in g["template"]["spec"]["containers"]:
            req = (c.get("resources") or {}).get("requests") or {}
            vals["EFA_PER_NODE"] = str(req.get("vpc.amazonaws.com/efa", "0"))
            vals["GPUS_PER_NODE"] = str(req.get("nvidia.com/gpu", "0"))
            vals["GPUDIRECT_RDMA"] = (
                "true" if any(e.get("name") == "FI_EFA_USE_DEVICE_RDMA" for e in c.get("env", [])) else "false"
            )
    return vals


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m raynb.manifest", description="Print the DLC RayCluster YAML.")
    ap.add_argument("--values", help="values file (default: manifests/values.env)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="overrides")
    ap.add_argument("--template", help="a RayCluster template of your own (default: manifests/raycluster.yaml)")
    ap.add_argument("--rbac", action="store_true", help="print the Role and RoleBinding one user needs instead")
    args = ap.parse_args(argv)
    from ._settings import parse_assignments

    try:
        sets = parse_assignments(args.overrides, "--set")
        if args.rbac:
            rbac = render_rbac(load_values(args.values), {k: str(v) for k, v in sets.items()})
            sys.stdout.write(yaml.safe_dump_all(rbac, sort_keys=False))
            return 0
        sys.stdout.write(render_yaml(args.values, sets, template=args.template))
    except RaynbError as e:
        print(e.message, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
