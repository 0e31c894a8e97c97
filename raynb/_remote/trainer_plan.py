"""In the kernel and on the head (the launcher): raynb's defaults for ``TorchTrainer``, described once as data.

The kernel makes Ray's objects from it where Ray's objects cross (Ray Client, a driver) and merges a user's own
objects into them; through Ray Jobs, where they cannot cross, the plan crosses as ``to_wire()`` and the launcher
makes the same objects with the cluster's Ray."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["TrainerPlan"]


@dataclass(frozen=True)
class TrainerPlan:
    name: str
    workers: int
    gpu: bool
    cpus_per_worker: float
    storage_path: str | None = None
    max_failures: int = 0
    #: Ray Train's own log level: its INFO lines (resource requests, the group's layout) would bury the user's prints
    log_level: str = "WARNING"
    worker_env: Mapping[str, str] = field(default_factory=dict)

    @property
    def resources_per_worker(self) -> dict[str, float]:
        return {"CPU": self.cpus_per_worker, **({"GPU": 1} if self.gpu else {})}

    def ray_kwargs(self) -> dict[str, Any]:
        """``TorchTrainer``'s ``scaling_config`` and ``run_config``, made with this process's Ray."""
        from ray.train import FailureConfig, LoggingConfig, RunConfig, ScalingConfig

        scaling = ScalingConfig(
            num_workers=self.workers, use_gpu=self.gpu, resources_per_worker=self.resources_per_worker
        )
        run = RunConfig(
            name=self.name,
            storage_path=self.storage_path,
            failure_config=FailureConfig(max_failures=self.max_failures),
            logging_config=LoggingConfig(log_level=self.log_level),
            worker_runtime_env={"env_vars": dict(self.worker_env)},
        )
        return {"scaling_config": scaling, "run_config": run}

    def to_wire(self) -> dict[str, Any]:
        """Plain data; ``resources_per_worker`` too, as an earlier raynb's launcher reads it."""
        return {**asdict(self), "worker_env": dict(self.worker_env), "resources_per_worker": self.resources_per_worker}

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> TrainerPlan:
        """The plan ``data`` describes; an earlier raynb's description (``resources_per_worker``, ``log_level``)
        reads too."""
        data = dict(data)
        if "cpus_per_worker" not in data:
            data["cpus_per_worker"] = float((data.get("resources_per_worker") or {}).get("CPU", 1.0))
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in known})
