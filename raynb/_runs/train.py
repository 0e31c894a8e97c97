"""In the kernel: starting runs: ``raynb.train(fn)`` and the ``%%raytrain`` cell both come through here.

Checks the cluster can place the run (before anything waits forever), builds each worker's environment, ships the
function, and waits with a live view. The Run itself is ``run.py``; the actor hosting ``fit()`` is
``_remote/launcher.py``.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._client import side
from .._current import current, resolve_settings
from .._settings import Settings, overlay
from .._shared.worker_env import PRELOAD_VAR, ahead, worker_env
from ..errors import UsageError
from .cell import large_payload_note, largest_globals, modules_beside, pack_portable, serialize
from .cell_imports import imports_of
from .resources import place_run
from .run import Run, RunSpec, set_active
from .storage import check_reachable_by_every_node, every_nodes_mounts
from .trainer_config import plain_trainer, shape_of, trainer_kwargs, user_run_name

if TYPE_CHECKING:
    from ..display import LiveView

__all__ = ["train", "start_run", "follow", "default_run_name"]


def default_run_name() -> str:
    return "raytrain-" + _dt.datetime.now().strftime("%Y%m%d-%H%M%S")


def _register_modules_beside(here: str) -> None:
    """Modules imported from the notebook's folder are not installed on workers: ship them by value."""
    import ray

    for mod in modules_beside(Path(here)):
        ray.cloudpickle.register_pickle_by_value(mod)


#: a cell heavier than this, sent to a remote cluster, is said: it crosses the port-forward (or the network) first
LARGE_PAYLOAD = 64 * 2**20


def _payload_of(fn: Callable[..., Any], here: str) -> bytes:
    if not side().code_crosses:  # code objects do not cross to another Python: source and plain data do
        return pack_portable(fn)
    _register_modules_beside(here)
    payload = serialize(fn)
    cl = current()
    if len(payload) > LARGE_PAYLOAD and cl is not None and cl.kind != "local":
        print(large_payload_note(len(payload), largest_globals(fn)))
    return payload


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
    here = cwd or os.getcwd()
    payload = _payload_of(fn, here)
    run = _start_payload(
        payload,
        settings,
        config=config,
        name=name,
        env=env,
        cell_file=cell_file,
        cell_source=cell_source,
        cwd=here,
        worker_env_extra=worker_env_extra,
        preload=ahead(imports_of(fn, here)),
    )
    return run, payload


def _start_payload(
    payload: bytes,
    settings: Settings,
    *,
    config: dict[str, Any] | None,
    name: str | None,
    env: dict[str, str] | None,
    cell_file: str | None,
    cell_source: str | None,
    cwd: str,
    worker_env_extra: dict[str, str] | None = None,
    ray_objects: dict[str, Any] | None = None,
    preload: tuple[str, ...] = (),
) -> Run:
    cpus, growing = place_run(settings.workers, settings.gpu, settings.cpus_per_worker)  # before waiting forever
    if growing:
        print(growing)
    ray_objects = {k: v for k, v in (ray_objects or {}).items() if v is not None}
    user_name = user_run_name(ray_objects.get("run_config"))
    if name and user_name and name != user_name:
        raise UsageError(
            f"The run name is given twice: {name!r} and RunConfig.name {user_name!r}.", fix="give the name once"
        )
    name = side().free_name(name or user_name or default_run_name(), given=bool(name or user_name))
    user_env = {**(worker_env_extra or {}), **(env or {})}
    cl = current()
    expect_efa, gdr_expected = cl.backend.efa_expected() if cl is not None else (False, None)
    leases_dir = cl.backend.run_leases_dir() if cl is not None else None
    env_vars = worker_env(settings.nccl, name, strict_efa=settings.strict_efa, user_env=user_env, preload=preload)
    shape: dict[str, Any] = {
        "name": name,
        "workers": settings.workers,
        "gpu": settings.gpu,
        "cpus_per_worker": cpus,
    }
    if side().code_crosses:
        kwargs = trainer_kwargs(
            **shape,
            worker_env=env_vars,
            storage_path=settings.storage_path,
            max_failures=settings.max_failures,
            **ray_objects,
        )
        storage_path, max_failures = kwargs["run_config"].storage_path, kwargs["run_config"].failure_config.max_failures
    else:  # Ray's objects do not cross to another Ray: described as data, made on the cluster
        kwargs = plain_trainer(
            **shape, worker_env=env_vars, storage_path=settings.storage_path, max_failures=settings.max_failures,
            **ray_objects,
        )  # fmt: skip
        storage_path, max_failures = settings.storage_path, settings.max_failures
    if cl is not None:  # before any worker starts: checkpoints stranded on one node fail only after every step
        nodes, mounts = cl.backend.storage_reach()
        shared = every_nodes_mounts(mounts, settings.shared_mount_path)
        check_reachable_by_every_node(
            storage_path, nodes=nodes, kind=cl.kind, shared_mounts=shared, checkpoints=settings.checkpoints
        )
    spec = RunSpec(
        workers=settings.workers,
        gpu=settings.gpu,
        cpus_per_worker=cpus,
        config=dict(config or {}),
        name=name,
        worker_env=env_vars,
        storage_path=storage_path,
        cell_file=cell_file,
        cell_source=cell_source,
        cwd=cwd,
        user_env=user_env,
        expect_efa=expect_efa,
        gdr_expected=gdr_expected,
        trainer_kwargs=kwargs,
        leases_dir=leases_dir,
        max_failures=max_failures,
        usd_per_hour=_usd_per_hour(),
        total_steps=settings.total_steps,
        stall_factor=settings.stall_factor,
        stall_min_s=settings.stall_min_s,
        on_stall=settings.on_stall,
    )
    run = Run(spec, settings)
    run._rerun = lambda **changes: _rerun(run, payload, ray_objects, **changes)
    set_active(run)
    run._start(payload)
    return run


