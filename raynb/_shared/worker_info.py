"""In any process: what each Train worker is told besides the cell, declared once. The kernel fills it from the run's
spec and settings; the launcher adds what it started ahead; the worker reads it. Standard library only.

It crosses the seam as ``to_wire()`` (plain data, in the launch spec) and reaches the workers as itself, inside the
training function's closure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any, Protocol

__all__ = ["WorkerInfo"]


class _Spec(Protocol):
    cwd: str | None
    expect_efa: bool
    gdr_expected: bool | None


class _Settings(Protocol):
    @property
    def fast_train_report(self) -> bool: ...

    @property
    def gpu_sampling(self) -> bool: ...


@dataclass(frozen=True)
class WorkerInfo:
    #: the notebook's folder: the worker runs there (relative paths) and imports the notebook's own modules from it
    cwd: str | None = None
    #: NCCL's badge: EFA expected on these nodes, and GPUDirect RDMA (None: not known)
    expect_efa: bool = False
    gdr_expected: bool | None = None
    #: settings: metric-only ray.train.report() takes raynb's non-blocking path; each GPU is sampled through NVML
    fast_train_report: bool = True
    gpu_sampling: bool = True
    #: the launcher's: the workers' env as Ray writes it, where it started their processes ahead (None: it did not)
    started_ahead_env: str | None = None

    @classmethod
    def for_run(cls, spec: _Spec, settings: _Settings) -> WorkerInfo:
        """The kernel's: from the run's spec (``RunSpec``) and its settings (``Settings``)."""
        return cls(spec.cwd, spec.expect_efa, spec.gdr_expected, settings.fast_train_report, settings.gpu_sampling)

    def to_wire(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> WorkerInfo:
        """What ``data`` says; fields another raynb sends that this one does not know are left out."""
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})
