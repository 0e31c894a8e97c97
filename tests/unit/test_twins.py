"""Every magic's Python twin takes the same inputs the magic does (the README's table, checked)."""

from __future__ import annotations

import argparse
import inspect

import raynb
from raynb._magic_args import cluster_parser, runs_parser, train_parser
from raynb.manifest import render_yaml

#: magic flag dest -> the twin's parameter (same name unless listed)
RENAMED = {
    "local_num_cpus": "num_cpus",
    "local_num_gpus": "num_gpus",
    "local_dashboard": "dashboard",
    "local_auth": "auth",
    "no_connect": "connect",
    "kube_context": "context",
    "kube_namespace": "namespace",
    "overrides": "set",
    "background": "wait",
    "connect_via": "via",
}
#: flags that are the magic's own business (where the cell's result goes, which face, help)
MAGIC_ONLY = {"help", "out", "k8s", "local", "no_name_check", "command", "warm"}


def test_warm_cells_have_a_twin() -> None:
    """``%%raytrain --warm`` is ``raynb.warm(workers=, gpu=, cpus_per_worker=)`` and its ``run`` / ``run_cell``."""
    import inspect

    import raynb

    params = set(inspect.signature(raynb.warm).parameters)
    assert {"workers", "gpu", "cpus_per_worker", "idle_timeout_s"} <= params
    assert callable(raynb.WarmGroup.run) and callable(raynb.WarmGroup.pull) and callable(raynb.WarmGroup.stop)


def _dests(p: argparse.ArgumentParser) -> set[str]:
    return {a.dest for a in p._actions if not isinstance(a, argparse._SubParsersAction)} - MAGIC_ONLY


def _sub(name: str) -> argparse.ArgumentParser:
    (sp,) = [a for a in cluster_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return sp.choices[name]


def _params(fn: object) -> set[str]:
    return set(inspect.signature(fn).parameters)  # type: ignore[arg-type]


def _check(dests: set[str], fn: object, extra_ok: set[str] = frozenset()) -> None:  # type: ignore[assignment]
    missing = {RENAMED.get(d, d) for d in dests} - _params(fn) - extra_ok
    assert missing == set(), f"{getattr(fn, '__name__', fn)} lacks {sorted(missing)}"


def test_raytrain_and_train() -> None:
    _check(_dests(train_parser()), raynb.train)


def test_raycluster_subcommands_and_their_twins() -> None:
    _check(_dests(_sub("up")), raynb.up)
    _check(_dests(_sub("down")), raynb.down)
    _check(_dests(_sub("list")), raynb.clusters)
    _check(_dests(_sub("bench")), raynb.bench)
    _check(_dests(_sub("render")), render_yaml)
    _check(_dests(_sub("logs")), raynb.Cluster.logs)
    assert _dests(_sub("logs")) == {"which", "tail"}


def test_raytrain_run_commands_and_their_twins() -> None:
    (sp,) = [a for a in runs_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    twins = {
        "ls": raynb.runs,
        "attach": raynb.attach,
        "stop": raynb.stop_run,
        "rm": raynb.remove_run,
        "logs": raynb.run_logs,
    }
    assert set(sp.choices) == set(twins) | {"warm"}  # `warm` / `warm stop`: repr(raynb.warm()) / .stop()
    for cmd, fn in twins.items():
        _check(_dests(sp.choices[cmd]), fn)
