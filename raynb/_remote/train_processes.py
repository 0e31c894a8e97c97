"""On the head (the launcher) and in each Train worker: Ray Train's processes for a run, started by the launcher as the
run begins, side by side, instead of one after another on the run's way to its function (issue 39).

``fit()`` makes its controller, the controller makes its helpers (a placement-group cleaner, a synchronisation
actor, a dataset manager) and then the workers. Each is a new Python process: the controller's and the workers'
runtime envs (Ray Train's variables, raynb's worker variables) match none of the processes Ray started ahead, which
have none. Measured on the 2-core machine (``bench/first_step.py --dry-run``, ``ray_processes``): the controller's
process 4.3 s from start to ready, then the helpers', then a worker's 4.5 s more, then its ``import torch`` in
``init_train_context``; the same chain on a GPU node before the function starts.

Here the launcher asks the node's raylet to start them now, all at once (the raylet's ``PrestartWorkers``, which
Ray's core worker also has but does not expose to Python), with the exact runtime envs Ray Train will ask for,
computed as Ray Train computes them: Ray hands a new actor an idle process of the same runtime env, so the controller
and workers find theirs started (or starting). A worker's process imports torch while it waits (:func:`preload`,
Ray's ``worker_process_setup_hook`` through its variable): the import leaves the run's path.

Only the launcher's node: Ray Train attaches its controller and helpers there; workers are started there as far as
its resources hold them (all of them on the embedded head; none on a Kubernetes head without GPUs, where a GPU
worker's node is not known before the placement group). Only where the job has no runtime env of its own (the
embedded head): elsewhere raynb's job ships the package as ``py_modules``, which Ray merges into every env with the
package's URIs, not copied here -- so nothing is started ahead there (the hook still runs: torch is imported as a
worker's process starts). Ray internals (the raylet's ``PrestartWorkers`` call, the hook's variable): any error, or a
Ray that computes the envs differently, leaves the processes unused -- they go after ``KEEP_ALIVE_S`` -- and Ray Train
starts its own, as before; the worker says which (``env_as_started_ahead`` in its ``worker_done``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import time
from collections.abc import Mapping
from typing import Any

__all__ = [
    "start_ahead",
    "prestart_here",
    "preload",
    "preloaded_at",
    "follow_thread_share",
    "controller_env",
    "worker_runtime_env",
    "serialized_as_ray_merges",
    "fits",
]

log = logging.getLogger(__name__)

#: when :func:`preload` finished in this process (None: it did not run here)
_preloaded_at: float | None = None
#: how long a started process waits for its actor (Ray's keep-alive; then it is an ordinary idle worker)
KEEP_ALIVE_S = 120
#: the controller, then its placement-group cleaner and synchronisation actor (made before the workers), all in the
#: controller's env; its dataset manager comes after the workers and is left to Ray
CONTROLLER_PROCESSES = 3


def preload() -> None:
    """Ray's setup hook in a Train worker's process: import torch (seconds) before the worker's actor arrives, then
    start importing the slow packages the run's function imports (``ahead_imports.py``). Never raises: Ray ends a worker whose
    hook fails."""
    global _preloaded_at
    try:
        import torch.distributed  # noqa: F401 - torch, and its process groups (Ray Train's backend sets one up)
    except Exception:  # noqa: BLE001 - an optimisation only; the run imports it again and reports the error
        return
    _preloaded_at = time.time()
    from .._shared.worker_env import PRELOAD_VAR
    from . import ahead_imports

    with contextlib.suppress(Exception):
        ahead_imports.start(os.environ.get(PRELOAD_VAR, ""))


def follow_thread_share() -> int | None:
    """In a process whose torch was preloaded: the thread count Ray set for this worker's actor (``OMP_NUM_THREADS``,
    from its CPUs), which torch reads only as it loads -- before the actor came, here. Measured on an H100 node
    (record first_step-h100-2026-12-06m): 16 threads for a worker of 15 CPUs, and a compile cache keyed on 16
    that a 15-thread run then missed. The count set, else None."""
    want = os.environ.get("OMP_NUM_THREADS", "")
    if _preloaded_at is None or not want.isdigit() or int(want) < 1:
        return None
    import torch

    if torch.get_num_threads() != int(want):
        torch.set_num_threads(int(want))
    return int(want)


def preloaded_at() -> float | None:
    """When :func:`preload` imported torch in this process, if it ran here (the worker says so in its events)."""
    return _preloaded_at


def controller_env() -> dict[str, Any]:
    """The runtime env Ray Train's ``fit()`` gives its controller (and the controller's actors inherit), from this
    process's variables, as ``DataParallelTrainer._initialize_and_run_controller`` makes it."""
    from ray._common.constants import RAY_WARN_BLOCKING_GET_INSIDE_ASYNC_ENV_VAR
    from ray.train.v2._internal.constants import (
        DEFAULT_RAY_WARN_BLOCKING_GET_INSIDE_ASYNC_VALUE,
        get_env_vars_to_propagate,
    )

    env_vars = get_env_vars_to_propagate()
    env_vars.setdefault(RAY_WARN_BLOCKING_GET_INSIDE_ASYNC_ENV_VAR, DEFAULT_RAY_WARN_BLOCKING_GET_INSIDE_ASYNC_VALUE)
    return {"env_vars": env_vars}


