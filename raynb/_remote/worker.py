"""In each Train worker: what runs inside every Ray Train worker around the user's function.

Sets up the metrics reporter, routes metric-only ``ray.train.report`` calls to it (Ray's own path blocks each call
for about the controller's health-check interval), runs the function in the notebook's folder when that folder
exists on the worker, and sends a failing rank's traceback (frames with the cell's own line numbers) to the
notebook before re-raising. Imports nothing heavier than Ray.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

from .._shared.cell_code import build, is_packed
from .._shared.worker_info import WorkerInfo
from . import ahead_imports, compile_cache, framework_hooks, node_channel
from . import report as metrics
from .gpu_sampler import GpuSampler
from .train_processes import follow_thread_share, preloaded_at

__all__ = ["run_on_worker", "error_event", "NcclWatcher", "compile_counts"]

_NCCL_VARS = ("NCCL_NET_PLUGIN", "NCCL_NET", "FI_PROVIDER", "NCCL_IB_DISABLE", "NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE")


class NcclWatcher:
    """Parses this process's NCCL_DEBUG_FILE as it grows and sends each new summary to the notebook.

    Channel lines appear only at the first collective (lazy connect since NCCL 2.22), so the summary is resent
    whenever it changes; a final pass runs when the function returns.
    """

    def __init__(self, sink: Any, rank: int, info: WorkerInfo, interval: float = 1.0) -> None:
        import threading

        from .._shared.worker_env import expand_debug_file

        self.sink, self.rank, self.info, self.interval = sink, rank, info, interval
        pattern = os.environ.get("NCCL_DEBUG_FILE", "")
        self.path = expand_debug_file(pattern) if pattern and os.environ.get("NCCL_DEBUG") else ""
        self._size = -1
        self._last: dict[str, Any] | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="raynb-nccl-watch", daemon=True)
        if self.path:
            self._thread.start()

    def _check(self) -> None:
        from ..nccl import parse

        try:
            size = os.path.getsize(self.path)
        except OSError:
            return
        if size == self._size:
            return
        self._size = size
        with open(self.path, errors="replace") as f:
            summary = parse(
                f,
                expect_efa=self.info.expect_efa,
                gdr_expected=self.info.gdr_expected,
                env={k: os.environ[k] for k in _NCCL_VARS if k in os.environ},
            )
        doc = summary.to_json(evidence=True)
        if doc != self._last:
            self._last = doc
            self.sink.event.remote(
                {"kind": "nccl", "rank": self.rank, "node": socket.gethostname(), "log": self.path, "summary": doc}
            )

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            with contextlib.suppress(Exception):
                self._check()

    def close(self) -> None:
        if not self.path:
            return
        self._stop.set()
        self._thread.join(timeout=2)
        with contextlib.suppress(Exception):
            self._check()


class _Tee:
    """``sys.stdout`` / ``sys.stderr`` of a worker: writes go where they went (Ray forwards them to the kernel that
    started the run) and each complete line also goes to the run's history (``%raytrain logs``), so a kernel that
    attaches later, or after the one that started it is gone, can read what the cell printed."""

    def __init__(self, inner: Any, name: str, rep: metrics.Reporter) -> None:
        self._inner, self._name, self._rep, self._part = inner, name, rep, ""

    def write(self, s: str) -> int:
        n = self._inner.write(s)
        with contextlib.suppress(Exception):
            *lines, self._part = (self._part + s).split("\n")
            for line in lines:
                self._rep.add_log(self._name, line)
        return n

    def flush(self) -> None:
        self._inner.flush()

    def close_line(self) -> None:
        if self._part:
            self._rep.add_log(self._name, self._part)
            self._part = ""

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _frames(tb: Any) -> list[dict[str, Any]]:
    out = []
    for fs in traceback.extract_tb(tb):
        if fs.filename == __file__:
            continue  # this wrapper is not the user's business
        out.append({"file": fs.filename, "line": fs.lineno, "name": fs.name, "text": (fs.line or "").strip()})
    return out


def error_event(rank: int, e: BaseException) -> dict[str, Any]:
    """What a rank tells the run when the cell raised: the exception and the cell's frames (raynb/_runs/run_error.py
    turns these into the run's one error)."""
    return {
        "kind": "worker_error",
        "rank": rank,
        "type": type(e).__name__,
        "message": str(e),
        "frames": _frames(e.__traceback__),
        "node": socket.gethostname(),
    }


