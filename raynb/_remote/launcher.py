"""On the head: the launcher actor that hosts ``TorchTrainer.fit()`` on the cluster (the spare kept warm for the next
run is the kernel's: ``_client/spares.py``).

A launcher serves one run at a time and, once its run has ended, the next run of the same kernel: the process and
its import of Ray Train and torch (seconds of CPU on a small head, on the path of every cell) are paid once per
connection, not once per run. Stopping a run still kills its launcher (and with it the controller and workers).

``fit()`` runs inside the launcher (``num_cpus=0``), never on the kernel's main thread: Ray Train installs its own
SIGINT handler there and an interrupt would end the cell with ``SystemExit``. Aborting is ``ray.kill(launcher)``,
which takes the Train controller and the workers with it (they are owned by the launcher).

Launcher and sink are detached actors: the run belongs to the cluster and outlives the kernel that started it
(``registry.py`` keeps their handles). A launcher exits by itself once it has been idle -- no run, no claim -- for
``SPARE_TTL_S`` after its start or a claim, or ``RECLAIM_S`` after its last run (time for the kernel to claim it
for its next cell; when no kernel listens, it goes soon after its run), so a detached launcher never lingers.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import replace
from typing import Any

from .._shared.host import lease
from .._shared.outcome import Outcome, RunStatus
from .._shared.seam import SPARE_TTL_S
from .._shared.worker_info import WorkerInfo
from .detached import leave
from .train_processes import start_ahead
from .trainer_plan import TrainerPlan

#: an ended run's launcher exits unless claimed again within this (its kernel claims it as it sees the run end)
RECLAIM_S = 60.0
#: how long a running run's lease on the embedded head lasts without renewal (renewed every third of it)
_LEASE_S = 90.0


class Launcher:
    """Hosts ``TorchTrainer.fit()`` on the cluster, one run at a time. Threaded (``max_concurrency``), so ``alive``
    and ``claim`` answer while ``fit`` runs."""

    def __init__(self, ttl_s: float = SPARE_TTL_S) -> None:
        self._ttl_s = ttl_s
        self._lock = threading.Lock()
        self._fits = 0
        self._leaving = False
        self._exit_at = time.monotonic() + ttl_s
        threading.Thread(target=self._exit_when_idle, name="raynb-launcher-idle", daemon=True).start()

    def claim(self) -> bool:
        """Reserve this launcher for a run (the next ``SPARE_TTL_S``); False while it hosts one, or once it has
        decided to leave (idle too long)."""
        with self._lock:
            if self._fits or self._leaving:
                return False
            self._exit_at = time.monotonic() + self._ttl_s
            return True

    def _exit_when_idle(self) -> None:
        while True:
            time.sleep(min(5.0, self._ttl_s / 4))
            with self._lock:  # a claim is either in before the check or refused from then on
                if not self._fits and time.monotonic() > self._exit_at:
                    self._leaving = True
                    break
        leave()

    def alive(self) -> bool:
        return True

    def leaves_in(self) -> float:
        """Seconds until it leaves unless claimed again (infinite while it hosts a run)."""
        with self._lock:
            return float("inf") if self._fits else max(0.0, self._exit_at - time.monotonic())

    def node(self) -> str:
        """The node this launcher runs on -- and so Ray Train's controller, which Ray attaches to it."""
        import ray

        return str(ray.get_runtime_context().get_node_id())

    def warm(self) -> bool:
        """Import Ray Train ahead of time (seconds on small machines), so a run starts as fast as a bare fit(); and
        make the cluster's first Ray Train actor (:func:`_train_coordinator`) while the cluster waits for a cell."""
        import ray.train.torch  # noqa: F401

        _train_coordinator()
        return True

    def fit(self, payload: bytes, config: dict[str, Any], spec: dict[str, Any], sink: Any) -> dict[str, Any]:
        """``spec["trainer_kwargs"]``: ScalingConfig, RunConfig (worker env inside) and the user's other Ray Train
        objects, merged in the notebook (``_runs/trainer_config.py``), or ``{"plain": ...}``, their description as
        data where the kernel's Ray is not the cluster's. The outcome goes to the run registry whether or
        not a kernel is listening. ``spec["env"]``: the run's variables for Ray Train (``launcher_env``), set here
        as a driver script sets them: Ray Train hands them on to its controller and workers."""
        import ray

        lease = _Lease(spec.get("leases_dir"), spec["name"])
        with self._lock:
            self._fits += 1
            os.environ.update(spec.get("env") or {})
        try:
            outcome = self._fit(payload, config, spec, sink)
        finally:
            lease.end(spec.get("idle_after_s", 1800.0))
            with self._lock:
                self._fits -= 1
                self._exit_at = time.monotonic() + min(RECLAIM_S, self._ttl_s)
        registry = spec.get("registry")
        if registry is not None:
            ray.get(registry.finished.remote(spec["name"], outcome))
        return outcome

    def _fit(self, payload: bytes, config: dict[str, Any], spec: dict[str, Any], sink: Any) -> dict[str, Any]:
        kwargs = spec["trainer_kwargs"]
        if "plain" in kwargs:  # sent as data (the Ray Jobs path): made here, with the cluster's Ray
            kwargs = TrainerPlan.from_wire(kwargs["plain"]).ray_kwargs()
        # the controller's and workers' processes start now, side by side (before this process imports torch, if the
        # spare's warm-up has not yet)
        info = replace(WorkerInfo.from_wire(spec["worker_info"]), started_ahead_env=start_ahead(kwargs))
        from ray.train.torch import TorchTrainer

        def train_loop_per_worker(cfg: dict[str, Any]) -> None:
            from raynb._remote.worker import run_on_worker

            run_on_worker(payload, cfg, sink, info)

        trainer = TorchTrainer(train_loop_per_worker, train_loop_config=config, **kwargs)
        t0 = time.time()
        try:
            result = trainer.fit()
        except Exception as e:  # noqa: BLE001 - everything is reported back as data
            failures = {int(r): f"{type(x).__name__}: {x}" for r, x in getattr(e, "worker_failures", {}).items()}
            return Outcome(
                RunStatus.FAILED,
                seconds=time.time() - t0,
                error_type=type(e).__name__,
                message=str(e)[:4000],
                failures=failures,
            ).to_wire()
        ckpt = getattr(result, "checkpoint", None)
        return Outcome(
            RunStatus.SUCCEEDED,
            seconds=time.time() - t0,
            metrics=result.metrics,
            checkpoint=getattr(ckpt, "path", None),
            path=getattr(result, "path", None),
        ).to_wire()