def _usd_per_hour() -> float | None:
    """The current cluster's GPU nodes per hour (the run's cost is this times its wall time)."""
    from .._current import current

    cluster = current()
    cost = cluster.backend.hourly_cost() if cluster is not None else None
    return cost.usd_per_hour if cost is not None else None


def _rerun(
    run: Run,
    payload: bytes,
    ray_objects: dict[str, Any],
    *,
    env: dict[str, str] | None,
    name: str | None,
    config: dict[str, Any] | None,
    workers: int | None,
    display: bool | str | None,
) -> Run:
    settings = dataclasses.replace(run.settings, workers=workers or run.settings.workers)
    user_env = {k: v for k, v in run.spec.worker_env.items() if k in (run.spec.user_env or {})}
    return _run_payload(
        payload,
        settings,
        config=run.spec.config if config is None else config,
        name=name or f"{run.name}-rerun",
        env={**user_env, **(env or {})},
        cell_file=run.spec.cell_file,
        cell_source=run.spec.cell_source,
        cwd=run.spec.cwd or os.getcwd(),
        display=display,
        preload=ahead(run.spec.worker_env.get(PRELOAD_VAR, "").split(",")),
        ray_objects={k: v for k, v in ray_objects.items() if k != "run_config"}
        | (
            {"run_config": dataclasses.replace(ray_objects["run_config"], name=None)}
            if "run_config" in ray_objects
            else {}
        ),
    )


def follow(
    run: Run,
    display: bool | str | None,
    hz: float,
    *,
    wait: bool,
    stop_on_interrupt: bool = True,
    controls_shown: bool = True,
) -> LiveView | None:
    """Show ``run`` live until it ends: here (``wait``; the caller draws the last picture with the view returned, or,
    when the user clicked Detach, the run goes on as below), or from a background thread while the kernel runs other
    cells (a background run, an attached one). In a terminal a background run prints one line rather than a line
    that moves under the user's typing."""
    from ..display import LiveView, frontend

    mode = display if isinstance(display, str) else None
    if not wait and display is not False and (mode or frontend()) == "text":
        print(f"[{run.name}] goes on in the background: run.wait() waits for it, run.stop() stops it")
        display = False
    view = LiveView(run, mode=mode, hz=hz).start() if display is not False else None
    controls = None
    if view is not None and view.mode == "html" and controls_shown:
        from ..display.controls import RunControls

        controls = RunControls(run.name, run.stop, detachable=wait).show()
    if wait:
        ended = run._wait(
            on_tick=view.refresh if view else None,
            stop_on_interrupt=stop_on_interrupt,
            until=controls.detach_requested.is_set if controls else None,
        )
        if ended:
            if controls is not None:
                controls.close()
            return view
        assert controls is not None
        controls.detached()
        print(
            f"[{run.name}] detached: it goes on in the background (this view keeps updating); run.wait() waits for "
            f"it, %raytrain attach {run.name} shows it in another cell or kernel"
        )

    run._in_background = True

    def last_picture() -> None:
        if controls is not None:
            controls.close()
        if view is not None:
            view.finish()

    run._on_end.append(last_picture)  # drawn before run.wait() returns
    threading.Thread(
        target=run._wait,
        kwargs={"on_tick": view.refresh if view else None},
        name=f"raynb-follow-{run.name}",
        daemon=True,
    ).start()
    return view