def worker_runtime_env(run_config_env: Mapping[str, Any] | None) -> dict[str, Any]:
    """The runtime env each Train worker gets: the one the controller asks for (``WorkerGroup._get_worker_runtime_env``:
    Ray Train's propagated variables, then the run's worker env), merged by Ray into the controller's own, since the
    controller makes the workers (Ray's ``OverrideRuntimeEnv``: the parent's fields, the child's over them, the
    ``env_vars`` of both)."""
    from ray.train.v2._internal.constants import get_env_vars_to_propagate

    asked = dict(run_config_env or {})
    asked["env_vars"] = {**get_env_vars_to_propagate(), **(asked.get("env_vars") or {})}
    merged = controller_env()
    for key, value in asked.items():
        merged[key] = {**merged[key], **value} if key == "env_vars" and key in merged else value
    return merged


def serialized_as_ray_merges(runtime_env: Mapping[str, Any]) -> str:
    """A merged runtime env as Ray's core worker writes it (nlohmann's ``dump()``: sorted keys, no spaces, UTF-8):
    the string whose hash picks a worker process."""
    return json.dumps(runtime_env, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def fits(total: Mapping[str, float], per_worker: Mapping[str, float], workers: int) -> int:
    """How many of ``workers`` a node with ``total`` resources holds at once."""
    held = [math.floor(total.get(r, 0.0) / v + 1e-9) for r, v in per_worker.items() if v > 0]
    return max(0, min([workers, *held]))


def _here() -> tuple[str, Mapping[str, float]]:
    """This node's raylet (host:port) and its resources."""
    import ray

    node_id = ray.get_runtime_context().get_node_id()
    node = next(n for n in ray.nodes() if n.get("NodeID") == node_id)
    return f"{node['NodeManagerAddress']}:{node['NodeManagerPort']}", node.get("Resources") or {}


def prestart_here(
    runtime_env: Mapping[str, Any], count: int, address: str | None = None, *, serialized: str | None = None
) -> None:
    """Ask this node's raylet to start ``count`` worker processes with ``runtime_env`` now; Ray hands them to the
    next actors that ask for the same env (kept ``KEEP_ALIVE_S`` for them). ``serialized``: the env as the actors'
    creator's Ray will write it, where that is not Python's own serialisation (:func:`serialized_as_ray_merges`)."""
    from ray._private.grpc_utils import init_grpc_channel
    from ray._private.utils import get_runtime_env_info, parse_runtime_env_for_task_or_actor
    from ray.core.generated import common_pb2, node_manager_pb2, node_manager_pb2_grpc

    # the same serialised env (and so the same hash) as the actor's own options give
    info = get_runtime_env_info(parse_runtime_env_for_task_or_actor(dict(runtime_env)), serialize=False)
    if serialized is not None:
        info.serialized_runtime_env = serialized
    channel = init_grpc_channel(address or _here()[0])  # with Ray's token, where the cluster asks for one
    request = node_manager_pb2.PrestartWorkersRequest(
        language=common_pb2.PYTHON, runtime_env_info=info, keep_alive_duration_secs=KEEP_ALIVE_S, num_workers=count
    )
    try:
        node_manager_pb2_grpc.NodeManagerServiceStub(channel).PrestartWorkers(request, timeout=10)
    finally:
        channel.close()


def start_ahead(trainer_kwargs: Mapping[str, Any]) -> str | None:
    """Start the run's controller-side processes and, where this node holds them, its workers' (a worker's env names
    :func:`preload` as its setup hook: ``_shared/worker_env.py``). The workers' env as Ray will write it, if their
    processes were started (a worker compares its own with it), else None. ``trainer_kwargs``: ``TorchTrainer``'s
    (``scaling_config``, ``run_config``, the worker env in ``run_config.worker_runtime_env``)."""
    import ray

    try:
        if ray.get_runtime_context().runtime_env:  # the job's own (raynb's py_modules off the embedded head): above
            return None
        address, total = _here()
        prestart_here(controller_env(), CONTROLLER_PROCESSES, address)
        scaling = trainer_kwargs["scaling_config"]
        per_worker = scaling.resources_per_worker or {"CPU": 1.0, **({"GPU": 1.0} if scaling.use_gpu else {})}
        count = fits(total, per_worker, scaling.num_workers)
        if not count:
            return None
        env = worker_runtime_env(trainer_kwargs["run_config"].worker_runtime_env)
        serialized = serialized_as_ray_merges(env)
        prestart_here(env, count, address, serialized=serialized)
        return serialized
    except Exception as e:  # noqa: BLE001 - an optimisation only: Ray Train starts its own processes
        log.debug("raynb: Ray Train's processes not started ahead: %s", e)
        return None
