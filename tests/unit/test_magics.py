"""magics.py through a real InteractiveShell: loading, flag parsing and errors (no cluster needed)."""

from __future__ import annotations

import pytest
from IPython import get_ipython
from IPython.testing.globalipapp import start_ipython

from raynb._magic_args import parse_train_line, split_config_expr
from raynb.errors import NotConnectedError, UsageError


@pytest.fixture(scope="module")
def ip():
    shell = start_ipython() or get_ipython()  # one global test shell per process
    shell.run_line_magic("load_ext", "raynb")
    yield shell
    shell.run_line_magic("unload_ext", "raynb")


def test_load_ext_registers_both_magics(ip) -> None:
    assert "raycluster" in ip.magics_manager.magics["line"]
    assert "raytrain" in ip.magics_manager.magics["cell"]


@pytest.mark.parametrize(
    ("line", "rest", "expr"),
    [
        ('--workers 2 --config {"lr": 0.1, "n": [1, 2]} --name x', "--workers 2 --name x", '{"lr": 0.1, "n": [1, 2]}'),
        ("--config cfg", "", "cfg"),
        ("--config dict(a=1, b='--x') --out r", "--out r", "dict(a=1, b='--x')"),
        ("--workers 3", "--workers 3", None),
    ],
)
def test_config_expression_may_hold_spaces(line: str, rest: str, expr: str | None) -> None:
    assert split_config_expr(line) == (rest, expr)


def test_unknown_flag_is_a_usage_error(ip) -> None:
    with pytest.raises(UsageError) as ei:
        ip.run_cell_magic("raytrain", "--wrokers 2", "pass")
    assert "--wrokers" in ei.value.message and "usage" in ei.value.message


def test_gpu_workers_take_cpus_per_worker() -> None:
    """A GPU worker's CPUs are its threads: --cpus-per-worker overrides its node's share, as for a CPU worker."""
    args, _ = parse_train_line("--gpu --cpus-per-worker 6")
    assert args.gpu is True and args.cpus_per_worker == 6.0
    assert parse_train_line("--gpu")[0].cpus_per_worker is None  # the node's share, resolved against the cluster


def test_config_must_be_a_dict(ip) -> None:
    with pytest.raises(UsageError, match="dict"):
        ip.run_cell_magic("raytrain", "--config [1, 2]", "pass")


def test_raytrain_without_a_cluster_says_how_to_start_one(ip) -> None:
    with pytest.raises(NotConnectedError) as ei:
        ip.run_cell_magic("raytrain", "--workers 2", "x = 1")
    assert "%raycluster up --local" in ei.value.message


def test_unknown_subcommand(ip) -> None:
    with pytest.raises(UsageError, match="invalid choice"):
        ip.run_line_magic("raycluster", "upp")


def test_config_magic_sets_options(ip) -> None:
    ip.run_line_magic("config", "RayNB.workers = 7")
    try:
        assert ip._raynb_magics._settings({}).workers == 7
        assert ip._raynb_magics._settings({"workers": 3}).workers == 3  # a flag still wins
    finally:
        ip.run_line_magic("config", "RayNB.workers = None")


def test_errors_render_as_a_few_lines(ip) -> None:
    result = ip.run_cell("%raycluster upp")
    assert isinstance(result.error_in_exec, UsageError)
    lines = result.error_in_exec._render_traceback_()
    assert len(lines) <= 4 and "UsageError" in lines[0]


def test_gpu_flag_takes_an_optional_boolean() -> None:
    from raynb._magic_args import train_parser

    p = train_parser()
    assert p.parse_args(["--gpu"]).gpu is True
    assert p.parse_args(["--gpu", "False"]).gpu is False
    assert p.parse_args(["--gpu", "true", "--workers", "2"]).gpu is True
    assert p.parse_args([]).gpu is None


def test_render_prints_the_yaml(ip, capsys) -> None:
    ip.run_line_magic("raycluster", "render --set GPU_NODE_TYPE=p4d.24xlarge --set NAMESPACE=team-a")
    out = capsys.readouterr().out
    assert "kind: RayCluster" in out and "namespace: team-a" in out and "vpc.amazonaws.com/efa: '4'" in out


def test_kubernetes_flags_and_local_do_not_mix(ip) -> None:
    with pytest.raises(UsageError) as ei:
        ip.run_line_magic("raycluster", "up --local --values manifests/values.env")
    assert "--local cannot be combined" in ei.value.what


def test_up_with_values_goes_to_kubernetes_and_says_what_is_missing(ip, tmp_path, monkeypatch) -> None:
    """No kubeconfig here: the magic says so first -- before the versions check, since the image's Python 3.13 never
    matches this 3.11 kernel and that error would hide what the user can fix right away."""
    import sys

    from raynb._cluster.kube_api import KubeError

    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    py = f"{sys.version_info[0]}.{sys.version_info[1]}"
    with pytest.raises(KubeError) as ei:
        ip.run_line_magic("raycluster", f"up --k8s --set PYTHON_VERSION={py} --context prod --timeout 5")
    assert ei.value.what == "No Kubernetes configuration found."
    with pytest.raises(KubeError) as ei:  # the image's own Python (3.13): still the kubeconfig first
        ip.run_line_magic("raycluster", "up --k8s --timeout 5")
    assert ei.value.what == "No Kubernetes configuration found."


def _subcommands(parser) -> set[str]:
    import argparse

    return {name for a in parser._actions if isinstance(a, argparse._SubParsersAction) for name in a.choices}


def test_every_subcommand_is_routed_through_one_table() -> None:
    """The parsers name the subcommands, one table each routes them (``%raycluster warm`` once fell through to
    ``status``: it had a parser and no branch)."""
    from raynb import magics
    from raynb._magic_args import cluster_parser, runs_parser

    assert set(magics._CLUSTER_COMMANDS) == _subcommands(cluster_parser())
    assert set(magics._RUNS_COMMANDS) == _subcommands(runs_parser())


def test_warm_without_a_group_says_how_to_start_one(ip, capsys) -> None:
    for line in ("warm", "warm stop"):
        ip.run_line_magic("raycluster", line)
        assert "no warm group in this kernel" in capsys.readouterr().out
        ip.run_line_magic("raytrain", line)
        assert "no warm group in this kernel" in capsys.readouterr().out
