"""raynb: train models on a Ray cluster from a notebook.

``%load_ext raynb`` gives ``%raycluster`` and ``%%raytrain``; each has a plain-Python twin:
``raynb.up(local=True)`` (or ``raynb.up(values="manifests/values.env")`` for the DLC RayCluster on Kubernetes),
``raynb.train(fn, workers=2)``, ``raynb.report(loss=...)``, ``raynb.doctor()``, ``raynb.clusters()``, ``raynb.down()``.
Heavy parts (IPython, pandas, plotly, Ray Train) load on first use, so workers import raynb cheaply.
"""

from __future__ import annotations

from typing import Any

from .errors import RaynbError
from .metrics import report

__version__ = "0.1.0"
__all__ = [
    "up", "down", "current", "clusters", "train", "report", "doctor", "bench", "Cluster", "Run", "RaynbError",
    "load_ipython_extension",
    "unload_ipython_extension", "__version__",
]

_LAZY = {
    "up": ("cluster", "up"),
    "down": ("cluster", "down"),
    "current": ("cluster", "current"),
    "clusters": ("cluster", "clusters"),
    "Cluster": ("cluster", "Cluster"),
    "train": ("run", "train"),
    "Run": ("run", "Run"),
    "doctor": ("preflight", "doctor"),
    "bench": ("probe", "bench"),
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        mod, attr = _LAZY[name]
        return getattr(importlib.import_module(f".{mod}", __name__), attr)
    raise AttributeError(f"module 'raynb' has no attribute {name!r}")


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext raynb`` (or ``c.InteractiveShellApp.extensions = ["raynb"]``)."""
    from .magics import register

    register(ipython)


def unload_ipython_extension(ipython: Any) -> None:
    from .magics import unregister

    unregister(ipython)
