"""In any process: what a run is asked to be: the shape, the function's config, the workers' environment -- as the
notebook resolved it, and (``summary``) as the cluster's run registry keeps it for kernels that attach later."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

__all__ = ["RunSpec"]


@dataclass
class RunSpec:
    workers: int
    gpu: bool
    cpus_per_worker: float
    config: dict[str, Any]
    name: str
    worker_env: dict[str, str]
    storage_path: str | None
    cell_file: str | None = None
    cell_source: str | None = None
    cwd: str | None = None
    #: a faster network than sockets is expected between nodes (EFA requested): sockets then count as a fallback
    expect_efa: bool = False
    gdr_expected: bool | None = None
    user_env: dict[str, str] | None = None
    #: TorchTrainer's keyword arguments (ScalingConfig, RunConfig, ...), merged in the notebook
    trainer_kwargs: dict[str, Any] = field(default_factory=dict)
    #: where the run's launcher renews its lease on the embedded head (None on Kubernetes)
    leases_dir: str | None = None
    #: restarts allowed after a worker fails (Ray Train's FailureConfig)
    max_failures: int = 0
    #: what the cluster's GPU nodes cost per hour while the run holds them (None: the embedded cluster, no price)
    usd_per_hour: float | None = None
    #: the run's total steps as the notebook gave them (None: the run may report its own)
    total_steps: int | None = None
    #: when a quiet run counts as stalled, and what then: warn or stop (``_shared/progress.stall``)
    stall_factor: float = 10.0
    stall_min_s: float = 300.0
    on_stall: str = "warn"

    def summary(self) -> dict[str, Any]:
        """What a kernel that attaches later needs (Ray's objects stay behind: datasets can be large)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "trainer_kwargs"}
