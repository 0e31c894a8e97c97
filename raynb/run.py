"""A training run: the cell's function under ``TorchTrainer`` on N workers, watched from the notebook.

``fit()`` runs inside a launcher actor (``num_cpus=0``), never on the kernel's main thread: Ray Train installs its
own SIGINT handler there and an interrupt would end the cell with ``SystemExit``. The kernel only waits -- on an
event, so an interrupt lands at once -- and aborting is ``ray.kill(launcher)``, which takes the controller and the
workers with it (they are owned by the launcher).
"""

from __future__ import annotations

import datetime as _dt
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from . import metrics as _metrics
from .config import Settings
from .errors import InsufficientResourcesError, NotConnectedError, RunAborted, TrainingFailedError
from .worker import format_frames

__all__ = ["Run", "RunError", "start_run", "train", "active_run", "Launcher"]

TERMINAL = ("succeeded", "failed", "aborted")
_active: Run | None = None


def active_run() -> Run | None:
    """The run this kernel is waiting on right now, if any (readable from other threads)."""
    return _active


class Launcher:
    """Hosts ``TorchTrainer.fit()`` on the cluster; one per run."""

    def warm(self) -> bool:
        """Import Ray Train ahead of time (seconds on small machines), so a run starts as fast as a bare fit()."""
        import ray.train.torch  # noqa: F401

        return True

    def fit(self, payload: bytes, config: dict[str, Any], spec: dict[str, Any], sink: Any) -> dict[str, Any]:
        from ray.train import FailureConfig, LoggingConfig, RunConfig, ScalingConfig
        from ray.train.torch import TorchTrainer

        info = spec["worker_info"]

        def train_loop_per_worker(cfg: dict[str, Any]) -> None:
            from raynb.worker import run_on_worker

            run_on_worker(payload, cfg, sink, info)

        resources = {"CPU": spec["cpus_per_worker"]}
        if spec["gpu"]:
            resources["GPU"] = 1
        trainer = TorchTrainer(
            train_loop_per_worker,
            train_loop_config=config,
            scaling_config=ScalingConfig(num_workers=spec["workers"], use_gpu=spec["gpu"],
                                         resources_per_worker=resources),
            run_config=RunConfig(
                name=spec["name"], storage_path=spec.get("storage_path"),
                failure_config=FailureConfig(max_failures=0),
                # Train's INFO lines (resource requests, worker group layout) would bury the user's own prints
                logging_config=LoggingConfig(log_level=spec.get("train_log_level", "WARNING")),
                worker_runtime_env={"env_vars": spec["worker_env"]},
            ),
        )
        t0 = time.time()
        try:
            result = trainer.fit()
        except Exception as e:  # noqa: BLE001 - everything is reported back as data
            failures = {int(r): f"{type(x).__name__}: {x}" for r, x in getattr(e, "worker_failures", {}).items()}
            return {"status": "failed", "error_type": type(e).__name__, "message": str(e)[:4000],
                    "failures": failures, "seconds": time.time() - t0}
        ckpt = getattr(result, "checkpoint", None)
        return {"status": "succeeded", "seconds": time.time() - t0, "metrics": result.metrics,
                "checkpoint": getattr(ckpt, "path", None), "path": getattr(result, "path", None)}


@dataclass
class RunError:
    """What failed: per-rank exception type, message and traceback lines (cell frames say ``cell line N``)."""

    ranks: list[int]
    world_size: int
    type: str
    message: str
    tracebacks: dict[int, list[str]] = field(default_factory=dict)
    detail: str = ""

    def __str__(self) -> str:
        who = _ranks_text(self.ranks, self.world_size)
        head = f"{who} failed with {self.type}: {self.message}"
        if not self.tracebacks:
            return head + (f"\n{self.detail}" if self.detail else "")
        rank = min(self.tracebacks)
        lines = [head, f"Traceback (rank {rank}, most recent call last):", *self.tracebacks[rank],
                 f"{self.type}: {self.message}"]
        return "\n".join(lines + ([self.detail] if self.detail else []))


def _ranks_text(ranks: list[int], world: int) -> str:
    if not ranks:
        return "The run"
    if len(ranks) == world and world > 1:
        return f"All {world} workers"
    if len(ranks) == 1:
        return f"Rank {ranks[0]} of {world}"
    return f"Ranks {', '.join(map(str, ranks[:-1]))} and {ranks[-1]} of {world}"


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