def _patch_train_report(rep: metrics.Reporter, *, fast: bool = True) -> Callable[[], None]:
    """Send every ``ray.train.report`` call's metrics to the live view; with ``fast``, a metrics-only call stops there
    (Ray's own path blocks each call about a second or two), and any call naming more than the metrics also goes
    to Ray.

    The patched function takes exactly what Ray's takes (its signature is Ray's, and calls are bound against it), so
    ``report(metrics=..., checkpoint=...)`` from Ray's own Hugging Face and Lightning callbacks, and any parameter a
    later Ray adds, work unchanged. "Names" matters: the Ray idiom is ``report(m, checkpoint=ckpt if rank == 0 else
    None)`` on every rank, and Ray Train synchronises the ranks on such a call, so ``checkpoint=None`` must reach Ray
    too or rank 0 waits forever.
    """
    import inspect

    import ray.train

    original = ray.train.report
    signature = inspect.signature(original)

    def report(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)  # a call Ray would refuse is refused the same way
        rep.add(dict(bound.arguments["metrics"]))
        if not fast or set(bound.arguments) != {"metrics"}:
            out = original(*args, **kwargs)
            if bound.arguments.get("checkpoint") is not None:  # written; Ray's controller registers it at its next poll
                rep.event({"kind": "checkpoint", "rank": rep.rank, "step": rep.step})
            return out
        return None

    report.__doc__ = original.__doc__
    report.__name__ = report.__qualname__ = original.__name__
    report.__signature__ = signature  # type: ignore[attr-defined]
    ray.train.report = report

    def restore() -> None:
        ray.train.report = original

    return restore


def run_on_worker(payload: bytes, config: dict[str, Any], sink: Any, info: WorkerInfo) -> None:
    """Make the cell's function (unpickled, or built from its source: ``_shared/cell_code.py``) and run it as this
    rank, reporting to ``sink``."""
    import ray
    import ray.train
    from ray import cloudpickle

    #: when each step of the worker's set-up ended (wall clock): the run's start, split, in its worker_done event
    setup_at = {"process_started": _process_started(), "setup_began": time.time()}
    if preloaded_at() is not None:  # raynb's setup hook imported torch as this process started, before its actor came
        setup_at["torch_preloaded"] = preloaded_at()
        follow_thread_share()  # ... and so before Ray set the actor's thread count
    env_as_started = _env_is(info.started_ahead_env)
    ctx = ray.train.get_context()
    rank = ctx.get_world_rank()
    sampler = GpuSampler(ctx.get_local_rank()) if info.gpu_sampling else None
    rep = metrics.Reporter(
        sink,
        rank,
        gpu=sampler,
        find_channel=lambda: node_channel.find(sink),
    )
    metrics._set_reporter(rep)
    restore = _patch_train_report(rep, fast=info.fast_train_report)
    unhook = framework_hooks.install(rep.add_sample)
    real_out, real_err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _Tee(real_out, "stdout", rep), _Tee(real_err, "stderr", rep)
    if info.cwd and os.path.isdir(info.cwd):
        os.chdir(info.cwd)  # relative paths written for the notebook keep working on a local cluster
        if info.cwd not in sys.path:
            sys.path.insert(0, info.cwd)
    rep.event(_started_event(ctx, sampler))  # ahead of this rank's records, over the same path
    t0 = setup_at["started_event_sent"] = time.time()
    nccl = NcclWatcher(sink, rank, info)
    storage = _storage(ctx)
    setup_at["nccl_watcher_started"] = time.time()
    loaded = compile_cache.load(storage)  # what an earlier run compiled, for a node that starts empty
    setup_at["compile_cache_loaded"] = time.time()
    try:
        fn = build(payload) if is_packed(payload) else cloudpickle.loads(payload)
        setup_at["function_built"] = time.time()
        fn(config)
    except BaseException as e:
        nccl.close()
        _untee(real_out, real_err)
        rep.close()
        with contextlib.suppress(Exception):
            ray.get(sink.event.remote(error_event(rank, e)), timeout=5)
        raise
    else:
        nccl.close()
        _untee(real_out, real_err)
        rep.close()
        with contextlib.suppress(Exception):
            counts = compile_counts()
            kept = compile_cache.keep(storage, counts, loaded) if rank == 0 else {}
            ahead = ahead_imports.report()  # what the process imported for the function before it asked
            if ahead.get("done"):
                setup_at["modules_preloaded"] = ahead["done"]
            done = {"kind": "worker_done", "rank": rank, "seconds": time.time() - t0, "setup_at": setup_at}
            done |= {
                "env_as_started_ahead": env_as_started,
                "metrics_over": rep.over,
                "ahead_imports": ahead.get("outcome"),
            }
            ray.get(sink.event.remote({**done, **counts, **loaded, **kept}), timeout=5)
    finally:
        _untee(real_out, real_err)
        restore()
        unhook()
        metrics._set_reporter(None)


