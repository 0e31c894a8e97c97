"""_settings.py: one place, one order: flag > %config > RAYNB_* env > values file > default."""

from __future__ import annotations

import pytest

from raynb._settings import Settings, resolve
from raynb.errors import UsageError


def test_defaults() -> None:
    s = resolve(env={})
    assert s == Settings()
    assert s.workers == 2 and s.gpu is False and s.nccl == "summary"


def test_precedence_flag_config_env_values() -> None:
    env = {"RAYNB_WORKERS": "5", "RAYNB_CPUS_PER_WORKER": "0.5", "RAYNB_GPU": "yes"}
    s = resolve({"workers": 8}, {"workers": 6, "refresh_hz": 2}, env, {"workers": 4, "storage_path": "s3://b/x"})
    assert s.workers == 8  # flag
    assert s.refresh_hz == 2.0  # %config
    assert s.cpus_per_worker == 0.5 and s.gpu is True  # environment
    assert s.storage_path == "s3://b/x"  # values file


def test_none_means_not_set_here() -> None:
    assert resolve({"workers": None}, {"workers": 3}, {}).workers == 3


def test_bad_values_say_where_they_came_from() -> None:
    with pytest.raises(UsageError, match="environment"):
        resolve(env={"RAYNB_WORKERS": "many"})
    with pytest.raises(UsageError, match="gpu"):
        resolve({"gpu": "perhaps"}, env={})
    with pytest.raises(UsageError, match="nccl"):
        resolve({"nccl": "loud"}, env={})


def test_parse_assignments_for_env_and_set_flags() -> None:
    from raynb._settings import parse_assignments

    assert parse_assignments(["A=1", "B=x=y", "C="], "--env") == {"A": "1", "B": "x=y", "C": ""}
    with pytest.raises(UsageError, match="--set takes KEY=VALUE, not 'oops'"):
        parse_assignments(["oops"], "--set")
    with pytest.raises(UsageError):
        parse_assignments(["=v"], "--env")


def test_each_option_is_declared_once_and_the_faces_agree() -> None:
    """%config traits and magic flags are derived from the Settings fields: same names, types, help and choices."""
    import argparse
    import dataclasses

    from raynb import _settings
    from raynb._magic_args import cluster_parser, train_parser
    from raynb.magics import RayNB

    fields = {f.name: f for f in dataclasses.fields(Settings)}
    traits = RayNB.class_traits(config=True)
    assert set(traits) == set(fields)
    kinds = {bool: "Bool", int: "Int", float: "Float", str: "Unicode"}
    for name, f in fields.items():
        assert traits[name].help == f.metadata["help"], name
        assert type(traits[name]).__name__ == kinds[_settings.base_type(name)], name

    def actions(p: argparse.ArgumentParser) -> list[argparse.Action]:
        out = list(p._actions)
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                for sub in a.choices.values():
                    out += actions(sub)
        return out

    # What a command acts on, not how raynb is configured: the subcommand and its operands, the run's own inputs
    # (its config, name, data, environment), one-off actions, and the values file and its --set lines (the values
    # layer of Settings, resolved with it). Two flags configure without being a Settings field of their own:
    # --timeout sets start_timeout_s (embedded) or kube_start_timeout_s (Kubernetes), whichever `up` starts, and
    # --kubeconfig names the file as kubectl's flag does ($KUBECONFIG otherwise). --address, --token-file and
    # --dashboard-url name a running cluster to connect to, as a RayCluster's name does. A new flag is one or the other.
    not_settings = {"help", "command", "action", "which", "name", "out", "config", "datasets", "env", "background",
                    "warm", "no_name_check", "force", "recreate", "no_connect", "local", "k8s", "values", "template", "overrides",
                    "tail", "sizes", "compare_tcp", "timeout", "kubeconfig", "address", "token_file", "dashboard_url"}  # fmt: skip
    seen = set()
    for a in actions(train_parser()) + actions(cluster_parser()):
        if a.dest in fields:
            f = fields[a.dest]
            assert f.metadata["flag"] in a.option_strings and a.help == f.metadata["help"], a.dest
            assert a.choices == _settings.choices(a.dest), a.dest
            seen.add(a.dest)
        else:
            assert a.dest in not_settings, f"{a.option_strings or a.dest}: a magic flag that is not a Settings field"
    declared_flags = {n for n, f in fields.items() if f.metadata["flag"]}
    assert seen == declared_flags  # every declared flag is on some magic, and no other flag configures raynb


def test_flags_parse_to_the_option_types() -> None:
    from raynb._magic_args import cluster_parser, train_parser

    a = train_parser().parse_args(["--workers", "4", "--gpu", "false", "--nccl", "off", "--strict-efa"])
    assert (a.workers, a.gpu, a.nccl, a.strict_efa) == (4, False, "off", True)
    u = cluster_parser().parse_args(["up", "--num-gpus", "2", "--no-dashboard", "--namespace", "ns"])
    assert (u.local_num_gpus, u.local_dashboard, u.kube_namespace) == (2, False, "ns")
    assert cluster_parser().parse_args(["up"]).local_dashboard is None  # unset: the next layer decides


def test_config_in_a_shell_reaches_every_entry_point(monkeypatch) -> None:
    """`%config RayNB.<name>` set in a real IPython shell is the layer every call resolves against -- the Python API,
    the doctor, attach and bench read ``_current.resolve_settings`` as the magics do -- below a call's own flags and
    above the environment; unloading the extension takes the layer away."""
    from IPython import get_ipython
    from IPython.testing.globalipapp import start_ipython

    from raynb._current import resolve_settings

    monkeypatch.setenv("RAYNB_STORAGE_PATH", "/from/the/environment")
    ip = start_ipython() or get_ipython()  # one global test shell per process
    ip.run_line_magic("load_ext", "raynb")
    try:
        ip.run_line_magic("config", "RayNB.storage_path = '/shared/runs'")
        ip.run_line_magic("config", "RayNB.workers = 3")
        s = resolve_settings()
        assert (s.storage_path, s.workers) == ("/shared/runs", 3)
        assert resolve_settings({"workers": 5}).workers == 5  # a call's own argument wins
    finally:  # the global shell keeps its config for the next test's RayNB: set back
        ip.run_line_magic("config", "RayNB.storage_path = None")
        ip.run_line_magic("config", "RayNB.workers = None")
        ip.run_line_magic("unload_ext", "raynb")
    assert resolve_settings().storage_path == "/from/the/environment"
