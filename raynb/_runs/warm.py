"""In the kernel: warm workers: a Ray Train worker group that lives across cells (``%%raytrain --warm``,
``raynb.warm()``).

The group is one ordinary raynb run (listed by ``%raytrain ls``, drawn live, NCCL badges and all) whose function is
``_remote/warm_worker.warm_loop``: it takes cells from a mailbox actor and runs them in a namespace each rank keeps. The
process group is set up once; later cells start in the time of a round trip. The mailbox belongs to this kernel's
connection, so the group ends with the kernel (within Ray Client's 30 s grace plus one poll), after an idle
time-out, or on ``stop()``.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from typing import Any

from .._client import side
from .._current import hold_warm, resolve_settings, warm_group
from .._settings import Settings
from ..display.run_view import clock
from ..errors import RaynbError, UsageError, WarmCellError, WarmGroupLost, not_connected
from .run import Run

__all__ = ["WarmGroup", "warm", "current_warm"]

#: a rank that has not stopped this long after an interrupt is stuck (in a collective): the group is restarted
STUCK_AFTER_S = 10.0


def current_warm() -> WarmGroup | None:
    """This kernel's warm group, if one is up (``_current`` holds it, so the cluster's status reads it too)."""
    group = warm_group()
    return group if isinstance(group, WarmGroup) else None


@dataclasses.dataclass(frozen=True)
class Shape:
    workers: int
    gpu: bool
    cpus_per_worker: float

    def __str__(self) -> str:
        return f"{self.workers} {'GPU' if self.gpu else 'CPU'} workers ({self.cpus_per_worker:g} CPUs each)"


class WarmGroup:
    """A live worker group: ``run(fn, config)``, ``run_cell(source)``, ``pull(name, rank)``, ``stop()``."""

    def __init__(self, shape: Shape, settings: Settings, idle_s: float) -> None:
        from .._remote.warm_worker import warm_loop
        from . import train
        from .cell import serialize

        self.shape, self.settings, self.idle_s = shape, settings, idle_s
        self.started = time.time()
        self.mailbox = side().open_warm(shape.workers, idle_s)
        self.run_obj: Run = train._start_payload(
            serialize(warm_loop),
            dataclasses.replace(settings, cpus_per_worker=shape.cpus_per_worker),
            config={"mailbox": self.mailbox.token},
            name=f"warm-{time.strftime('%Y%m%d-%H%M%S')}",
            env=None,
            cell_file=None,
            cell_source=None,
            cwd=os.getcwd(),
        )
        train.follow(self.run_obj, False, settings.refresh_hz, wait=False)  # notes the end, whoever ends it
        self.cells = 0
        self.memory: dict[int, dict[str, float]] = {}  # rank -> {"ram": MB, "gpu": MB}, as of its last cell

    # --- what a user reads ---------------------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.run_obj.name

    @property
    def alive(self) -> bool:
        return not self.run_obj.done()

    @property
    def gpus(self) -> int:
        return self.shape.workers if self.shape.gpu else 0

    def line(self) -> str:
        """One line for the cluster's status: which group, its shape, what it holds."""
        return f"warm group {self.name}: {self.shape}, holds {self.gpus} GPUs"

    def __repr__(self) -> str:
        if not self.alive:
            return f"warm group {self.name}: ended ({self.run_obj.status})"
        idle = self.mailbox.idle_for()
        mem = "; ".join(f"rank {r} {_memory_text(m)}" for r, m in sorted(self.memory.items())) or "-"
        return (
            f"warm group {self.name}: {self.shape}, up {clock(time.time() - self.started)}, idle {clock(idle)} "
            f"(ends after {clock(self.idle_s)} idle), holds {self.gpus} GPUs, {self.cells} cells run, "
            f"memory per rank: {mem}"
        )

    # --- running cells -------------------------------------------------------------------------------------------
    def run(self, fn: Any, config: dict[str, Any] | None = None) -> Any:
        """``fn(config)`` on every rank of the group; returns rank 0's value."""
        from ray import cloudpickle

        from .cell import pack_portable

        packed = cloudpickle.dumps(fn) if side().code_crosses else pack_portable(fn)  # else as source
        return self._execute({"kind": "call", "fn": packed, "config": config or {}}, None)

    def run_cell(
        self, source: str, namespace: dict[str, Any], *, first_line: int = 2, display: bool | str | None = None
    ) -> Any:
        """Run a cell's text on every rank, in the namespace each rank keeps; returns its last expression's value
        on rank 0 (the repr, with a note, when that value cannot travel back)."""
        filename = f"<warm-cell-{self.cells + 1}>"
        names = _read_names(source)
        shipped = {k: namespace[k] for k in names if k in namespace and not k.startswith("_") and k != "raynb"}
        cell = {"kind": "cell", "source": source, "filename": filename, "first_line": first_line, "globals": shipped}
        if side().code_crosses:
            _check_travels(shipped)
        else:  # Ray Jobs: the notebook's values cross as plain data, its functions and classes as source
            from .cell import capture

            cell.update(globals={}, portable=capture(sorted(shipped), namespace))
        return self._execute(cell, "\n" * (first_line - 1) + source, display=display)

    def pull(self, name: str, rank: int = 0) -> Any:
        """The value ``name`` has on ``rank`` (what a warm cell assigned there)."""
        if not 0 <= rank < self.shape.workers:
            raise UsageError(f"The warm group has ranks 0..{self.shape.workers - 1}; there is no rank {rank}.")
        return self._execute({"kind": "pull", "name": name, "rank": rank}, None, only_rank=rank)

    def _execute(
        self, cell: dict[str, Any], source: str | None, *, display: bool | str | None = False, only_rank: int = 0
    ) -> Any:
        from ray import cloudpickle

        if not self.alive:
            raise WarmGroupLost(
                f"The warm group {self.name} has ended ({self.run_obj.status}); its state is gone.",
                fix="the next `%%raytrain --warm` cell (or raynb.warm()) starts a new one",
            )
        view = None
        if display is not False:
            from ..display import LiveView

            view = LiveView(self.run_obj, mode=display if isinstance(display, str) else None).start()
        cell_id = self.mailbox.post(cell)
        self.cells += 1
        try:
            results = self._wait(cell_id, view)
        finally:
            if view is not None:
                view.finish()
        for rank, r in results.items():
            if "memory" in r:
                self.memory[rank] = r["memory"]
        if any(r.get("interrupted") for r in results.values()):
            print(f"interrupted on every rank; the warm group {self.name} and its state are kept")
            raise KeyboardInterrupt
        failed = sorted((rank, r) for rank, r in results.items() if "error" in r)
        if failed:
            raise _cell_error(failed, cell, source)
        mine = results.get(only_rank, {})
        if "value" in mine:
            try:
                return cloudpickle.loads(mine["value"])
            except Exception as e:  # noqa: BLE001 - e.g. a DDP model: it needs the workers' process group
                print(
                    f"(the value came back but cannot be rebuilt in the notebook -- {type(e).__name__}: {e}; its repr:)"
                )
                return _Repr(mine["repr"])
        if "repr" in mine:
            print(f"(the value cannot travel back to the notebook -- {mine['unpicklable']}; its repr:)")
            return _Repr(mine["repr"])
        return None

    def _wait(self, cell_id: int, view: Any) -> dict[int, dict[str, Any]]:
        """Wait for every rank's result. The Ray calls happen in a thread: an interrupt lands in this thread's
        event wait, never inside a Ray Client call (which it could leave hanging)."""
        got: dict[int, dict[str, Any]] = {}
        done, failure = threading.Event(), []

        def poll() -> None:
            try:
                while not done.is_set():
                    got.update(self.mailbox.results(cell_id, 0.25))
                    if len(got) >= self.shape.workers or self.run_obj.done():
                        break
            except Exception as e:  # noqa: BLE001 - the connection or the mailbox went away
                failure.append(e)
            finally:
                done.set()

        threading.Thread(target=poll, name="raynb-warm-wait", daemon=True).start()
        try:
            while not done.wait(0.25):
                if view is not None:
                    view.refresh()
        except KeyboardInterrupt:
            self.mailbox.interrupt(cell_id)
            if not done.wait(STUCK_AFTER_S):
                stuck = sorted(set(range(self.shape.workers)) - set(got))
                done.set()
                self.stop(force=True)
                raise WarmGroupLost(
                    f"Rank(s) {', '.join(map(str, stuck))} did not stop within {STUCK_AFTER_S:g} s of the interrupt "
                    "(blocked in a collective, or in C code): the warm group was stopped and its state is lost.",
                    fix="run the cells that build the state again: the next warm cell starts a new group",
                ) from None
        if len(got) < self.shape.workers:
            raise WarmGroupLost(
                f"The warm group {self.name} ended during the cell ({self.run_obj.status}); its state is gone.",
                saw=str(self.run_obj.error or (failure[0] if failure else "")) or None,
                fix="run the cells that build the state again: the next warm cell starts a new group",
            )
        return got

    def stop(self, *, force: bool = False) -> str:
        """End the group: its workers exit and give their resources back. ``force``: do not wait for them to finish
        (a rank blocked in a collective never would); Ray Train stops them."""
        hold_warm(None, instead_of=self)
        if self.alive:
            try:
                self.mailbox.stop()
                if not force:
                    self.run_obj.wait(30)
            finally:
                if self.alive:
                    self.run_obj.stop()
        return f"warm group {self.name} stopped"