def _started_event(ctx: Any, sampler: GpuSampler | None) -> dict[str, Any]:
    """This rank's ``worker_started``: where it runs (node, process, GPU), and why its GPU is not sampled if not."""
    import ray

    return {
        "kind": "worker_started",
        "rank": ctx.get_world_rank(),
        "local_rank": ctx.get_local_rank(),
        "world_size": ctx.get_world_size(),
        "node": socket.gethostname(),
        "node_id": ray.get_runtime_context().get_node_id(),
        "node_rank": ctx.get_node_rank(),
        "pid": os.getpid(),
        "gpu": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "gpu_sampling_off": sampler.why_off if sampler is not None else None,
    }


def _env_is(started_ahead: str | None) -> bool | None:
    """Whether this worker's runtime env, as Ray wrote it, is the one the launcher started processes ahead for (Ray
    hands those over); None where none were, or where this Ray does not say."""
    if started_ahead is None:
        return None
    try:
        import ray

        return bool(ray._private.worker.global_worker.runtime_env == started_ahead)
    except Exception:  # noqa: BLE001 - a diagnostic only: Ray's private worker object
        return None


def _process_started(pid: int | str = "self") -> float | None:
    """When this process (or ``pid``) started (wall clock; Linux's /proc), else None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])  # proc(5) field 22: start time after boot
        with open("/proc/uptime") as f:
            up = float(f.read().split()[0])
        return time.time() - (up - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None


def _storage(ctx: Any) -> Any | None:
    """Ray Train's StorageContext of this run (a DeveloperAPI: None where this Ray has none)."""
    try:
        return ctx.get_storage()
    except Exception:  # noqa: BLE001
        return None


def compile_counts() -> dict[str, int]:
    """What this process's ``torch.compile`` found in Inductor's caches: FX graphs compiled from nothing
    (``compiled``) and read back (``compiled_from_cache``); empty where nothing was compiled. Inductor's caches live
    on the node (``/tmp/torchinductor_<user>``, Triton's under ``~/.triton``), so a later run there reads them back."""
    utils = sys.modules.get("torch._dynamo.utils")  # imported by torch.compile: never imported here for the asking
    if utils is None:
        return {}
    inductor = utils.counters["inductor"]
    hit, miss = int(inductor.get("fxgraph_cache_hit", 0)), int(inductor.get("fxgraph_cache_miss", 0))
    return {"compiled": miss, "compiled_from_cache": hit} if hit + miss else {}


def _untee(out: Any, err: Any) -> None:
    for tee in (sys.stdout, sys.stderr):
        if isinstance(tee, _Tee):
            tee.close_line()
    sys.stdout, sys.stderr = out, err