class Run:
    """One training run. ``status`` is pending -> starting -> running -> succeeded | failed | aborted."""

    def __init__(self, spec: RunSpec, settings: Settings) -> None:
        self.spec, self.settings = spec, settings
        self.name = spec.name
        self.status = "pending"
        self.error: RunError | None = None
        self.result: dict[str, Any] | None = None
        self.started_at: float | None = None
        self.first_step_at: float | None = None
        self.ended_at: float | None = None
        self.stream: _metrics.MetricStream | None = None
        self._launcher: Any = None
        self._sink: Any = None
        self._fit_ref: Any = None
        self._done = threading.Event()
        self._fit_outcome: dict[str, Any] | None = None
        self._fit_exc: BaseException | None = None

    # --- what a user reads ------------------------------------------------------------------------------------
    @property
    def records(self) -> list[dict[str, Any]]:
        return self.stream.records if self.stream else []

    @property
    def events(self) -> list[dict[str, Any]]:
        return self.stream.events if self.stream else []

    @property
    def metrics(self) -> Any:
        """Every reported record as a pandas DataFrame: ``rank``, ``step``, ``time`` and each reported key."""
        import pandas as pd

        df = pd.DataFrame.from_records(self.records)
        if df.empty:
            return pd.DataFrame(columns=["rank", "step", "time"])
        first = ["rank", "step", "time"]
        df = df[first + [c for c in df.columns if c not in first]]
        return df.sort_values(["time", "rank"], kind="stable").reset_index(drop=True)

    @property
    def nccl(self) -> dict[int, dict[str, Any]]:
        """The latest NCCL transport summary of each rank (GPU runs; see raynb.nccl for the fields)."""
        out: dict[int, dict[str, Any]] = {}
        for e in self.events:
            if e.get("kind") == "nccl":
                out[e["rank"]] = {**e["summary"], "node": e.get("node"), "log": e.get("log")}
        return out

    @property
    def step(self) -> int:
        recs = self.records
        return max((r.get("step", 0) for r in recs), default=0) if recs else 0

    def rate(self, key: str = "tokens", *, skip_steps: int | None = None) -> float:
        """Steady-state throughput of a reported count (``tokens``, ``samples``): the sum over ranks per second of
        wall time, after the first ``skip_steps`` steps (default: a tenth of the run) — compile, warm-up and
        start-up excluded, unlike ``total / elapsed``."""
        recs = [r for r in self.records if key in r and "time" in r]
        if not recs:
            return 0.0
        last = max(int(r.get("step", 0)) for r in recs)
        skip = max(1, last // 10) if skip_steps is None else skip_steps
        base = [r for r in recs if int(r.get("step", 0)) <= skip]
        after = [r for r in recs if int(r.get("step", 0)) > skip]
        if not base or not after:
            return 0.0
        t0, t1 = max(r["time"] for r in base), max(r["time"] for r in after)
        return float(sum(r[key] for r in after) / (t1 - t0)) if t1 > t0 else 0.0

    @property
    def elapsed(self) -> float:
        if self.started_at is None:
            return 0.0
        return (self.ended_at or time.time()) - self.started_at

    @property
    def phase(self) -> str:
        """A human phase: starting workers, running, or the final status."""
        if self.status in TERMINAL:
            return self.status
        if self.records or self.status == "running":
            return "running"
        return "starting workers"

    def raise_for_status(self) -> Run:
        """Raise :class:`TrainingFailedError` / :class:`RunAborted` unless the run succeeded."""
        if self.status == "failed":
            err = self.error
            nccl = bool(err and "NCCL on rank" in err.detail)
            raise TrainingFailedError(
                str(err) if err else "The run failed.", run=self,
                fix="the NCCL note above says what is missing; %raycluster doctor checks the cluster's side"
                if nccl else "fix the cell and run it again; run.metrics holds what was reported.")
        if self.status == "aborted":
            raise RunAborted(f"Run {self.name} aborted at step {self.step}; its workers were stopped.", run=self)
        return self

    def __repr__(self) -> str:
        return f"<raynb.Run {self.name!r} {self.status} step={self.step} workers={self.spec.workers}>"

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        from .display import render_bundle

        return render_bundle(self)

    def rerun(self, *, env: dict[str, str] | None = None, name: str | None = None,
              config: dict[str, Any] | None = None, workers: int | None = None,
              display: bool | str | None = None) -> Run:
        """Run the same function again, changing only what is given (e.g. ``env=TCP_ENV`` to force sockets)."""
        import dataclasses

        settings = dataclasses.replace(self.settings, workers=workers or self.settings.workers)
        user_env = {k: v for k, v in self.spec.worker_env.items() if k in (self.spec.user_env or {})}
        return _run_payload(self._payload, settings, config=self.spec.config if config is None else config,
                            name=name or f"{self.name}-rerun", env={**user_env, **(env or {})},
                            cell_file=self.spec.cell_file, cell_source=self.spec.cell_source, cwd=self.spec.cwd,
                            display=display)

    def figure(self) -> Any:
        """An interactive plotly figure of loss and throughput (for exploring after the run)."""
        from .display.plotly_figure import run_figure

        return run_figure(self)

    # --- lifecycle ----------------------------------------------------------------------------------------------
    def _start(self, payload: bytes) -> None:
        self._payload = payload
        self.started_at = time.time()
        self.status = "starting"
        self._launcher, self._sink = take_spare(self.settings)
        spec = {
            "workers": self.spec.workers, "gpu": self.spec.gpu, "cpus_per_worker": self.spec.cpus_per_worker,
            "name": self.spec.name, "storage_path": self.spec.storage_path, "worker_env": self.spec.worker_env,
            "worker_info": {"cwd": self.spec.cwd, "fast_train_report": self.settings.fast_train_report,
                            "expect_efa": self.spec.expect_efa, "gdr_expected": self.spec.gdr_expected},
        }
        self._fit_ref = self._launcher.fit.remote(payload, self.spec.config, spec, self._sink)
        self.stream = _metrics.MetricStream(self._sink).start()
        threading.Thread(target=self._watch_fit, name="raynb-fit-watch", daemon=True).start()

    def _watch_fit(self) -> None:
        import ray

        try:
            self._fit_outcome = ray.get(self._fit_ref)
        except BaseException as e:  # noqa: BLE001 - launcher killed (abort) or the client went away
            self._fit_exc = e
        finally:
            self._done.set()

    def _wait(self, on_tick: Callable[[], None] | None = None) -> None:
        """Wait for the end, redrawing at most ``refresh_hz`` times a second; an interrupt aborts the run."""
        period = 1.0 / max(self.settings.refresh_hz, 0.5)
        previous = signal.getsignal(signal.SIGINT)
        in_main = threading.current_thread() is threading.main_thread()
        if in_main and previous is not signal.default_int_handler:
            signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            while not self._done.wait(period):
                self._note_progress()
                if on_tick:
                    on_tick()
            self._finish()
        except KeyboardInterrupt:
            self.abort()
        finally:
            if in_main and previous is not signal.default_int_handler:
                signal.signal(signal.SIGINT, previous)
            if on_tick:
                on_tick()
            global _active
            if _active is self:
                _active = None

    def _note_progress(self) -> None:
        if self.status == "starting" and self.stream and (self.stream.records or any(
                e.get("kind") == "worker_started" for e in self.stream.events)):
            self.status = "running"
        if self.first_step_at is None and self.stream and self.stream.records:
            self.first_step_at = time.time()

    def _finish(self) -> None:
        import ray

        if self.stream:
            self.stream.stop(final_drain=True)
        self._note_progress()
        self.ended_at = time.time()
        out = self._fit_outcome
        if out is None:
            self.status = "failed"
            self.error = RunError([], self.spec.workers, type(self._fit_exc).__name__, str(self._fit_exc)[:2000])
        else:
            self.result = out
            self.status = out["status"]
            if self.status == "failed":
                self.error = self._assemble_error(out)
        for actor in (self._launcher, self._sink):
            try:
                ray.kill(actor, no_restart=True)
            except Exception:  # noqa: BLE001, S110 - already gone
                pass
        prewarm(self.settings)  # the next cell finds a warm launcher

    def _nccl_hint(self) -> str:
        """The first NCCL error verdict of the run, if any: often the real reason a GPU run failed."""
        for rank, s in sorted(self.nccl.items()):
            if s.get("severity") == "error" and s.get("messages"):
                return f"NCCL on rank {rank}: " + " ".join(s["messages"][:2])
        return ""

    def _assemble_error(self, out: dict[str, Any]) -> RunError:
        err = self._assemble_error_core(out)
        hint = self._nccl_hint()
        if hint:
            err.detail = (err.detail + "\n" if err.detail else "") + hint
        return err

    def _assemble_error_core(self, out: dict[str, Any]) -> RunError:
        worker_errors = [e for e in self.events if e.get("kind") == "worker_error"]
        if worker_errors:
            first = min(worker_errors, key=lambda e: e["rank"])
            ranks = sorted({e["rank"] for e in worker_errors})
            tbs = {e["rank"]: format_frames(e["frames"], self.spec.cell_file, self.spec.cell_source)
                   for e in worker_errors}
            return RunError(ranks, self.spec.workers, first["type"], first["message"], tbs)
        failures: dict[int, str] = out.get("failures") or {}
        if failures:
            ranks = sorted(failures)
            typ, _, msg = failures[ranks[0]].partition(": ")
            return RunError(ranks, self.spec.workers, typ, msg)
        return RunError([], self.spec.workers, out.get("error_type", "Error"), out.get("message", "")[:2000])

    def abort(self, timeout: float = 5.0) -> None:
        """Stop the run now: kill the launcher, which takes the Train controller and workers with it."""
        import ray

        if self.status in TERMINAL:
            return
        step = self.step
        for actor in (self._launcher,):
            if actor is not None:
                try:
                    ray.kill(actor, no_restart=True)
                except Exception:  # noqa: BLE001, S110
                    pass
        self._done.wait(timeout)
        if self.stream:
            self.stream.stop(final_drain=True)
        if self._sink is not None:
            try:
                ray.kill(self._sink, no_restart=True)
            except Exception:  # noqa: BLE001, S110
                pass
        self.ended_at = time.time()
        self.status = "aborted"
        self.aborted_at_step = max(step, self.step)
        prewarm(self.settings)


_spare: tuple[Any, Any, int, tuple[tuple[str, str], ...]] | None = None


def _launcher_env(settings: Settings) -> dict[str, str]:
    return {"RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": str(settings.health_check_interval_s),
            "RAY_TRAIN_ENABLE_PRINT_PATCH": "0"}


def _new_pair(settings: Settings) -> tuple[Any, Any]:
    import ray

    launcher = ray.remote(num_cpus=0)(Launcher).options(runtime_env={"env_vars": _launcher_env(settings)}).remote()
    launcher.warm.remote()
    return launcher, _metrics.sink_actor()


def prewarm(settings: Settings | None = None) -> None:
    """Start a launcher (with Ray Train imported) and a sink for the next run, in the background."""
    import ray

    from . import session

    global _spare
    settings = settings or Settings()
    if not ray.is_initialized() or (_spare is not None and _spare[2] == session.generation()):
        return
    launcher, sink = _new_pair(settings)
    _spare = (launcher, sink, session.generation(), tuple(sorted(_launcher_env(settings).items())))


def take_spare(settings: Settings) -> tuple[Any, Any]:
    """The warm launcher and sink if they belong to this connection and these settings, else new ones."""
    from . import session

    global _spare
    spare, _spare = _spare, None
    if spare is not None and spare[2] == session.generation() and \
            spare[3] == tuple(sorted(_launcher_env(settings).items())):
        return spare[0], spare[1]
    return _new_pair(settings)


def default_run_name() -> str:
    return "raytrain-" + _dt.datetime.now().strftime("%Y%m%d-%H%M%S")


def check_resources(workers: int, gpu: bool, cpus_per_worker: float) -> None:
    """Refuse a run the cluster can never place, instead of waiting forever."""
    import ray

    if not ray.is_initialized():
        raise NotConnectedError("No Ray cluster is connected in this kernel.",
                                fix="run `%raycluster up --local` (or raynb.up(local=True)) first.")
    total = ray.cluster_resources()
    need_cpu = workers * cpus_per_worker
    have_cpu, have_gpu = total.get("CPU", 0.0), total.get("GPU", 0.0)
    if gpu and workers > have_gpu:
        raise InsufficientResourcesError(
            f"{workers} GPU workers were asked for, but the cluster has {have_gpu:g} GPUs.",
            saw=f"cluster resources: {have_cpu:g} CPUs, {have_gpu:g} GPUs",
            fix=f"use --workers {int(have_gpu)}" if have_gpu >= 1 else
            "drop --gpu to train on CPUs, or connect to a cluster with GPUs.",
        )
    if need_cpu > have_cpu:
        fit = int(have_cpu // cpus_per_worker) if cpus_per_worker else 0
        raise InsufficientResourcesError(
            f"{workers} workers x {cpus_per_worker:g} CPUs = {need_cpu:g} CPUs were asked for, "
            f"but the cluster has {have_cpu:g}.",
            saw=f"cluster resources: {have_cpu:g} CPUs, {have_gpu:g} GPUs",
            fix=(f"use --workers {fit}" if fit >= 1 else "lower --cpus-per-worker")
            + (" or --cpus-per-worker " + f"{have_cpu / workers:g}" if have_cpu / workers >= 0.1 else "")
            + ", or start a bigger cluster.",
        )


def _register_modules_beside(here: str) -> None:
    """Modules imported from the notebook's folder are not installed on workers: ship them by value."""
    from pathlib import Path

    import ray

    from .cell import modules_beside

    for mod in modules_beside(Path(here)):
        ray.cloudpickle.register_pickle_by_value(mod)


def start_run(
    fn: Callable[..., Any],
    settings: Settings,
    *,
    config: dict[str, Any] | None = None,
    name: str | None = None,
    env: dict[str, str] | None = None,
    cell_file: str | None = None,
    cell_source: str | None = None,
    cwd: str | None = None,
    worker_env_extra: dict[str, str] | None = None,
) -> tuple[Run, bytes]:
    """Check, serialize and start a run; the caller waits on it (with or without a display)."""
    from .cell import serialize

    here = cwd or os.getcwd()
    _register_modules_beside(here)
    payload = serialize(fn)
    run = _start_payload(payload, settings, config=config, name=name, env=env, cell_file=cell_file,
                         cell_source=cell_source, cwd=here, worker_env_extra=worker_env_extra)
    return run, payload


def _start_payload(payload: bytes, settings: Settings, *, config: dict[str, Any] | None, name: str | None,
                   env: dict[str, str] | None, cell_file: str | None, cell_source: str | None, cwd: str,
                   worker_env_extra: dict[str, str] | None = None) -> Run:
    from .nccl_env import nccl_worker_env
    from .session import worker_env_defaults

    check_resources(settings.workers, settings.gpu, settings.cpus_per_worker)  # before anything waits forever
    name = name or default_run_name()
    user_env = {**(worker_env_extra or {}), **(env or {})}
    nccl = nccl_worker_env(settings.nccl, name, strict_efa=settings.strict_efa, user_env=user_env) \
        if settings.gpu else user_env
    from .cluster import current

    cl = current()
    expect_efa, gdr_expected = cl.efa_expected() if cl is not None else (False, None)
    spec = RunSpec(
        workers=settings.workers, gpu=settings.gpu, cpus_per_worker=settings.cpus_per_worker,
        config=dict(config or {}), name=name, worker_env={**worker_env_defaults(), **nccl},
        storage_path=settings.storage_path, cell_file=cell_file, cell_source=cell_source, cwd=cwd,
        user_env=user_env, expect_efa=expect_efa, gdr_expected=gdr_expected,
    )
    run = Run(spec, settings)
    global _active
    _active = run
    run._start(payload)
    return run


def _run_payload(payload: bytes, settings: Settings, *, display: bool | str | None = None, **kw: Any) -> Run:
    """Start a run and wait for it with a live view; an interrupt aborts it and raises RunAborted."""
    from .display import LiveView

    run = _start_payload(payload, settings, **kw)
    view = None
    if display is not False:
        view = LiveView(run, mode=display if isinstance(display, str) else None, hz=settings.refresh_hz).start()
    run._wait(on_tick=view.refresh if view else None)
    if view is not None:
        view.finish()
    if run.status == "aborted":
        run.raise_for_status()
    return run


def train(
    fn: Callable[..., Any],
    *,
    workers: int | None = None,
    gpu: bool | None = None,
    cpus_per_worker: float | None = None,
    config: dict[str, Any] | None = None,
    name: str | None = None,
    env: dict[str, str] | None = None,
    display: bool | str | None = None,
    settings: Settings | None = None,
    cell_file: str | None = None,
    cell_source: str | None = None,
) -> Run:
    """Run ``fn(config)`` as Ray Train's ``train_loop_per_worker`` on ``workers`` workers and watch it live.

    Returns the :class:`Run` (``status``, ``metrics``, ``error``) once it has succeeded or failed; call
    ``run.raise_for_status()`` to turn a failure into an exception. An interrupt (Ctrl-C, the notebook's stop
    button) stops the workers and raises :class:`~raynb.errors.RunAborted`. ``display``: None picks HTML in
    notebooks and a text line in terminals; False shows nothing.
    """
    from .cell import serialize
    from .cluster import resolve_settings

    if settings is None:
        settings = resolve_settings({"workers": workers, "gpu": gpu, "cpus_per_worker": cpus_per_worker})
    here = os.getcwd()
    _register_modules_beside(here)
    payload = serialize(fn)
    return _run_payload(payload, settings, config=config, name=name, env=env, cell_file=cell_file,
                        cell_source=cell_source, cwd=here, display=display)
