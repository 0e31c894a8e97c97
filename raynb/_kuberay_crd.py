"""In the kernel: what a KubeRay release's RayCluster CRD takes: a rendered manifest checked as strict field validation
checks it (types, and no field the CRD lacks), naming the release a lacking field needs. Pure: dicts and files in,
errors out."""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from .errors import ManifestError

__all__ = ["validate", "check_installed", "unknown_fields", "KUBERAY_LACKS"]


@lru_cache(maxsize=4)
def _crd_schema(crd_path: str) -> dict[str, Any]:
    with open(crd_path) as f:
        crd = yaml.safe_load(f)
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")
    return version["schema"]["openAPIV3Schema"]


#: Fields raynb may render that older KubeRay releases lack, and the release that brought each.
KUBERAY_LACKS = {"spec.authOptions": "KubeRay 1.5.1 (token authentication, RAY_AUTH_MODE=token)"}
_OPEN = "x-kubernetes-preserve-unknown-fields"


def unknown_fields(obj: Any, schema: Mapping[str, Any], path: str = "") -> list[str]:
    """The paths (``spec.authOptions``, ``spec.workerGroupSpecs[].x``) in ``obj`` that a structural CRD schema does
    not declare: what an apply with strict field validation refuses, and lax validation drops in silence (JSON
    Schema alone lets them through). ``metadata`` is the API server's own (ObjectMeta)."""
    if schema.get(_OPEN) or not isinstance(obj, (dict, list)):
        return []
    if isinstance(obj, list):
        return sorted({p for x in obj for p in unknown_fields(x, schema.get("items") or {}, f"{path}[]")})
    props, extra = schema.get("properties"), schema.get("additionalProperties")
    out: list[str] = []
    for key, value in obj.items():
        where = f"{path}.{key}" if path else key
        if where == "metadata":
            continue
        if props is not None and key in props:
            out += unknown_fields(value, props[key], where)
        elif isinstance(extra, dict):
            out += unknown_fields(value, extra, where)
        elif props is not None or extra is False:
            out.append(where)
    return out


def validate(obj: Mapping[str, Any], crd_path: str | Path) -> None:
    """Check ``obj`` against a KubeRay RayCluster CRD's v1 schema, as strict field validation does (types, and no
    field the CRD lacks); raise ManifestError listing every problem, with the KubeRay release a lacking field needs."""
    import jsonschema

    schema = _crd_schema(str(crd_path))
    errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(dict(obj)), key=lambda e: list(e.path))
    lines = [f"{'.'.join(map(str, e.path)) or '(root)'}: {e.message}" for e in errors[:10]]
    unknown = unknown_fields(obj, schema)
    if lines or unknown:
        raise ManifestError(
            f"The RayCluster does not match the CRD {Path(crd_path).name}.",
            saw="\n".join(lines + _lacking(unknown)),
            fix=_ways_on(unknown),
        )


def check_installed(obj: Mapping[str, Any], schema: Mapping[str, Any] | None, where: str) -> None:
    """Before anything is created: refuse a manifest with fields the installed operator's CRD lacks (``schema``: the
    RayCluster schema the API server publishes; None where it publishes none -- the strict apply still refuses)."""
    unknown = unknown_fields(obj, schema) if schema is not None else []
    if unknown:
        raise ManifestError(
            f"The KubeRay installed at {where} does not know {', '.join(unknown)}: its RayCluster CRD is older than "
            "the manifest needs. Nothing was created.",
            saw="\n".join(_lacking(unknown)),
            fix=_ways_on(unknown),
        )


def _lacking(unknown: list[str]) -> list[str]:
    return [f"{p}: not in this CRD" + (f" (needs {KUBERAY_LACKS[p]})" if p in KUBERAY_LACKS else "") for p in unknown]


def _ways_on(unknown: list[str]) -> str:
    if "spec.authOptions" in unknown:
        return (
            "upgrade KubeRay to 1.5.1 or later (e.g. `helm upgrade kuberay-operator kuberay/kuberay-operator "
            "--version 1.6.1`: CRDs upgrade with it only where your chart does so; otherwise `kubectl apply "
            "--server-side -k 'github.com/ray-project/kuberay/ray-operator/config/crd?ref=v1.6.1'`), or go without "
            "token auth: --set RAY_AUTH_MODE=disabled (then any pod of the namespace can submit jobs to the "
            "cluster; the NetworkPolicy still admits only the cluster's own pods where the network enforces it)"
        )
    return "upgrade KubeRay to a release whose RayCluster CRD has these fields, or drop them from your template"