def _train_coordinator() -> None:
    """Ray Train's controller asks a detached actor of Ray Data's, one per cluster, for its workers' resources, and
    makes it on a cluster's first run: a new Python process on that run's path (seconds; 6-9 s on 2 cores). Made here
    with Ray Train's own call (the same name, so its controller finds it), before any run needs it. An internal of
    Ray's: a Ray without it, or any error, leaves it to Ray Train as before."""
    try:
        from ray.data._internal.cluster_autoscaler.default_autoscaling_coordinator import (
            get_or_create_autoscaling_coordinator,
        )

        get_or_create_autoscaling_coordinator()
    except Exception:  # noqa: BLE001 - an optimisation only
        pass


class _Lease:
    """Keeps the embedded head up while the run goes (renewed from a thread), and for a while after it ends, so a
    kernel can come back and read it. Nothing to do on Kubernetes (``leases_dir`` None)."""

    def __init__(self, leases_dir: str | None, name: str) -> None:
        self.dir, self.name, self._stop = leases_dir, name, threading.Event()
        if leases_dir is None:
            return
        lease(leases_dir, name, _LEASE_S)

        def renew() -> None:
            while not self._stop.wait(_LEASE_S / 3):
                lease(leases_dir, name, _LEASE_S)

        threading.Thread(target=renew, name="raynb-lease", daemon=True).start()

    def end(self, idle_after_s: float) -> None:
        self._stop.set()
        if self.dir is not None:
            lease(self.dir, self.name, idle_after_s)
