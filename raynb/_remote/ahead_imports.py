"""In each Train worker: a Train worker's process imports the slow packages the run's function will import
(``_runs/cell_imports.py`` read the names, ``RAYNB_PRELOAD`` carries them) while it waits for Ray Train, from a
thread raynb's setup hook starts (``train_processes.preload``) once torch is in. An optimisation only: whatever fails
here, the function imports again and reports.

Only the packages of :data:`~raynb._shared.worker_env.AHEAD` (transformers and its kin), because of what a module
imported here meets:

- the process as Ray started it, not as Ray gives it to the actor: ``CUDA_VISIBLE_DEVICES`` and ``OMP_NUM_THREADS``
  are set only then, so a library that initialises CUDA as it loads would keep every GPU of the node visible (every
  rank on one device) and one that sizes a thread pool, the wrong count. These start neither as they load; torch's
  ``is_available()``, which transformers asks as its modeling modules load where flash-attn is installed, answers
  from NVML meanwhile (``PYTORCH_NVML_BASED_CUDA_CHECK=1``) without initialising CUDA;
- the main thread importing at the same time (Ray Train's set-up, then the function): two threads entering one
  package's circular imports from different ends get a module half-imported (seen in the kernel with Ray's own
  modules, 9b20979). These import neither Ray nor anything that imports them, and torch is in before they start.

Measured (first_step-h100-2026-12-07c): transformers and a model class took 8-14 s after torch on the H100 node;
the first run's function waited 2.0 s for the end of that import where a run without it spent 7.7 s.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

from .._shared.worker_env import ahead

__all__ = ["start", "report"]

_state: dict[str, Any] = {}


def start(entries: str) -> threading.Thread | None:
    """Import ``entries`` (``RAYNB_PRELOAD``: ``pkg.mod`` or ``pkg:Name``, comma-separated; those of packages outside
    ``worker_env.AHEAD`` are left to the function) from a thread of this process."""
    names = list(ahead(entries.split(",")))
    if not names:
        return None
    thread = threading.Thread(target=_run, args=(names,), name="raynb-ahead-imports", daemon=True)
    thread.start()
    return thread


def report() -> dict[str, Any]:
    """What the thread did, for the worker's ``worker_done`` event: each name's outcome (``ahead``; ``already`` --
    Ray or the function had it first --; ``failed``; ``not reached``) and when it finished (``done``)."""
    return dict(_state)


def _run(names: list[str]) -> None:
    outcome: dict[str, str] = dict.fromkeys(names, "not reached")
    _state.clear()
    _state.update(outcome=outcome, began=time.time())
    with _nvml_cuda_check():
        for name in names:
            outcome[name] = _import(name)
    _state["done"] = time.time()


def _import(name: str) -> str:
    module, _, attr = name.partition(":")
    had = module in sys.modules and (not attr or attr in vars(sys.modules[module]))  # without loading it
    try:
        mod = importlib.import_module(module)
        if attr and not hasattr(mod, attr):  # `from pkg import sub`, a submodule not loaded yet
            importlib.import_module(f"{module}.{attr}")
    except (Exception, SystemExit):  # noqa: BLE001 - not installed here, or its import fails: the function says so
        return "failed"
    return "already" if had else "ahead"


@contextlib.contextmanager
def _nvml_cuda_check() -> Iterator[None]:
    before = os.environ.get("PYTORCH_NVML_BASED_CUDA_CHECK")
    os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("PYTORCH_NVML_BASED_CUDA_CHECK", None)
        else:
            os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = before