def _memory_text(m: dict[str, float]) -> str:
    parts = [f"{m['ram']:,.0f} MB RAM"] if "ram" in m else []
    if "gpu" in m:
        parts.append(f"{m['gpu'] / 1024:,.1f} GB GPU")
    return ", ".join(parts) or "?"


class _Repr:
    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


def _check_travels(values: dict[str, Any]) -> None:
    """Name each notebook global the cell reads that cannot be sent to the workers (as a %%raytrain cell does)."""
    from ray import cloudpickle

    from ..errors import CaptureError
    from .cell import untravelable

    try:
        cloudpickle.dumps(values)
        return
    except Exception:  # noqa: BLE001 - find which, below
        bad = untravelable(values, cloudpickle)
    raise CaptureError(
        "The warm cell reads notebook globals that cannot be sent to the workers: " + ", ".join(bad),
        fix="create such objects in a warm cell (each rank keeps its own), or pass plain values",
    )


def _read_names(source: str) -> set[str]:
    import ast

    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _cell_error(failed: list[tuple[int, dict[str, Any]]], cell: dict[str, Any], source: str | None) -> RaynbError:
    from .run_error import format_frames

    rank, first = failed[0]
    if cell["kind"] == "pull":
        close = first.get("close") or []
        return UsageError(
            f"There is no {cell['name']!r} on rank {rank} of the warm group.",
            saw="close names there: " + (", ".join(close) if close else "none"),
            fix="a warm cell that assigns it at top level makes it pullable",
        )
    frames = format_frames(first.get("frames", []), cell.get("filename"), source)
    ranks = ", ".join(str(r) for r, _ in failed)
    return WarmCellError(
        f"The warm cell raised {first['error']}: {first['message']} (on rank(s) {ranks})\n" + "\n".join(frames),
        fix="the group and its state are still there: fix the cell and run it again",
    )


