"""In the kernel and each Train worker (``raynb.report``): raynb trains models on a Ray cluster from a notebook.

``%load_ext raynb`` gives ``%raycluster`` and ``%%raytrain``; each has a plain-Python twin:
``raynb.up(local=True)`` (or ``raynb.up(values="manifests/values.env")`` for the DLC RayCluster on Kubernetes),
``raynb.train(fn, workers=2)``, ``raynb.report(loss=...)``, ``raynb.doctor()``, ``raynb.clusters()``, ``raynb.down()``;
runs on the cluster: ``raynb.runs()``, ``raynb.attach(name)``, ``raynb.stop_run(name)``, ``raynb.remove_run(name)``,
``raynb.run_logs(name)``; a worker group that stays across cells: ``raynb.warm(workers=2)``; MFU's arithmetic:
``raynb.flops_per_token(model, seq_len)``.

Everything in ``__all__`` is the public API; modules with a leading underscore are the implementation. Heavy parts
(IPython, pandas, plotly, Ray Train) load on first use, so workers import raynb cheaply.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._remote.report import report
from ._shared.flops import flops_per_token
from ._shared.worker_env import TCP_ENV
from .errors import (
    CaptureError,
    CellSyntaxError,
    ClusterStartError,
    ConnectError,
    InsufficientResourcesError,
    KubeError,
    ManifestError,
    NotConnectedError,
    RaynbError,
    RunAborted,
    TrainingFailedError,
    UndefinedNameError,
    UsageError,
    VersionMismatchError,
    WarmCellError,
    WarmGroupLost,
)

if TYPE_CHECKING:
    from ._checks import Checklist
    from ._cluster.cluster import Cluster, ClusterStatus, clusters, current, down, up
    from ._doctor.bench import ProbeResult, bench
    from ._doctor.doctor import doctor
    from ._runs.catalog import RunList, attach, remove_run, run_logs, runs, stop_run
    from ._runs.run import Run
    from ._runs.run_error import RunError
    from ._runs.train import train
    from ._runs.warm import WarmGroup, warm
    from ._settings import Settings

__version__ = "0.1.0"
__all__ = [
    # clusters
    "up",
    "down",
    "current",
    "clusters",
    "Cluster",
    "ClusterStatus",
    # runs
    "train",
    "report",
    "Run",
    "runs",
    "attach",
    "stop_run",
    "remove_run",
    "run_logs",
    "warm",
    "WarmGroup",
    "RunList",
    "RunError",
    "Settings",
    "TCP_ENV",
    "flops_per_token",
    # checks
    "doctor",
    "Checklist",
    "bench",
    "ProbeResult",
    # errors
    "RaynbError",
    "UsageError",
    "NotConnectedError",
    "ClusterStartError",
    "ConnectError",
    "VersionMismatchError",
    "KubeError",
    "ManifestError",
    "InsufficientResourcesError",
    "CellSyntaxError",
    "CaptureError",
    "UndefinedNameError",
    "TrainingFailedError",
    "RunAborted",
    "WarmCellError",
    "WarmGroupLost",
    # IPython
    "load_ipython_extension",
    "unload_ipython_extension",
    "__version__",
]

_LAZY = {
    "up": "_cluster.cluster",
    "down": "_cluster.cluster",
    "current": "_cluster.cluster",
    "clusters": "_cluster.cluster",
    "Cluster": "_cluster.cluster",
    "ClusterStatus": "_cluster.cluster",
    "train": "_runs.train",
    "Run": "_runs.run",
    "RunError": "_runs.run_error",
    "runs": "_runs.catalog",
    "attach": "_runs.catalog",
    "stop_run": "_runs.catalog",
    "remove_run": "_runs.catalog",
    "run_logs": "_runs.catalog",
    "warm": "_runs.warm",
    "WarmGroup": "_runs.warm",
    "RunList": "_runs.catalog",
    "Settings": "_settings",
    "doctor": "_doctor.doctor",
    "Checklist": "_checks",
    "bench": "_doctor.bench",
    "ProbeResult": "_doctor.bench",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'raynb' has no attribute {name!r}")


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext raynb`` (or ``c.InteractiveShellApp.extensions = ["raynb"]``)."""
    from .magics import register

    register(ipython)


def unload_ipython_extension(ipython: Any) -> None:
    from .magics import unregister

    unregister(ipython)
