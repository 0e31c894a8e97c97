"""``%raycluster`` and ``%%raytrain``: parse flags, call the public API, nothing else.

Options can also be set with ``%config RayNB.<name> = value`` (or ``c.RayNB.<name>`` in an IPython profile); a flag
wins over ``%config``, which wins over ``RAYNB_*`` environment variables, which win over defaults.
"""

from __future__ import annotations

import argparse
import ast
import re
import shlex
from typing import Any, NoReturn

from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
from traitlets.config import Configurable

from ._settings import Settings, add_flag, config_traits, parse_assignments
from .errors import RunAborted, UsageError, not_connected

__all__ = ["RayNB", "RayNBMagics", "register", "unregister"]


class _RayNBBase(Configurable):
    def values(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.trait_names(config=True) if getattr(self, k) is not None}


#: raynb options settable with ``%config RayNB.<name> = value``; one trait per Settings field (``_settings.py``).
#: Unset (None) means: take the next layer.
RayNB = type("RayNB", (_RayNBBase,), {"__doc__": "raynb options (%config RayNB.<name> = value).", **config_traits()})


class _Parser(argparse.ArgumentParser):
    """argparse that raises a readable UsageError instead of exiting the kernel."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message}", fix=f"usage: {self.format_usage().strip()[7:]}")

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:  # --help
        raise UsageError(self.format_help(), fix="pick the options you need from the list above")


def _train_parser() -> _Parser:
    p = _Parser(
        prog="%%raytrain",
        add_help=True,
        description="Run the cell as Ray Train's train_loop_per_worker(config) on N workers.",
    )
    add_flag(p, "workers", "-n")
    g = p.add_mutually_exclusive_group()
    add_flag(g, "gpu")
    add_flag(g, "cpus_per_worker")
    p.add_argument("--config", metavar="EXPR", help="Python expression for `config` (evaluated in the notebook)")
    p.add_argument("--name", help="run name")
    p.add_argument("--out", metavar="VAR", help="store the Run in this notebook variable")
    p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help="worker environment variable")
    p.add_argument(
        "--datasets",
        metavar="NAME=EXPR[,NAME=EXPR]",
        help="Ray Data datasets for the run, evaluated in the notebook; workers read them with "
        "ray.train.get_dataset_shard(NAME)",
    )
    add_flag(p, "nccl")
    add_flag(p, "strict_efa")
    return p


def _cluster_parser() -> _Parser:
    p = _Parser(prog="%raycluster", description="Start, inspect and stop the Ray cluster of this notebook.")
    sub = p.add_subparsers(dest="command", parser_class=_Parser)
    upp = sub.add_parser("up", help="start (or reuse) a cluster and connect")
    upp.add_argument("--local", action="store_true", help="the embedded local cluster (default)")
    add_flag(upp, "local_num_cpus")
    add_flag(upp, "local_num_gpus")
    upp.add_argument(
        "--timeout",
        type=float,
        help="seconds to wait for the cluster (embedded: start_timeout_s, Kubernetes: kube_start_timeout_s)",
    )
    add_flag(upp, "local_dashboard")
    add_flag(upp, "local_auth")
    k = upp.add_argument_group("Kubernetes (any of these creates the DLC RayCluster instead of the local cluster)")
    k.add_argument("--k8s", action="store_true", help="the DLC RayCluster with the default values file")
    k.add_argument("--values", help="values file (default: manifests/values.env)")
    k.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="overrides")
    add_flag(k, "kube_context")
    add_flag(k, "kube_namespace")
    k.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
    k.add_argument("--recreate", action="store_true", help="replace a RayCluster whose spec differs")
    k.add_argument("--no-connect", action="store_true", help="create and wait, but do not connect this kernel")
    dn = sub.add_parser("down", help="stop the cluster and everything it started")
    dn.add_argument("name", nargs="?", help="a RayCluster to delete (default: this kernel's cluster)")
    add_flag(dn, "kube_namespace")
    add_flag(dn, "kube_context")
    sub.add_parser("status", help="nodes, CPUs, GPUs, pods, dashboard link")
    ls = sub.add_parser("list", help="the embedded cluster and the RayClusters of the kubeconfig's context")
    add_flag(ls, "kube_namespace")
    add_flag(ls, "kube_context")
    lg = sub.add_parser("logs", help="container log of the head or a worker pod (Kubernetes)")
    lg.add_argument("which", nargs="?", default="head", help="head, worker-N or a pod name")
    lg.add_argument("--tail", type=int, default=200)
    sub.add_parser("dashboard", help="the Ray dashboard link")
    sub.add_parser("doctor", help="preflight checks, each with a fix")
    r = sub.add_parser("render", help="print the DLC RayCluster YAML that `up --values` would apply")
    r.add_argument("--values", help="values file (default: manifests/values.env)")
    r.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="overrides")
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


def parse_cluster_line(line: str) -> argparse.Namespace:
    """``%raycluster`` line -> its arguments, or a UsageError with the fix."""
    args = _cluster_parser().parse_args(_split(line, "%raycluster"))
    parse_assignments(getattr(args, "overrides", []) or [], "%raycluster: --set")
    return args


def parse_train_line(line: str) -> tuple[argparse.Namespace, str | None]:
    """``%%raytrain`` line -> its arguments and the --config expression, or a UsageError with the fix. Expressions
    (--config, --datasets) are checked for syntax here and evaluated later, in the notebook."""
    rest, config_expr = split_config_expr(line)
    args = _train_parser().parse_args(_split(rest, "%%raytrain"))
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


def parse_sizes(text: str) -> list[int]:
    """``1M,64M,1G`` -> bytes (K/M/G are powers of 1024)."""
    out = []
    for part in text.split(","):
        part = part.strip().upper().removesuffix("B").removesuffix("I")
        mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(part[-1:], 1)
        try:
            out.append(int(float(part[:-1] if mult > 1 else part) * mult))
        except ValueError:
            raise UsageError(f"%raycluster bench: cannot read size {part!r}", fix="use sizes like 1M,64M,1G") from None
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


@magics_class
class RayNBMagics(Magics):
    def __init__(self, shell: Any) -> None:
        super().__init__(shell)
        self.ip: Any = shell
        self.options = RayNB(parent=shell)

    def _settings(self, flags: dict[str, Any]) -> Settings:
        from ._cluster import resolve_settings

        return resolve_settings(flags, self.options.values())

    @line_magic
    def raycluster(self, line: str) -> Any:
        """%raycluster up [--local | --k8s --values F --set K=V ...] | down [NAME] | status | list | logs [POD] |
        dashboard | doctor | bench | render"""
        from . import _cluster as C

        args = parse_cluster_line(line)
        cmd = args.command or "status"
        if cmd == "up":
            kube = bool(
                args.k8s
                or args.values
                or args.overrides
                or args.kube_context
                or args.kube_namespace
                or args.kubeconfig
                or args.recreate
                or args.no_connect
            )
            if kube and args.local:
                raise UsageError(
                    "%raycluster up: --local cannot be combined with Kubernetes options",
                    fix="drop --local to create the RayCluster, or drop the Kubernetes options",
                )
            if kube:
                settings = self._settings(
                    {
                        "kube_start_timeout_s": args.timeout,
                        "kube_context": args.kube_context,
                        "kube_namespace": args.kube_namespace,
                    }
                )
                return C.up(
                    local=False,
                    values=args.values,
                    set=parse_assignments(args.overrides, "%raycluster up: --set"),
                    kubeconfig=args.kubeconfig,
                    recreate=args.recreate,
                    connect=not args.no_connect,
                    settings=settings,
                )
            settings = self._settings(
                {
                    "local_num_cpus": args.local_num_cpus,
                    "local_num_gpus": args.local_num_gpus,
                    "start_timeout_s": args.timeout,
                    "local_dashboard": args.local_dashboard,
                    "local_auth": args.local_auth,
                }
            )
            return C.up(local=True, settings=settings)
        if cmd == "down":
            where = self._settings({"kube_context": args.kube_context, "kube_namespace": args.kube_namespace})
            stopped = C.down(args.name, namespace=where.kube_namespace, context=where.kube_context)
            if args.name is None:
                print("cluster stopped" if stopped else "no cluster was running")
            return None
        if cmd == "list":
            where = self._settings({"kube_context": args.kube_context, "kube_namespace": args.kube_namespace})
            rows = C.clusters(namespace=where.kube_namespace, context=where.kube_context)
            print(_cluster_table(rows))
            return None
        if cmd == "render":
            from .manifest import load_values, render_yaml

            overrides = parse_assignments(args.overrides, "%raycluster render: --set")
            print(render_yaml(load_values(args.values), overrides), end="")
            return None
        cur = C.current()
        if cur is None:
            raise not_connected()
        if cmd == "logs":
            print(cur.logs(args.which, tail=args.tail))
            return None
        if cmd == "doctor":
            from ._doctor import doctor

            return doctor()
        if cmd == "bench":
            from ._probe import bench

            settings = self._settings({"workers": args.workers, "gpu": args.gpu})
            return bench(
                gpu=args.gpu,
                settings=settings if (args.workers or args.gpu) else None,
                sizes=parse_sizes(args.sizes) if args.sizes else None,
                compare_tcp=args.compare_tcp,
            )
        if cmd == "dashboard":
            return _Link("Ray dashboard", cur.dashboard_url) if cur.dashboard_url else None
        return cur.status()

    def _eval(self, expr: str, flag: str) -> Any:
        """A flag's Python expression, evaluated in the notebook (the user's own code)."""
        try:
            return eval(expr, self.ip.user_ns)
        except Exception as e:  # noqa: BLE001
            raise UsageError(f"%%raytrain: {flag}{expr} failed: {type(e).__name__}: {e}") from None

    @cell_magic
    def raytrain(self, line: str, cell: str) -> None:
        """%%raytrain [--workers N] [--gpu | --cpus-per-worker C] [--config EXPR] [--name RUN] [--out VAR]"""
        from ._cell import compile_cell
        from ._train import train

        args, config_expr = parse_train_line(line)
        env = parse_assignments(args.env, "%%raytrain: --env")
        config: dict[str, Any] = {}
        if config_expr is not None:
            config = self._eval(config_expr, "--config ")
            if not isinstance(config, dict):
                raise UsageError(f"%%raytrain: --config must give a dict, got {type(config).__name__}")
        datasets = {name: self._eval(expr, f"--datasets {name}=") for name, expr in split_datasets(args.datasets)}
        settings = self._settings(
            {
                "workers": args.workers,
                "gpu": args.gpu,
                "cpus_per_worker": args.cpus_per_worker,
                "nccl": args.nccl,
                "strict_efa": args.strict_efa,
            }
        )
        full_cell = f"%%raytrain {line}\n{cell}"
        filename = self.ip.compile.cache(full_cell, self.ip.execution_count)
        fn = compile_cell(cell, self.ip.user_ns, filename=filename, first_line=2)
        try:
            run = train(
                fn,
                config=config,
                name=args.name,
                env=env,
                settings=settings,
                cell_file=filename,
                cell_source=full_cell,
                datasets=datasets or None,
            )
        except RunAborted as e:
            if args.out:
                self.ip.user_ns[args.out] = e.run
            raise
        if args.out:
            self.ip.user_ns[args.out] = run
        run.raise_for_status()


class _Link:
    """A link that reads as its URL where HTML is not rendered (terminal IPython)."""

    def __init__(self, label: str, url: str) -> None:
        self.label, self.url = label, url

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        import html

        u = html.escape(self.url)
        return {
            "text/plain": f"{self.label}: {self.url}",
            "text/html": f'<a href="{u}" target="_blank">{html.escape(self.label)}: {u}</a>',
        }


_LIST_COLUMNS = ("name", "namespace", "kind", "state", "image")


def _cluster_table(rows: list[dict[str, str]]) -> str:
    """``%raycluster list`` as a table with headers (and a hint when there is nothing)."""
    if not rows:
        return (
            "no clusters: `%raycluster up --local` starts the embedded one, `%raycluster up --values F` a "
            "RayCluster on Kubernetes"
        )
    widths = {c: max(len(c), *(len(r.get(c, "")) for r in rows)) for c in _LIST_COLUMNS}
    line = "  ".join(f"{{:<{widths[c]}}}" for c in _LIST_COLUMNS)
    out = [line.format(*(c.upper() for c in _LIST_COLUMNS))]
    out += [line.format(*(r.get(c, "") for c in _LIST_COLUMNS)) for r in rows]
    return "\n".join(s.rstrip() for s in out)


def register(ip: Any) -> None:
    magics = RayNBMagics(ip)
    ip.register_magics(magics)
    if magics.options not in ip.configurables:
        ip.configurables.append(magics.options)
    ip._raynb_magics = magics


def unregister(ip: Any) -> None:
    magics = getattr(ip, "_raynb_magics", None)
    if magics is None:
        return
    for kind in ("line", "cell"):
        for name in ("raycluster", "raytrain"):
            ip.magics_manager.magics[kind].pop(name, None)
    if magics.options in ip.configurables:
        ip.configurables.remove(magics.options)
    del ip._raynb_magics