def _check_free(shape: Shape) -> None:
    """Refuse at once when what the group needs is held by other runs right now (another kernel's warm group,
    say), naming them and who started them, instead of waiting for resources that may never come."""
    from ..errors import InsufficientResourcesError
    from .catalog import runs

    free = side().resources()["available"]
    key, need = ("GPU", shape.workers) if shape.gpu else ("CPU", shape.workers * shape.cpus_per_worker)
    if free.get(key, 0.0) + 1e-9 >= need:
        return
    holders = [
        f"{r['name']} ({r['spec']['workers']} {'GPU' if r['spec']['gpu'] else 'CPU'} workers, started by "
        f"{r.get('user', '?')})"
        for r in runs().rows
        if r["status"] in ("pending", "starting", "running")
    ]
    raise InsufficientResourcesError(
        f"The warm group needs {need:g} {key}s; {free.get(key, 0.0):g} are free now.",
        saw="held by: " + ("; ".join(holders) if holders else "work that is not a raynb run"),
        fix="stop one of them (`%raytrain stop NAME`; a warm group: `%raytrain warm stop` in the kernel that holds "
        "it), or ask for fewer workers",
    )


def warm(
    workers: int | None = None,
    gpu: bool | None = None,
    cpus_per_worker: float | None = None,
    *,
    idle_timeout_s: float | None = None,
    settings: Settings | None = None,
    shaped: bool | None = None,
) -> WarmGroup:
    """This kernel's warm group, started with this shape if none is up. A different shape is refused with the way
    to restart (``raynb.warm().stop()``); a group holds its workers (and GPUs) until it ends."""
    if not side().connected():
        raise not_connected()
    settings = settings or resolve_settings({"workers": workers, "gpu": gpu, "cpus_per_worker": cpus_per_worker})
    group = current_warm()
    if group is not None:
        asked = shaped if shaped is not None else (workers, gpu, cpus_per_worker) != (None, None, None)
        cpus = group.shape.cpus_per_worker if settings.cpus_per_worker is None else settings.cpus_per_worker
        if asked and group.shape != (shape := Shape(settings.workers, settings.gpu, cpus)):
            raise UsageError(
                f"This kernel's warm group has {group.shape}; {shape} were asked for.",
                fix="`%raytrain warm stop` (raynb.warm().stop()) ends it -- its state with it -- and the next warm "
                "cell starts the new shape; or drop the shape flags to use the group as it is",
            )
        return group
    from .resources import place_run

    cpus, growing = place_run(settings.workers, settings.gpu, settings.cpus_per_worker)
    shape = Shape(settings.workers, settings.gpu, cpus)
    if growing:  # an autoscaled cluster below the group's size: it grows for the group
        print(growing)
    else:
        _check_free(shape)
    idle = settings.warm_idle_timeout_s if idle_timeout_s is None else idle_timeout_s
    group = WarmGroup(shape, settings, idle)
    hold_warm(group)
    print(
        f"warm group {group.name}: {shape}; it holds {group.gpus} GPUs until `%raytrain warm stop`, "
        f"{clock(idle)} idle, or this kernel's end"
    )
    return group
