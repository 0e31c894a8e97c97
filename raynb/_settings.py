"""In the kernel: every option, declared once, and resolved in one place: flag > ``%config RayNB.*`` > ``RAYNB_*`` env >
values file > default.

Each :class:`Settings` field carries its type, default, help and (where a magic takes it) flag name. The ``%config
RayNB`` traits (:func:`config_traits`) and the magics' argparse flags (:func:`add_flag`) are derived from these
fields, so the three can never disagree (``tests/unit/test_settings.py`` proves it).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Literal, get_args, get_type_hints

from .errors import UsageError

__all__ = [
    "Settings",
    "NcclMode",
    "ConnectVia",
    "resolve",
    "parse_assignments",
    "parse_bool",
    "add_flag",
    "config_traits",
    "raynb_home",
    "ENV_PREFIX",
]

ENV_PREFIX = "RAYNB_"
NcclMode = Literal["summary", "full", "off"]
ConnectVia = Literal["auto", "client", "jobs"]
OnStall = Literal["warn", "stop"]
_TRUE, _FALSE = {"1", "true", "yes", "on"}, {"0", "false", "no", "off"}


def option(default: Any, help: str, flag: str | None = None) -> Any:
    """A Settings field: ``help`` is shown by ``%config RayNB`` and the magics' ``--help``; ``flag`` is the magic flag
    (``--no-X`` for a bool flag that turns the option off)."""
    return dataclasses.field(default=default, metadata={"help": help, "flag": flag})


@dataclass(frozen=True)
class Settings:
    """Everything a magic or API call may be told; each field can come from any layer."""

    workers: int = option(2, "number of Ray Train workers", "--workers")
    gpu: bool = option(False, "one GPU per worker (NCCL); `--gpu $USE_GPU` takes a notebook variable", "--gpu")
    cpus_per_worker: float | None = option(
        None,
        "CPUs each worker reserves, and so its threads (Ray sets OMP_NUM_THREADS from it); default: 1 for CPU "
        "workers, and for GPU workers their node's share -- its CPUs (less one on the head) divided among its GPUs",
        "--cpus-per-worker",
    )
    local_num_cpus: int | None = option(
        None,
        "CPUs the embedded head offers (default: what Ray detects, a container's CPU limit included)",
        "--num-cpus",
    )
    local_num_gpus: int | None = option(
        None, "GPUs the embedded head offers (default: what Ray detects, CUDA_VISIBLE_DEVICES included)", "--num-gpus"
    )
    local_dashboard: bool = option(
        True, "start the embedded head with Ray's dashboard (needs ray[default])", "--no-dashboard"
    )
    local_auth: bool = option(
        True,
        "start the embedded head with Ray's token authentication, so other users of this machine cannot submit jobs "
        "or connect to it",
        "--no-auth",
    )
    local_idle_after_run_s: float = option(
        1800.0,
        "seconds the embedded head stays up after a run ends when no kernel uses it (so a kernel can come back and "
        "read the run)",
    )
    warm_idle_timeout_s: float = option(
        1800.0, "seconds a warm worker group (`%%raytrain --warm`) may sit idle before it ends and frees its workers"
    )
    dashboard_proxy: str | None = option(
        None,
        "the dashboard link where the browser is not on the kernel's machine, as a template with {port}, served by "
        "jupyter-server-proxy: e.g. '/jupyterlab/default/proxy/{port}/' in SageMaker Studio's JupyterLab (under "
        "JupyterHub raynb finds its proxy path by itself)",
    )
    start_timeout_s: float = option(120.0, "seconds `up --local` waits for the embedded head")
    connect_timeout_s: float = option(
        240.0,
        "seconds Ray Client connects may retry (in token mode Ray 2.58 sometimes spends ~30 s on an attempt that "
        "fails before the next one connects; on a busy 2-core machine three such attempts were seen)",
    )
    connect_via: ConnectVia = option(
        "auto",
        "how the kernel reaches a cluster: Ray Client ('client': needs the cluster's Python minor and Ray), Ray Jobs "
        "('jobs': any Python and Ray; a cell travels as source and plain data), or 'auto': Ray Client where they "
        "match, Ray Jobs where they do not, and a plain Ray driver for the embedded head on this machine",
        "--via",
    )
    agent_port: int = option(
        8266,
        "the port raynb's agent asks for on the head on the Ray Jobs path, beside the dashboard's 8265 (where it is "
        "taken, another, which the agent says in its job's log)",
    )
    client_reconnect_grace_s: float = option(
        30.0,
        "seconds the cluster keeps this kernel's Ray Client session after the connection drops (Ray Client's "
        "reconnect grace): a dropped connection that comes back within it carries on; past it, this kernel's objects "
        "and its warm group are gone (runs are not: they belong to the cluster)",
    )
    health_check_interval_s: float = option(
        2.0,
        "how often Ray Train's controller polls workers; a checkpointing ray.train.report() blocks about this "
        "long (metric-only reports take raynb's non-blocking path)",
    )
    fast_train_report: bool = option(True, "route metric-only ray.train.report() to raynb's non-blocking path")
    gpu_sampling: bool = option(
        True, "sample each worker's GPU (utilisation, memory, power) through NVML once a second"
    )
    refresh_hz: float = option(4.0, "live display redraws per second (at most)")
    nccl: NcclMode = option("summary", "NCCL logging: summary (parsed badges), full (raw lines) or off", "--nccl")
    strict_efa: bool = option(
        False, "fail a run whose NCCL fell back to sockets while EFA was expected", "--strict-efa"
    )
    max_failures: int = option(
        0,
        "restarts after a worker fails (Ray Train's FailureConfig); the cell resumes with ray.train.get_checkpoint()",
        "--max-failures",
    )
    total_steps: int | None = option(
        None,
        "the run's total steps: a progress bar, the time left and the cost to finish (without it: the run's own "
        "raynb.report(total=N), or Hugging Face Trainer's max_steps, read by itself)",
        "--steps",
    )
    stall_factor: float = option(
        10.0,
        "a run none of whose ranks makes a new step for this many times its recent step time (and at least "
        "stall_min_s) is called stalled",
    )
    stall_min_s: float = option(
        300.0, "the least quiet time called a stall: room for compiles, evaluations and checkpoints between steps"
    )
    on_stall: OnStall = option(
        "warn",
        "what a stalled run does: warn (the view and `%raytrain ls` say so, with each rank's last report) or stop "
        "(the cluster ends it, saying why; no kernel needs to be there)",
        "--on-stall",
    )
    ended_sink_s: float = option(
        60.0,
        "seconds an ended run's sink stays a process on the head (kernels read its last records meanwhile) before it "
        "hands the run's history to a file there and exits; the cluster's registry answers for it from then on",
    )
    storage_path: str | None = option(None, "where Ray Train keeps run state and checkpoints (default ~/ray_results)")
    shared_mount_path: str | None = option(
        None,
        "a path mounted on every node (NFS, EFS, FSx): storage under it counts as every node's (the doctor checks it)",
    )
    checkpoints: bool = option(
        True,
        "the run saves checkpoints (off: it never does, so node-local storage is fine on many nodes)",
        "--checkpoints",
    )
    kube_context: str | None = option(None, "kubeconfig context (default: the current one)", "--context")
    kube_namespace: str | None = option(
        None, "Kubernetes namespace (default: NAMESPACE in the values file)", "--namespace"
    )
    kube_start_timeout_s: float = option(900.0, "seconds `up` waits for a Kubernetes RayCluster")

    @property
    def poll_gap_s(self) -> float:
        """The notebook asks for a run's picture at most this often: the live view cannot draw it any sooner."""
        return 1.0 / max(self.refresh_hz, 0.5)


