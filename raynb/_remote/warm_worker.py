"""In each Train worker: what a warm worker group runs: one Ray Train function that executes notebook cells as they
arrive.

Each rank keeps a namespace across cells (what a cell assigns at top level is there in the next one, as on
ipyparallel's engines); the notebook globals a cell reads travel with it, except names a warm cell on this rank
assigned (the rank's own state wins). Everything a ``%%raytrain`` cell can do works, because this *is* a Ray Train
worker: ``ray.train.get_context()``, ``prepare_model``, ``ray.train.report``, ``raynb.report``. An interrupt arrives
as ``KeyboardInterrupt`` raised in the cell's thread (between bytecodes: a rank blocked inside a collective does not
see it, and the notebook restarts the group when a rank stays stuck). Imports nothing heavier than Ray.
"""

from __future__ import annotations

import ast
import ctypes
import difflib
import os
import sys
import threading
import time
from typing import Any

from .._shared.cell_code import build, is_packed, unpack_globals

__all__ = ["warm_loop", "WarmMailbox", "run_cell", "rank_namespace", "memory_mb"]

#: how long a worker waits for the next cell in one call (it also notices a gone mailbox this often)
POLL_S = 5.0


class WarmMailbox:
    """The kernel's post box to its warm group: cells in, results out. Owned by the kernel's connection (not
    detached), so when the kernel dies the mailbox goes with it and the workers end -- no orphaned GPUs."""

    def __init__(self, workers: int, idle_s: float) -> None:
        self.workers = workers
        self._cells: list[dict[str, Any]] = []
        self._results: dict[int, dict[int, dict[str, Any]]] = {}
        self._interrupted: set[int] = set()
        self._stop = False
        self.idle_s = idle_s
        self._last_use = time.time()
        self._cond = threading.Condition()

    def put(self, cell: dict[str, Any]) -> int:
        with self._cond:
            cell["id"] = len(self._cells) + 1
            self._cells.append(cell)
            self._last_use = time.time()
            self._cond.notify_all()
            return int(cell["id"])

    def next(self, after: int, timeout: float) -> dict[str, Any] | None:
        """The cell after ``after``, a stop order, or None after ``timeout``."""
        with self._cond:
            self._cond.wait_for(lambda: self._stop or len(self._cells) > after or self._idle(), timeout)
            if self._stop or self._idle():
                return {"kind": "stop", "why": "stopped" if self._stop else f"idle for {self.idle_s:g} s"}
            return self._cells[after] if len(self._cells) > after else None

    def _idle(self) -> bool:
        busy = bool(self._cells) and len(self._results.get(len(self._cells), {})) < self.workers
        return not busy and time.time() - self._last_use > self.idle_s

    def done(self, cell_id: int, rank: int, result: dict[str, Any]) -> None:
        with self._cond:
            self._results.setdefault(cell_id, {})[rank] = result
            self._last_use = time.time()
            self._cond.notify_all()

    def results(self, cell_id: int, timeout: float) -> dict[int, dict[str, Any]]:
        """The ranks' results so far: at once when every rank has answered, else after the next answer or
        ``timeout``."""
        with self._cond:
            if len(self._results.get(cell_id, {})) < self.workers:
                self._cond.wait(timeout)
            return dict(self._results.get(cell_id, {}))

    def interrupt(self, cell_id: int) -> None:
        with self._cond:
            self._interrupted.add(cell_id)
            self._cond.notify_all()

    def interrupted(self, cell_id: int, timeout: float) -> bool:
        with self._cond:
            self._cond.wait_for(lambda: cell_id in self._interrupted or cell_id in self._results, timeout)
            return cell_id in self._interrupted

    def stop(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()

    def idle_for(self) -> float:
        return time.time() - self._last_use


def _async_raise(thread_id: int, exc: type[BaseException]) -> None:
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id), ctypes.py_object(exc))


def _watch_interrupt(
    mailbox: Any, cell_id: int, thread_id: int, finished: threading.Event, lock: threading.Lock
) -> None:
    import ray

    while not finished.is_set():
        try:
            if ray.get(mailbox.interrupted.remote(cell_id, 1.0)):
                with lock:
                    if not finished.is_set():
                        _async_raise(thread_id, KeyboardInterrupt)
                return
        except Exception:  # noqa: BLE001 - the mailbox is gone: the loop ends on its next call
            return


def _picklable(value: Any) -> dict[str, Any]:
    from ray import cloudpickle

    text = repr(value)[:2000]
    try:
        return {"value": cloudpickle.dumps(value), "repr": text}
    except Exception as e:  # noqa: BLE001
        return {"repr": text, "unpicklable": f"{type(value).__name__}: {e}"}


def rank_namespace() -> dict[str, Any]:
    """A rank's namespace before its first cell. ``raynb`` is in it, as in the notebook after ``%load_ext raynb``
    (the notebook's module object is not shipped: the rank imports its own), so a function a warm cell defines can
    call ``raynb.report`` as the same code does in a cold ``%%raytrain`` cell."""
    raynb = sys.modules[__name__.split(".")[0]]  # the package this module is in: loaded before it, always

    return {"__name__": "__raynb_warm__", "__builtins__": __builtins__, "raynb": raynb}


