"""A Train worker's process imports what the run's function will import (``_runs/cell_imports.py`` read the names,
``RAYNB_PRELOAD`` carries them) while it waits for Ray Train, from a thread raynb's setup hook starts
(``train_processes.preload``). An optimisation only: whatever fails here, the function imports again and reports.

Two moments, because a module imported before the worker's actor arrives sees the process as Ray started it, not
as Ray gives it to the actor: ``CUDA_VISIBLE_DEVICES`` and ``OMP_NUM_THREADS`` are set only then. A library that
initialises CUDA as it loads would keep every GPU of the node visible -- every rank on the same device -- and
one that sizes a thread pool, the wrong count. So:

- at once, as the process starts: the packages in :data:`EARLY` only, with ``PYTORCH_NVML_BASED_CUDA_CHECK=1`` for
  the time (torch then answers ``is_available()`` from NVML, without initialising CUDA: transformers asks it as
  its modeling modules load where flash-attn is installed); they are the slow imports of the common cells
  (transformers and a model class: 8-14 s after torch on the H100 node of the first_step records) and start no
  device and no thread pool as they load;
- the rest once the actor has arrived and Ray has set the process's devices and thread count (:func:`settled`):
  within Ray Train's own set-up of the worker, before the function asks for them.
"""

from __future__ import annotations

import contextlib
import importlib
import math
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

__all__ = ["EARLY", "start", "report", "settled"]

#: top-level packages imported before the actor arrives: slow to import, and nothing device- or thread-sized at load
EARLY = frozenset(
    {"transformers", "datasets", "tokenizers", "safetensors", "huggingface_hub", "peft", "pandas", "pyarrow"}
)
#: how long the thread waits for an actor (Ray keeps a process started ahead this long: ``KEEP_ALIVE_S``)
WAIT_S, POLL_S = 150.0, 0.02

_state: dict[str, Any] = {}


def start(entries: str, omp_at_start: str | None) -> threading.Thread | None:
    """Import ``entries`` (``RAYNB_PRELOAD``: ``pkg.mod`` or ``pkg:Name``, comma-separated) from a thread of this
    process. ``omp_at_start``: ``OMP_NUM_THREADS`` as the process started (a value set then is the actor's too)."""
    names = [e for e in (x.strip() for x in entries.split(",")) if e]
    if not names:
        return None
    thread = threading.Thread(target=_run, args=(names, omp_at_start), name="raynb-ahead-imports", daemon=True)
    thread.start()
    return thread


def report() -> dict[str, Any]:
    """What the thread did, for the worker's ``worker_done`` event: each name's outcome (early, late, already -- the
    function or Ray had it first --, failed, not reached) and when it finished."""
    return dict(_state)


def settled(facts: Mapping[str, Any], environ: Mapping[str, str], omp_at_start: str | None) -> bool:
    """Whether Ray has given this process to its actor and set what it sets for it: ``facts`` -- ``actor`` (an id
    or None), ``cpus`` (assigned), ``gpus`` (assigned ids), ``noset_cuda`` and ``override_on_zero`` (Ray's
    switches). Judged by the final values, so a True cannot be early."""
    if facts.get("actor") is None:
        return False
    cpus = facts.get("cpus")
    omp = str(max(math.floor(cpus), 1)) if cpus else "1"
    if omp_at_start is None and environ.get("OMP_NUM_THREADS") != omp:
        return False
    gpus = [str(g) for g in facts.get("gpus") or []]
    if facts.get("noset_cuda") or (not gpus and not facts.get("override_on_zero")):
        return True
    return environ.get("CUDA_VISIBLE_DEVICES") == ",".join(gpus)


def _facts() -> dict[str, Any]:
    import ray
    from ray._private.accelerators import RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO_ENV_VAR as OVERRIDE_ON_ZERO
    from ray._private.accelerators.nvidia_gpu import NOSET_CUDA_VISIBLE_DEVICES_ENV_VAR as NOSET_CUDA
    from ray._private.ray_constants import env_bool

    ctx = ray.get_runtime_context()
    return {
        "actor": ctx.get_actor_id(),
        "cpus": ctx.get_assigned_resources().get("CPU"),
        "gpus": ctx.get_accelerator_ids().get("GPU") or [],
        "noset_cuda": env_bool(NOSET_CUDA, False),
        "override_on_zero": env_bool(OVERRIDE_ON_ZERO, False),
    }


def _run(
    names: list[str],
    omp_at_start: str | None,
    *,
    facts: Callable[[], Mapping[str, Any]] = _facts,
    early: frozenset[str] = EARLY,
) -> None:
    outcome: dict[str, str] = dict.fromkeys(names, "not reached")
    _state.clear()
    _state.update(outcome=outcome, began=time.time())
    with _nvml_cuda_check():
        for name in names:
            if name.split(":")[0].split(".")[0] in early:
                outcome[name] = _import(name, "early")
    deadline = time.monotonic() + WAIT_S
    while not _safe(lambda: settled(facts(), os.environ, omp_at_start)):
        if time.monotonic() > deadline:
            _state["done"] = time.time()
            return
        time.sleep(POLL_S)
    for name in names:
        if outcome[name] == "not reached":
            outcome[name] = _import(name, "late")
    _state["done"] = time.time()


def _import(name: str, when: str) -> str:
    module, _, attr = name.partition(":")
    had = module in sys.modules and (not attr or attr in vars(sys.modules[module]))  # without loading it
    try:
        mod = importlib.import_module(module)
        if attr and not hasattr(mod, attr):  # `from pkg import sub`, a submodule not loaded yet
            importlib.import_module(f"{module}.{attr}")
    except (Exception, SystemExit):  # noqa: BLE001 - not installed here, or its import fails: the function says so
        return "failed"
    return "already" if had else when


def _safe(check: Callable[[], bool]) -> bool:
    try:
        return check()
    except Exception:  # noqa: BLE001 - Ray not connected yet, or an older Ray: not settled
        return False


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
