"""Settings, resolved in one place: flag > ``%config RayNB.*`` > ``RAYNB_*`` environment > values file > default."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, get_args, get_type_hints

from .errors import UsageError

__all__ = ["Settings", "resolve", "parse_assignments", "ENV_PREFIX"]

ENV_PREFIX = "RAYNB_"


@dataclass(frozen=True)
class Settings:
    """Everything a magic or API call may be told; each field can come from any layer."""

    workers: int = 2
    gpu: bool = False
    cpus_per_worker: float = 1.0
    #: CPUs/GPUs the embedded head offers (None: what the machine has).
    local_num_cpus: int | None = None
    local_num_gpus: int | None = None
    #: Start the embedded head with Ray's dashboard (needs ray[default]).
    local_dashboard: bool = True
    start_timeout_s: float = 120.0
    connect_timeout_s: float = 60.0
    #: How often Ray Train's controller polls workers (Ray's default). A checkpointing ray.train.report() blocks about
    #: this long; metric-only reports take raynb's non-blocking path. Lower it for frequent checkpoints, at the cost
    #: of the controller interrupting workers more often.
    health_check_interval_s: float = 2.0
    #: Route metric-only ray.train.report() calls to raynb's non-blocking path (no ~2 s stall per call).
    fast_train_report: bool = True
    #: Live display redraws per second (at most).
    refresh_hz: float = 4.0
    #: NCCL logging: "summary" (parsed badges), "full" (raw lines in the cell) or "off".
    nccl: str = "summary"
    #: Fail a run whose NCCL fell back to sockets while a faster network was expected.
    strict_efa: bool = False
    #: Where Ray Train keeps run state and checkpoints (None: Ray's default, ~/ray_results).
    storage_path: str | None = None
    #: Kubernetes: kubeconfig context (None: the current one) and namespace (None: NAMESPACE from the values file).
    kube_context: str | None = None
    kube_namespace: str | None = None
    #: How long `up` waits for a Kubernetes RayCluster (pulling the DLC image onto new GPU nodes takes minutes).
    kube_start_timeout_s: float = 900.0


_HINTS = get_type_hints(Settings)
_NAMES = tuple(f.name for f in fields(Settings))


def _base_type(name: str) -> type:
    hint = _HINTS[name]
    args = [a for a in get_args(hint) if a is not type(None)]
    return args[0] if args else hint


def _coerce(name: str, value: Any, source: str) -> Any:
    kind = _base_type(name)
    if value is None:
        return None
    try:
        if kind is bool:
            if isinstance(value, str):
                low = value.strip().lower()
                if low in {"1", "true", "yes", "on"}:
                    return True
                if low in {"0", "false", "no", "off"}:
                    return False
                raise ValueError(value)
            return bool(value)
        if kind is int:
            if isinstance(value, float) and not value.is_integer():
                raise ValueError(value)
            return int(value)
        if kind is float:
            return float(value)
        return str(value)
    except (TypeError, ValueError):
        raise UsageError(
            f"{name} = {value!r} (from {source}) is not a valid {kind.__name__}.",
            fix=f"set {name} to a {kind.__name__} value.",
        ) from None


def resolve(
    flags: Mapping[str, Any] | None = None,
    magic_config: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    values: Mapping[str, Any] | None = None,
) -> Settings:
    """Merge the layers; ``None`` in a layer means "not set here"."""
    env = os.environ if env is None else env
    layers: list[tuple[str, Mapping[str, Any]]] = [
        ("a flag", flags or {}),
        ("%config RayNB", magic_config or {}),
        ("the environment", {n: env[ENV_PREFIX + n.upper()] for n in _NAMES if ENV_PREFIX + n.upper() in env}),
        ("the values file", values or {}),
    ]
    chosen: dict[str, Any] = {}
    for source, layer in layers:
        for key, value in layer.items():
            if key in _NAMES and key not in chosen and value is not None:
                chosen[key] = _coerce(key, value, source)
    if "nccl" in chosen and chosen["nccl"] not in {"summary", "full", "off"}:
        raise UsageError(f"nccl must be summary, full or off, not {chosen['nccl']!r}.")
    return dataclasses.replace(Settings(), **chosen)


def parse_assignments(items: list[str], flag: str) -> dict[str, str]:
    """``["K=V", ...]`` from repeated ``--env``/``--set`` flags; ``flag`` names the flag in the error."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"{flag} takes KEY=VALUE, not {item!r}")
        out[key] = value
    return out