_HINTS = get_type_hints(Settings)
FIELDS = {f.name: f for f in fields(Settings)}


def base_type(name: str) -> type:
    """The option's value type: ``int | None`` -> int; a Literal of strings -> str."""
    hint = _HINTS[name]
    args = [a for a in get_args(hint) if a is not type(None)]
    if args and all(isinstance(a, str) for a in args):
        return str
    return args[0] if args else hint


def choices(name: str) -> tuple[str, ...] | None:
    args = get_args(_HINTS[name])
    return args if args and all(isinstance(a, str) for a in args) else None


def parse_bool(text: str) -> bool:
    low = text.strip().lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    raise ValueError(f"expected true or false, not {text!r}")


def _coerce(name: str, value: Any, source: str) -> Any:
    kind = base_type(name)
    try:
        if kind is bool:
            return parse_bool(value) if isinstance(value, str) else bool(value)
        if kind is int:
            if isinstance(value, float) and not value.is_integer():
                raise ValueError(value)
            return int(value)
        if kind is float:
            return float(value)
        value = str(value)
    except (TypeError, ValueError):
        raise UsageError(
            f"{name} = {value!r} (from {source}) is not a valid {kind.__name__}.",
            fix=f"set {name} to a {kind.__name__} value.",
        ) from None
    allowed = choices(name)
    if allowed and value not in allowed:
        raise UsageError(f"{name} must be {', '.join(allowed[:-1])} or {allowed[-1]}, not {value!r} (from {source}).")
    return value


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
        ("the environment", {n: env[ENV_PREFIX + n.upper()] for n in FIELDS if ENV_PREFIX + n.upper() in env}),
        ("the values file", values or {}),
    ]
    chosen: dict[str, Any] = {}
    for source, layer in layers:
        for key, value in layer.items():
            if key in FIELDS and key not in chosen and value is not None:
                chosen[key] = _coerce(key, value, source)
    return dataclasses.replace(Settings(), **chosen)


