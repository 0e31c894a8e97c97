"""The pure parts of starting a run's Ray Train processes ahead (``_remote/train_processes.py``): how many workers a
node holds, and the setup hook every Train worker's env names (a real module path: Ray ends a worker whose hook
fails to load)."""

from __future__ import annotations

import importlib

from raynb._remote import train_processes
from raynb._shared.worker_env import PRELOAD_HOOK, SETUP_HOOK_VAR, worker_env


def test_workers_started_ahead_are_those_the_node_holds() -> None:
    node = {"CPU": 16.0, "GPU": 1.0, "memory": 1e11}
    assert train_processes.fits(node, {"CPU": 15.0, "GPU": 1.0}, 1) == 1
    assert train_processes.fits(node, {"CPU": 4.0, "GPU": 1.0}, 2) == 1  # one GPU
    assert train_processes.fits(node, {"CPU": 4.0}, 8) == 4
    assert train_processes.fits({"CPU": 8.0}, {"CPU": 1.0, "GPU": 1.0}, 2) == 0  # a head without GPUs
    assert train_processes.fits({"CPU": 2.0}, {"CPU": 0.5}, 2) == 2  # fractions: never more than asked for


def test_every_train_worker_env_names_the_preload_hook_and_it_resolves() -> None:
    env = worker_env("summary", "r", user_env={"FOO": "1"})
    assert env[SETUP_HOOK_VAR] == PRELOAD_HOOK
    module, _, name = PRELOAD_HOOK.rpartition(".")
    hook = getattr(importlib.import_module(module), name)
    assert hook is train_processes.preload
    hook()  # imports torch here; never raises
    assert train_processes.preloaded_at() is not None
