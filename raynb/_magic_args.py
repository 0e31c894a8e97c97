"""In the kernel: the magics' command lines: the argparse parsers (option flags derived from ``_settings.py``) and the
parsing of ``%raycluster`` / ``%%raytrain`` lines into arguments. Every refusal is a UsageError with the fix; nothing
here runs anything or evaluates the user's expressions."""

from __future__ import annotations

import argparse
import ast
import re
import shlex
from typing import Any, NoReturn

from ._settings import FIELDS, add_flag, parse_assignments
from .errors import UsageError

__all__ = [
    "parse_cluster_line",
    "parse_train_line",
    "split_config_expr",
    "split_datasets",
    "train_parser",
    "cluster_parser",
]


class _Parser(argparse.ArgumentParser):
    """argparse that raises a readable UsageError instead of exiting the kernel."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message}", fix=f"usage: {self.format_usage().strip()[7:]}")

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:  # --help
        raise UsageError(self.format_help(), fix="pick the options you need from the list above")


def train_parser() -> _Parser:
    p = _Parser(
        prog="%%raytrain",
        add_help=True,
        description="Run the cell as Ray Train's train_loop_per_worker(config) on N workers.",
    )
    add_flag(p, "workers", "-n")
    add_flag(p, "gpu")
    add_flag(p, "cpus_per_worker")
    p.add_argument("--config", metavar="EXPR", help="Python expression for `config` (evaluated in the notebook)")
    p.add_argument("--name", help="run name")
    p.add_argument("--out", metavar="VAR", help="store the Run in this notebook variable")
    p.add_argument(
        "--background",
        action="store_true",
        help="return at once; the run goes on (its view keeps updating) while other cells run",
    )
    p.add_argument(
        "--warm",
        action="store_true",
        help="run the cell on this kernel's warm worker group: it starts once (this shape), then every warm cell "
        "starts at once and finds what earlier warm cells assigned on its rank; the last expression is the result",
    )
    p.add_argument(
        "--no-name-check",
        action="store_true",
        help="skip the check that every name the cell reads is defined (for names only the workers have)",
    )
    p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help="worker environment variable")
    p.add_argument(
        "--datasets",
        metavar="NAME=EXPR[,NAME=EXPR]",
        help="Ray Data datasets for the run, evaluated in the notebook; workers read them with "
        "ray.train.get_dataset_shard(NAME)",
    )
    add_flag(p, "nccl")
    add_flag(p, "strict_efa")
    add_flag(p, "max_failures")
    add_flag(p, "checkpoints")
    add_flag(p, "total_steps")
    add_flag(p, "on_stall")
    return p


def runs_parser() -> _Parser:
    """``%raytrain ls | attach NAME | stop NAME | rm NAME | logs NAME``: the runs on the connected cluster."""
    p = _Parser(prog="%raytrain", add_help=True, description="The runs on the connected cluster.")
    sub = p.add_subparsers(dest="cmd", required=True, parser_class=_Parser)
    sub.add_parser("ls", help="the runs on the cluster: name, status, step, workers, started, last report, by whom")
    at = sub.add_parser("attach", help="follow a run from this kernel: its curve so far, then live")
    at.add_argument("name")
    at.add_argument("--out", metavar="VAR", help="store the Run in this notebook variable")
    at.add_argument("--wait", action="store_true", help="block until the run ends (an interrupt stops the waiting)")
    for cmd, what in (("stop", "stop a running run (its workers with it)"), ("rm", "remove a finished run")):
        sub.add_parser(cmd, help=what).add_argument("name")
    wm = sub.add_parser("warm", help="this kernel's warm worker group: shape, age, idle time, GPUs, memory; or stop it")
    wm.add_argument("action", nargs="?", choices=["stop"], help="stop: end the group (its state with it)")
    lg = sub.add_parser("logs", help="what the run's workers printed (stdout and stderr), every rank or one")
    lg.add_argument("name")
    lg.add_argument("--rank", type=int, help="only this rank")
    lg.add_argument("--tail", type=int, default=200, help="the last N lines (default 200; 0 with --follow: only new)")
    lg.add_argument("--follow", "-f", action="store_true", help="go on printing lines as they come until the run ends")
    return p


def parse_runs_line(line: str) -> argparse.Namespace:
    args = runs_parser().parse_args(_split(line, "%raytrain"))
    if getattr(args, "out", None) is not None and not args.out.isidentifier():
        raise UsageError(f"%raytrain: --out needs a variable name, not {args.out!r}", fix="e.g. --out run")
    return args


def cluster_parser() -> _Parser:
    p = _Parser(prog="%raycluster", description="Start, inspect and stop the Ray cluster of this notebook.")
    sub = p.add_subparsers(dest="command", parser_class=_Parser)
    upp = sub.add_parser("up", help="start (or reuse) a cluster and connect")
    upp.add_argument("--local", action="store_true", help="the embedded local cluster (default)")
    add_flag(upp, "local_num_cpus")
    add_flag(upp, "local_num_gpus")
    upp.add_argument(
        "--timeout",
        type=float,
        help="seconds to wait for the cluster (embedded: start_timeout_s, Kubernetes: kube_start_timeout_s, "
        "--address: connect_timeout_s)",
    )
    add_flag(upp, "local_dashboard")
    add_flag(upp, "local_auth")
    k = upp.add_argument_group("Kubernetes (any of these creates the DLC RayCluster instead of the local cluster)")
    k.add_argument("--k8s", action="store_true", help="the DLC RayCluster with the default values file")
    k.add_argument("--values", help="values file (default: manifests/values.env)")
    k.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="overrides")
    k.add_argument("--template", help="a RayCluster template of your own (default: manifests/raycluster.yaml)")
    add_flag(k, "kube_context")
    add_flag(k, "kube_namespace")
    k.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
    k.add_argument("--recreate", action="store_true", help="replace a RayCluster whose spec differs")
    k.add_argument("--force", action="store_true", help="also reuse or recreate a RayCluster someone else owns")
    k.add_argument("--no-connect", action="store_true", help="create and wait, but do not connect this kernel")
    a = upp.add_argument_group("A running cluster raynb did not start (down only disconnects from it)")
    a.add_argument("--address", help="its address: ray://HOST:10001 (Ray Client) or http://HOST:8265 (Ray Jobs)")
    add_flag(a, "connect_via")
    a.add_argument("--token-file", help="its Ray token (default: RAY_AUTH_TOKEN / RAY_AUTH_TOKEN_PATH, as Ray reads)")
    a.add_argument("--dashboard-url", help="its dashboard (default: http://HOST:8265 when it answers there)")
    dn = sub.add_parser("down", help="stop the cluster and everything it started")
    dn.add_argument("name", nargs="?", help="a RayCluster to delete (default: this kernel's cluster)")
    dn.add_argument(
        "--force", action="store_true", help="also when runs are going on there (they stop), or it is someone else's"
    )
    add_flag(dn, "kube_namespace")
    add_flag(dn, "kube_context")
    sub.add_parser("status", help="nodes, CPUs, GPUs, pods, dashboard link")
    ls = sub.add_parser("list", help="the embedded cluster and the RayClusters of the kubeconfig's context")
    add_flag(ls, "kube_namespace")
    add_flag(ls, "kube_context")
    wm = sub.add_parser("warm", help="this kernel's warm worker group: shape, age, idle time, GPUs, memory; or stop it")
    wm.add_argument("action", nargs="?", choices=["stop"], help="stop: end the group (its state with it)")
    lg = sub.add_parser("logs", help="container log of the head or a worker pod (Kubernetes)")
    lg.add_argument("which", nargs="?", default="head", help="head, worker-N or a pod name")
    lg.add_argument("--tail", type=int, default=200)
    sub.add_parser("dashboard", help="the Ray dashboard link")
    sub.add_parser("doctor", help="preflight checks, each with a fix")
    r = sub.add_parser("render", help="print the DLC RayCluster YAML that `up --values` would apply")
    r.add_argument("--values", help="values file (default: manifests/values.env)")
    r.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="overrides")
    r.add_argument("--template", help="a RayCluster template of your own (default: manifests/raycluster.yaml)")
    b = sub.add_parser("bench", help="all_reduce bus-bandwidth sweep across the workers")
    add_flag(b, "workers", "-n")
    add_flag(b, "gpu")
    b.add_argument("--sizes", help="comma-separated sizes, e.g. 1M,64M,1G")
    b.add_argument("--compare-tcp", action="store_true", help="run again with sockets forced and give the ratio")
    return p


def _split(line: str, prog: str) -> list[str]:
    try:
        return shlex.split(line)
    except ValueError as e:  # unbalanced quotes
        raise UsageError(f"{prog}: {e} in {line!r}", fix="close the quote, or quote the whole value") from None


def setting_flags(args: argparse.Namespace) -> dict[str, Any]:
    """The Settings fields a magic line can set, as parsed (None: not on the line, the next layer decides): the
    flags ``add_flag`` declared, each named after its field."""
    return {name: value for name, value in vars(args).items() if name in FIELDS}


def parse_cluster_line(line: str) -> argparse.Namespace:
    """``%raycluster`` line -> its arguments, or a UsageError with the fix."""
    args = cluster_parser().parse_args(_split(line, "%raycluster"))
    parse_assignments(getattr(args, "overrides", []) or [], "%raycluster: --set")
    return args


def parse_train_line(line: str) -> tuple[argparse.Namespace, str | None]:
    """``%%raytrain`` line -> its arguments and the --config expression, or a UsageError with the fix. Expressions
    (--config, --datasets) are checked for syntax here and evaluated later, in the notebook."""
    rest, config_expr = split_config_expr(line)
    args = train_parser().parse_args(_split(rest, "%%raytrain"))
    if args.out is not None and not args.out.isidentifier():
        raise UsageError(f"%%raytrain: --out needs a variable name, not {args.out!r}", fix="e.g. --out run")
    parse_assignments(args.env, "%%raytrain: --env")
    for name, expr in split_datasets(args.datasets):
        try:
            ast.parse(expr, mode="eval")
        except SyntaxError:
            raise UsageError(
                f"%%raytrain: --datasets {name}={expr} is not a Python expression", fix="e.g. --datasets train=train_ds"
            ) from None
    return args, config_expr


_NEXT_DATASET = re.compile(r",\s*(?=[A-Za-z_]\w*\s*=)")


def split_datasets(text: str | None) -> list[tuple[str, str]]:
    """``train=EXPR,val=EXPR`` -> [(name, expr)]; a comma starts the next dataset only before ``NAME=``, so
    expressions may hold commas (``ray.data.from_items([1, 2])``)."""
    if not text:
        return []
    out = []
    for part in _NEXT_DATASET.split(text):
        name, sep, expr = part.partition("=")
        if not sep or not name.strip().isidentifier() or not expr.strip():
            raise UsageError(
                f"%%raytrain: --datasets takes NAME=EXPR[,NAME=EXPR], not {part!r}",
                fix="e.g. --datasets train=train_ds,val=ray.data.range(100)",
            )
        out.append((name.strip(), expr.strip()))
    return out


_CONFIG_FLAG = re.compile(r"(?:^|\s)--config(?:=|\s+)")


def split_config_expr(line: str) -> tuple[str, str | None]:
    """Pull ``--config EXPR`` out of a magic line; EXPR may hold spaces and quotes (``{"lr": 0.1}``).

    EXPR is the longest text after ``--config`` that parses as a Python expression and ends at the line's end or
    before `` --flag``.
    """
    m = _CONFIG_FLAG.search(line)
    if not m:
        return line, None
    rest = line[m.end() :]
    ends = [len(rest), *[mm.start() for mm in re.finditer(r"\s--[a-zA-Z]", rest)]]
    for end in sorted(set(ends), reverse=True):
        expr = rest[:end].strip()
        if not expr:
            continue
        try:
            ast.parse(expr, mode="eval")
        except SyntaxError:
            continue
        return (line[: m.start()].rstrip() + " " + rest[end:].lstrip()).strip(), expr
    raise UsageError(
        "%%raytrain: --config needs a Python expression",
        saw=f"--config {rest.strip()}",
        fix="e.g. --config {'lr': 0.01} or --config cfg (a notebook variable)",
    )
