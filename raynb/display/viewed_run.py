"""In the kernel: what the display reads from a run: a typed view, so ``display/`` never imports (or holds) the run
itself."""

from __future__ import annotations

from typing import Any, Protocol

__all__ = ["ViewedRun", "RunShape"]


class RunShape(Protocol):
    @property
    def workers(self) -> int: ...

    @property
    def gpu(self) -> bool: ...

    @property
    def cpus_per_worker(self) -> float: ...

    @property
    def max_failures(self) -> int: ...

    @property
    def usd_per_hour(self) -> float | None: ...

    @property
    def total_steps(self) -> int | None: ...

    @property
    def stall_factor(self) -> float: ...

    @property
    def stall_min_s(self) -> float: ...


class ViewedRun(Protocol):
    """The parts of :class:`raynb.Run` the live view, the text line, the badges and the figure read."""

    @property
    def name(self) -> str: ...

    @property
    def status(self) -> str: ...

    @property
    def phase(self) -> str: ...

    @property
    def step(self) -> int: ...

    @property
    def attempt(self) -> int: ...

    @property
    def elapsed(self) -> float: ...

    @property
    def records(self) -> list[dict[str, Any]]: ...

    @property
    def events(self) -> list[dict[str, Any]]: ...

    @property
    def nccl(self) -> dict[int, dict[str, Any]]: ...

    @property
    def error(self) -> Any: ...

    @property
    def spec(self) -> RunShape: ...