def run_cell(cell: dict[str, Any], ns: dict[str, Any], own: set[str], rank: int) -> dict[str, Any]:
    """Execute one cell in this rank's namespace; its last expression's value (rank 0, or every rank for a pull)."""
    if cell["kind"] == "call":
        from ray import cloudpickle

        fn = build(cell["fn"]) if is_packed(cell["fn"]) else cloudpickle.loads(cell["fn"])
        value = fn(cell["config"])
        return _picklable(value) if rank == 0 and value is not None else {}
    if cell["kind"] == "pull":
        if cell["rank"] != rank:
            return {}
        name = cell["name"]
        if name not in ns:
            close = difflib.get_close_matches(name, [k for k in ns if not k.startswith("__")], n=5)
            return {"error": "NameError", "message": f"no name {name!r} on rank {rank}", "close": close}
        return _picklable(ns[name])
    shipped = unpack_globals(cell["portable"]) if "portable" in cell else cell["globals"]  # Ray Jobs: as data
    for k, v in shipped.items():
        if k not in own and not k.startswith("__"):
            ns[k] = v
    tree = ast.parse(cell["source"], filename=cell["filename"])
    ast.increment_lineno(tree, cell["first_line"] - 1)
    last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    for node in ast.walk(ast.Module(body=tree.body, type_ignores=[])):
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        for t in targets:
            if isinstance(t, ast.Name):
                own.add(t.id)
        if isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom)):
            own.update(
                [node.name] if hasattr(node, "name") else [(a.asname or a.name).split(".")[0] for a in node.names]
            )
    t0 = time.time()
    exec(compile(tree, cell["filename"], "exec"), ns)
    out: dict[str, Any] = {"seconds": time.time() - t0}
    if last is not None:
        value = eval(compile(ast.Expression(last.value), cell["filename"], "eval"), ns)
        if rank == 0 and value is not None:
            out.update(_picklable(value))
    return out


def warm_loop(config: dict[str, Any]) -> None:
    """The Ray Train function of a warm group: take cells from the mailbox until told to stop (or it is gone)."""
    import ray
    import ray.train

    from .report import current_reporter
    from .worker import _frames

    mailbox = config["mailbox"]
    reporter = current_reporter()
    rank = ray.train.get_context().get_world_rank()
    ns = rank_namespace()
    own: set[str] = set()
    after = 0
    while True:
        try:
            cell = ray.get(mailbox.next.remote(after, POLL_S))
        except Exception:  # noqa: BLE001 - the kernel (and its mailbox) is gone: give the resources back
            return
        if cell is None:
            continue
        if cell["kind"] == "stop":
            print(f"[warm group] ends: {cell['why']}")
            return
        after = cell["id"]
        if reporter is not None and cell["kind"] != "pull":
            reporter.tags["cell"] = cell["id"]  # run.metrics gains a `cell` column; rates restart with each cell
        result = _run_interruptibly(mailbox, cell, ns, own, rank, _frames)
        for _ in range(3):
            try:
                ray.get(mailbox.done.remote(cell["id"], rank, result))
                break
            except KeyboardInterrupt:  # cannot happen twice (see _run_interruptibly); be safe anyway
                continue
            except Exception:  # noqa: BLE001 - the mailbox is gone
                return


def _run_interruptibly(mailbox: Any, cell: dict[str, Any], ns: dict, own: set[str], rank: int, frames: Any) -> dict:
    """Run the cell while a thread watches for the notebook's interrupt. The watcher raises only under ``lock`` and
    only while the cell runs, so at most one KeyboardInterrupt is pending, and it lands inside this function."""
    finished, lock = threading.Event(), threading.Lock()
    watcher = threading.Thread(
        target=_watch_interrupt, args=(mailbox, cell["id"], threading.get_ident(), finished, lock), daemon=True
    )
    watcher.start()
    try:
        try:
            result = run_cell(cell, ns, own, rank)
        except KeyboardInterrupt:
            result = {"interrupted": True}
        except BaseException as e:  # noqa: BLE001 - a failing cell leaves the group usable
            result = {"error": type(e).__name__, "message": str(e), "frames": frames(e.__traceback__)}
        finally:
            with lock:
                finished.set()
    except KeyboardInterrupt:  # it landed just as the cell ended
        result = {"interrupted": True}
    # not joined: the watcher can no longer raise (``finished`` is set under ``lock``), and it is waiting in the
    # mailbox until this rank's result arrives there (joining it first cost every warm cell a second)
    result["memory"] = memory_mb()
    return result


def memory_mb() -> dict[str, float]:
    """This rank's resident memory and, once the cells have used CUDA, the GPU memory PyTorch holds (reserved by
    its caching allocator on the cell's current device: what other processes cannot have)."""
    out: dict[str, float] = {}
    try:
        with open("/proc/self/statm") as f:
            out["ram"] = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError):
        pass
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        out["gpu"] = torch.cuda.memory_reserved() / 2**20
    return out
