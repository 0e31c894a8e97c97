"""The launcher actor that hosts ``TorchTrainer.fit()`` on the cluster, and the one spare kept warm for the next run.

``fit()`` runs inside the launcher (``num_cpus=0``), never on the kernel's main thread: Ray Train installs its own
SIGINT handler there and an interrupt would end the cell with ``SystemExit``. Aborting is ``ray.kill(launcher)``,
which takes the Train controller and the workers with it (they are owned by the launcher).
"""

from __future__ import annotations

import time
from typing import Any

from . import _metrics, _session
from ._settings import Settings
from ._worker_env import launcher_env

__all__ = ["Launcher", "prewarm", "take_spare"]


class Launcher:
    """Hosts ``TorchTrainer.fit()`` on the cluster; one per run."""

    def warm(self) -> bool:
        """Import Ray Train ahead of time (seconds on small machines), so a run starts as fast as a bare fit()."""
        import ray.train.torch  # noqa: F401

        return True

    def fit(self, payload: bytes, config: dict[str, Any], spec: dict[str, Any], sink: Any) -> dict[str, Any]:
        """``spec["trainer_kwargs"]``: ScalingConfig, RunConfig (worker env inside) and the user's other Ray Train
        objects, merged in the notebook (``_trainer_config.py``)."""
        from ray.train.torch import TorchTrainer

        info = spec["worker_info"]

        def train_loop_per_worker(cfg: dict[str, Any]) -> None:
            from raynb._worker import run_on_worker

            run_on_worker(payload, cfg, sink, info)

        trainer = TorchTrainer(train_loop_per_worker, train_loop_config=config, **spec["trainer_kwargs"])
        t0 = time.time()
        try:
            result = trainer.fit()
        except Exception as e:  # noqa: BLE001 - everything is reported back as data
            failures = {int(r): f"{type(x).__name__}: {x}" for r, x in getattr(e, "worker_failures", {}).items()}
            return {
                "status": "failed",
                "error_type": type(e).__name__,
                "message": str(e)[:4000],
                "failures": failures,
                "seconds": time.time() - t0,
            }
        ckpt = getattr(result, "checkpoint", None)
        return {
            "status": "succeeded",
            "seconds": time.time() - t0,
            "metrics": result.metrics,
            "checkpoint": getattr(ckpt, "path", None),
            "path": getattr(result, "path", None),
        }


#: (launcher, sink, connection generation, launcher env) of the spare pair, if one is warm.
_spare: tuple[Any, Any, int, tuple[tuple[str, str], ...]] | None = None


def _env_key(settings: Settings) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(launcher_env(settings.health_check_interval_s).items()))


def _new_pair(settings: Settings) -> tuple[Any, Any]:
    import ray

    env = launcher_env(settings.health_check_interval_s)
    launcher = ray.remote(num_cpus=0)(Launcher).options(runtime_env={"env_vars": env}).remote()
    launcher.warm.remote()
    return launcher, _metrics.sink_actor()


def prewarm(settings: Settings | None = None) -> None:
    """Start a launcher (with Ray Train imported) and a sink for the next run, in the background."""
    import ray

    global _spare
    settings = settings or Settings()
    if not ray.is_initialized() or (_spare is not None and _spare[2] == _session.generation()):
        return
    launcher, sink = _new_pair(settings)
    _spare = (launcher, sink, _session.generation(), _env_key(settings))


def take_spare(settings: Settings) -> tuple[Any, Any]:
    """The warm launcher and sink if they belong to this connection and these settings, else new ones."""
    global _spare
    spare, _spare = _spare, None
    if spare is not None and spare[2] == _session.generation() and spare[3] == _env_key(settings):
        return spare[0], spare[1]
    return _new_pair(settings)