def _run_payload(
    payload: bytes,
    settings: Settings,
    *,
    display: bool | str | None = None,
    raise_on_failure: bool = False,
    wait: bool = True,
    **kw: Any,
) -> Run:
    """Start a run and wait for it with a live view; an interrupt aborts it and raises RunAborted. ``wait=False``:
    return at once; the view goes on updating in the background."""
    run = _start_payload(payload, settings, **kw)
    view = follow(run, display, settings.refresh_hz, wait=wait)
    if run._in_background:  # wait=False, or the user clicked Detach
        return run
    raises = run.status in ("aborted", "detached") or (raise_on_failure and run.status == "failed")
    if view is not None:
        view.finish(show_error=not raises)  # the raised error is the one place the cell shows it
    if raises:
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
    nccl: str | None = None,
    strict_efa: bool | None = None,
    max_failures: int | None = None,
    checkpoints: bool | None = None,
    total_steps: int | None = None,
    on_stall: str | None = None,
    display: bool | str | None = None,
    settings: Settings | None = None,
    cell_file: str | None = None,
    cell_source: str | None = None,
    datasets: dict[str, Any] | None = None,
    dataset_config: Any = None,
    scaling_config: Any = None,
    run_config: Any = None,
    torch_config: Any = None,
    checkpoint_config: Any = None,
    raise_on_failure: bool = False,
    wait: bool = True,
) -> Run:
    """Run ``fn(config)`` as Ray Train's ``train_loop_per_worker`` on ``workers`` workers and watch it live.

    Ray Train's own objects are taken as they are: ``datasets={"train": ds}`` (read on workers with
    ``ray.train.get_dataset_shard("train")``), ``dataset_config=``, ``scaling_config=`` (its workers and GPUs
    decide the run's shape), ``run_config=``, ``torch_config=``, ``checkpoint_config=``. raynb adds its worker
    environment, Train's log level and the storage path where they leave them unset; a value given twice with
    different answers (``workers=4`` and ``ScalingConfig(num_workers=2)``) is an error naming both.

    The run belongs to the cluster: it goes on if the kernel dies or the connection drops, and ``raynb.attach(name)``
    follows it again from any kernel. ``wait=False`` returns the running :class:`Run` at once (its view keeps
    updating while other cells run): ``run.wait()``, ``run.stop()``, ``run.done()``, ``await run``.

    Returns the :class:`Run` (``status``, ``metrics``, ``error``) once it has succeeded or failed; call
    ``run.raise_for_status()`` (or pass ``raise_on_failure=True``) to turn a failure into an exception. An interrupt (Ctrl-C, the notebook's stop
    button) stops the workers and raises :class:`~raynb.errors.RunAborted`. On a cluster of several nodes whose storage
    is one node's disk, a run is refused before it starts unless ``checkpoints=False`` (it never saves any).
    ``total_steps=N`` (or ``raynb.report(total=N)`` from the run, or the total Hugging Face's or Lightning's Trainer
    knows) gives the view a progress bar, the time left and the cost to finish (``run.progress``); a run none of whose
    ranks makes a new step for ``stall_factor`` times its recent step time (at least ``stall_min_s``) is called
    stalled, and ``on_stall="stop"`` has the cluster end it. ``display``: None picks HTML in
    notebooks and a text line in terminals; False shows nothing.
    """
    shape = shape_of(scaling_config, workers=workers, gpu=gpu, cpus_per_worker=cpus_per_worker)
    flags = {
        "workers": workers,
        "gpu": gpu,
        "cpus_per_worker": cpus_per_worker,
        "nccl": nccl,
        "strict_efa": strict_efa,
        "max_failures": max_failures,
        "checkpoints": checkpoints,
        "total_steps": total_steps,
        "on_stall": on_stall,
    }
    flags |= shape
    settings = resolve_settings(flags) if settings is None else overlay(settings, flags)
    ray_objects = {
        "datasets": datasets,
        "dataset_config": dataset_config,
        "scaling_config": scaling_config,
        "run_config": run_config,
        "torch_config": torch_config,
        "checkpoint_config": checkpoint_config,
    }
    here = os.getcwd()
    payload = _payload_of(fn, here)
    return _run_payload(
        payload,
        settings,
        config=config,
        name=name,
        env=env,
        cell_file=cell_file,
        cell_source=cell_source,
        cwd=here,
        display=display,
        ray_objects=ray_objects,
        preload=ahead(imports_of(fn, here)),
        raise_on_failure=raise_on_failure,
        wait=wait,
    )
