"""In the kernel: Ray Train's own config objects, merged with raynb's defaults, in the notebook (so a conflict is an
error before anything starts); the launcher passes the result to ``TorchTrainer`` unchanged.

A user who has a ``ScalingConfig``, ``RunConfig``, ``TorchConfig``, ``CheckpointConfig``, datasets or a
``DataConfig`` gives them to ``raynb.train``; raynb adds what it needs (the worker environment, Train's log level, the
run's name and storage path where the user set none) and refuses a value given twice with different answers.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

from .._remote.trainer_plan import TrainerPlan
from ..errors import UsageError

__all__ = ["shape_of", "trainer_kwargs", "plain_trainer", "user_run_name"]

#: The name Ray Train gives a RunConfig created without one (``ray_train_run-<date>_<time>``): not the user's.
_RAY_DEFAULT_NAME = re.compile(r"^ray_train_run-\d{4}-\d\d-\d\d_")


def _ray_default_storage() -> str:
    """Where Ray Train stores runs when told nothing (``~/ray_results``)."""
    import os

    return os.path.expanduser("~/ray_results")


def user_run_name(run_config: Any) -> str | None:
    """The name a user gave their RunConfig, or None when Ray made one up."""
    name = getattr(run_config, "name", None)
    return None if name is None or _RAY_DEFAULT_NAME.match(name) else str(name)


def _conflict(what: str, ours: object, theirs: object, fix: str) -> UsageError:
    return UsageError(f"{what} is given twice: {ours!r} and {theirs!r}.", fix=fix)


def shape_of(
    scaling_config: Any, *, workers: int | None, gpu: bool | None, cpus_per_worker: float | None
) -> dict[str, Any]:
    """The run's shape (workers, gpu, cpus_per_worker) from a user's ScalingConfig; a raynb argument that says
    otherwise is a conflict."""
    if scaling_config is None:
        return {}
    shape: dict[str, Any] = {"workers": int(scaling_config.num_workers), "gpu": bool(scaling_config.use_gpu)}
    cpus = (scaling_config.resources_per_worker or {}).get("CPU")
    if cpus is not None:
        shape["cpus_per_worker"] = float(cpus)
    for name, given in (("workers", workers), ("gpu", gpu), ("cpus_per_worker", cpus_per_worker)):
        if given is not None and name in shape and given != shape[name]:
            field = {"workers": "num_workers", "gpu": "use_gpu", "cpus_per_worker": "resources_per_worker['CPU']"}
            raise _conflict(
                f"{name} (raynb) and ScalingConfig.{field[name]}",
                given,
                shape[name],
                f"give it once: drop {name}= or change the ScalingConfig",
            )
    return shape


def trainer_kwargs(
    *,
    name: str,
    workers: int,
    gpu: bool,
    cpus_per_worker: float,
    worker_env: Mapping[str, str],
    storage_path: str | None,
    scaling_config: Any = None,
    run_config: Any = None,
    torch_config: Any = None,
    checkpoint_config: Any = None,
    datasets: Mapping[str, Any] | None = None,
    dataset_config: Any = None,
    train_log_level: str = "WARNING",
    max_failures: int = 0,
) -> dict[str, Any]:
    """Keyword arguments for ``TorchTrainer(fn, **kwargs)``: the user's objects where given, raynb's defaults (the
    plan's) else."""
    from ray.train import FailureConfig, LoggingConfig

    plan = TrainerPlan(name, workers, gpu, cpus_per_worker, storage_path, max_failures, train_log_level, worker_env)
    if scaling_config is None:
        scaling_config = plan.ray_kwargs()["scaling_config"]
    if run_config is None:
        run_config = plan.ray_kwargs()["run_config"]
    changes: dict[str, Any] = {}
    theirs = run_config.failure_config
    if theirs is None or theirs == FailureConfig():
        changes["failure_config"] = FailureConfig(max_failures=max_failures)
    elif max_failures and theirs.max_failures != max_failures:
        raise _conflict(
            "max_failures (--max-failures) and RunConfig.failure_config.max_failures",
            max_failures,
            theirs.max_failures,
            "give it once",
        )
    if user_run_name(run_config) is None:
        changes["name"] = name
    elif run_config.name != name:
        raise _conflict("The run name (name=/--name) and RunConfig.name", name, run_config.name, "give the name once")
    if storage_path is not None and run_config.storage_path in (None, _ray_default_storage()):
        changes["storage_path"] = storage_path  # the user's RunConfig left it at Ray's default
    if checkpoint_config is not None:
        default = type(checkpoint_config)()
        if run_config.checkpoint_config not in (None, default) and run_config.checkpoint_config != checkpoint_config:
            raise _conflict(
                "checkpoint_config and RunConfig.checkpoint_config",
                checkpoint_config,
                run_config.checkpoint_config,
                "give the CheckpointConfig once",
            )
        changes["checkpoint_config"] = checkpoint_config
    if run_config.logging_config is None or run_config.logging_config == LoggingConfig():
        # Train's INFO lines (resource requests, worker group layout, prepare_model's narration) would bury the user's
        # own prints. RunConfig always fills in LoggingConfig() (INFO): that, like None, is "not given"
        changes["logging_config"] = LoggingConfig(log_level=train_log_level)
    user_rt = dict(run_config.worker_runtime_env or {})
    user_vars = dict(user_rt.get("env_vars") or {})
    changes["worker_runtime_env"] = {**user_rt, "env_vars": {**worker_env, **user_vars}}  # the user's values win
    kwargs: dict[str, Any] = {
        "scaling_config": scaling_config,
        "run_config": dataclasses.replace(run_config, **changes),
    }
    if torch_config is not None:
        kwargs["torch_config"] = torch_config
    if datasets:
        kwargs["datasets"] = dict(datasets)
    if dataset_config is not None:
        kwargs["dataset_config"] = dataset_config
    return kwargs


def plain_trainer(
    *,
    name: str,
    workers: int,
    gpu: bool,
    cpus_per_worker: float,
    worker_env: Mapping[str, str],
    storage_path: str | None,
    max_failures: int,
    train_log_level: str = "WARNING",
    **ray_objects: Any,
) -> dict[str, Any]:
    """raynb's defaults for ``TorchTrainer`` as plain data, made into Ray's objects on the cluster (the launcher's
    ``TrainerPlan.ray_kwargs``): the Ray Jobs path, where the kernel's Ray is not the cluster's and Ray's own objects
    cannot cross. A user's Ray Train objects cannot either, so they are refused here, naming them."""
    given = sorted(k for k, v in ray_objects.items() if v is not None)
    if given:
        raise UsageError(
            f"Ray Train objects ({', '.join(given)}) cannot travel through Ray Jobs: this kernel's Ray is not the "
            "cluster's.",
            fix="give their values through raynb's own arguments (workers=, gpu=, cpus_per_worker=, max_failures=, "
            "the storage path), or make them inside the training function",
        )
    plan = TrainerPlan(name, workers, gpu, cpus_per_worker, storage_path, max_failures, train_log_level, worker_env)
    return {"plain": plan.to_wire()}