def overlay(settings: Settings, flags: Mapping[str, Any]) -> Settings:
    """``settings`` with each flag that is set (not ``None``) on top: a call's own arguments win over the settings
    it is handed."""
    given = {k: _coerce(k, v, "a flag") for k, v in flags.items() if k in FIELDS and v is not None}
    return dataclasses.replace(settings, **given)


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def parse_assignments(items: list[str], flag: str) -> dict[str, str]:
    """``["K=V", ...]`` from repeated ``--env``/``--set`` flags; ``flag`` names the flag in the error. KEY is a
    variable name; VALUE is everything after the first ``=``, as given."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not _NAME.fullmatch(key):
            raise UsageError(
                f"{flag} takes KEY=VALUE, not {item!r} (KEY: letters, digits and _)",
                fix=f"e.g. {flag.split()[-1]} NCCL_DEBUG=INFO",
            )
        out[key] = value
    return out


def _argparse_bool(text: str) -> bool:
    try:
        return parse_bool(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def raynb_home() -> Path:
    """Where raynb keeps its files on this machine: ``$RAYNB_HOME``, default ``~/.raynb``."""
    return Path(os.environ.get("RAYNB_HOME", Path.home() / ".raynb")).expanduser()


def add_flag(parser: Any, name: str, *aliases: str) -> None:
    """Add option ``name``'s flag to an argparse parser or group, with the option's own type, help and choices."""
    f = FIELDS[name]
    flag, help_ = f.metadata["flag"], f.metadata["help"]
    if flag is None:
        raise ValueError(f"option {name} has no flag")
    kind = base_type(name)
    if kind is bool and flag.startswith("--no-"):
        parser.add_argument(flag, *aliases, dest=name, action="store_const", const=False, default=None, help=help_)
    elif kind is bool:
        parser.add_argument(
            flag,
            *aliases,
            dest=name,
            nargs="?",
            const=True,
            default=None,
            type=_argparse_bool,
            metavar="BOOL",
            help=help_,
        )
    else:
        parser.add_argument(flag, *aliases, dest=name, type=kind, choices=choices(name), default=None, help=help_)


def config_traits() -> dict[str, Any]:
    """One ``%config RayNB.<name>`` trait per option (None: not set here, take the next layer)."""
    from traitlets import Bool, Float, Integer, Unicode

    kinds = {bool: Bool, int: Integer, float: Float, str: Unicode}
    return {
        name: kinds[base_type(name)](None, allow_none=True, help=f.metadata["help"]).tag(config=True)
        for name, f in FIELDS.items()
    }
