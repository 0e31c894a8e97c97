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
from traitlets import Bool, Float, Integer, Unicode
from traitlets.config import Configurable

from .config import Settings, parse_assignments
from .errors import RunAborted, UsageError

__all__ = ["RayNB", "RayNBMagics", "register", "unregister"]


class RayNB(Configurable):
    """raynb options settable with ``%config RayNB.<name> = value``. Unset (None) means: take the next layer."""

    workers = Integer(None, allow_none=True, help="Default number of %%raytrain workers.").tag(config=True)
    gpu = Bool(None, allow_none=True, help="Train on GPUs by default.").tag(config=True)
    cpus_per_worker = Float(None, allow_none=True, help="CPUs each worker reserves.").tag(config=True)
    local_num_cpus = Integer(None, allow_none=True, help="CPUs the embedded head offers.").tag(config=True)
    local_num_gpus = Integer(None, allow_none=True, help="GPUs the embedded head offers.").tag(config=True)
    local_dashboard = Bool(None, allow_none=True, help="Start the embedded head with Ray's dashboard.").tag(config=True)
    start_timeout_s = Float(None, allow_none=True, help="How long `up` waits for the cluster.").tag(config=True)
    connect_timeout_s = Float(None, allow_none=True, help="How long Ray Client connects may retry.").tag(config=True)
    health_check_interval_s = Float(None, allow_none=True, help="Ray Train controller poll interval.").tag(
        config=True)
    fast_train_report = Bool(None, allow_none=True,
                             help="Route metric-only ray.train.report() to raynb's non-blocking path.").tag(config=True)
    refresh_hz = Float(None, allow_none=True, help="Live display redraws per second.").tag(config=True)
    nccl = Unicode(None, allow_none=True, help="NCCL logging: summary, full or off.").tag(config=True)
    strict_efa = Bool(None, allow_none=True, help="Fail runs whose NCCL fell back to sockets.").tag(config=True)
    storage_path = Unicode(None, allow_none=True, help="Ray Train storage path.").tag(config=True)
    kube_context = Unicode(None, allow_none=True, help="Kubernetes context (default: the current one).").tag(
        config=True)
    kube_namespace = Unicode(None, allow_none=True, help="Kubernetes namespace (default: the values file's).").tag(
        config=True)
    kube_start_timeout_s = Float(None, allow_none=True, help="How long `up` waits for a Kubernetes RayCluster.").tag(
        config=True)

    def values(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.trait_names(config=True) if getattr(self, k) is not None}


def _bool(text: str) -> bool:
    low = text.strip().lower()
    if low in {"1", "true", "yes", "on"}:
        return True
    if low in {"0", "false", "no", "off"}:
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, not {text!r}")


class _Parser(argparse.ArgumentParser):
    """argparse that raises a readable UsageError instead of exiting the kernel."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message}", fix=f"usage: {self.format_usage().strip()[7:]}")

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:  # --help
        raise UsageError(self.format_help())


def _train_parser() -> _Parser:
    p = _Parser(prog="%%raytrain", add_help=True,
                description="Run the cell as Ray Train's train_loop_per_worker(config) on N workers.")
    p.add_argument("--workers", "-n", type=int, help="number of workers")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--gpu", nargs="?", const=True, default=None, type=_bool, metavar="BOOL",
                   help="one GPU per worker (NCCL); `--gpu $USE_GPU` takes a notebook variable")
    g.add_argument("--cpus-per-worker", type=float, help="CPUs per worker (gloo)")
    p.add_argument("--config", metavar="EXPR", help="Python expression for `config` (evaluated in the notebook)")
    p.add_argument("--name", help="run name")
    p.add_argument("--out", metavar="VAR", help="store the Run in this notebook variable")
    p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help="worker environment variable")
    p.add_argument("--nccl", choices=["summary", "full", "off"], help="NCCL logging")
    p.add_argument("--strict-efa", action="store_true", default=None, help="fail fast on a socket fallback")
    return p


def _cluster_parser() -> _Parser:
    p = _Parser(prog="%raycluster", description="Start, inspect and stop the Ray cluster of this notebook.")
    sub = p.add_subparsers(dest="command", parser_class=_Parser)
    upp = sub.add_parser("up", help="start (or reuse) a cluster and connect")
    upp.add_argument("--local", action="store_true", help="the embedded local cluster (default)")
    upp.add_argument("--num-cpus", type=int)
    upp.add_argument("--num-gpus", type=int)
    upp.add_argument("--timeout", type=float)
    upp.add_argument("--no-dashboard", action="store_true", default=None, help="start the head without Ray's dashboard")
    k = upp.add_argument_group("Kubernetes (any of these creates the DLC RayCluster instead of the local cluster)")
    k.add_argument("--k8s", action="store_true", help="the DLC RayCluster with the default values file")
    k.add_argument("--values", help="values file (default: manifests/values.env)")
    k.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="overrides")
    k.add_argument("--context", help="kubeconfig context (default: the current one)")
    k.add_argument("--namespace", help="namespace (default: NAMESPACE in the values file)")
    k.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
    k.add_argument("--recreate", action="store_true", help="replace a RayCluster whose spec differs")
    k.add_argument("--no-connect", action="store_true", help="create and wait, but do not connect this kernel")
    dn = sub.add_parser("down", help="stop the cluster and everything it started")
    dn.add_argument("name", nargs="?", help="a RayCluster to delete (default: this kernel's cluster)")
    dn.add_argument("--namespace")
    dn.add_argument("--context")
    sub.add_parser("status", help="nodes, CPUs, GPUs, pods, dashboard link")
    ls = sub.add_parser("list", help="the embedded cluster and the RayClusters of the kubeconfig's context")
    ls.add_argument("--namespace", help="one namespace (default: all)")
    ls.add_argument("--context")
    lg = sub.add_parser("logs", help="container log of the head or a worker pod (Kubernetes)")
    lg.add_argument("which", nargs="?", default="head", help="head, worker-N or a pod name")
    lg.add_argument("--tail", type=int, default=200)
    sub.add_parser("dashboard", help="the Ray dashboard link")
    sub.add_parser("doctor", help="preflight checks, each with a fix")
    r = sub.add_parser("render", help="print the DLC RayCluster YAML that `up --values` would apply")
    r.add_argument("--values", help="values file (default: manifests/values.env)")
    r.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="overrides")
    b = sub.add_parser("bench", help="all_reduce bus-bandwidth sweep across the workers")
    b.add_argument("--workers", "-n", type=int)
    b.add_argument("--gpu", action="store_true", default=None)
    b.add_argument("--sizes", help="comma-separated sizes, e.g. 1M,64M,1G")
    b.add_argument("--compare-tcp", action="store_true", help="run again with sockets forced and give the ratio")
    return p


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
    rest = line[m.end():]
    ends = [len(rest)] + [i for i in (mm.start() for mm in re.finditer(r"\s--[a-zA-Z]", rest))]
    for end in sorted(set(ends), reverse=True):
        expr = rest[:end].strip()
        if not expr:
            continue
        try:
            ast.parse(expr, mode="eval")
        except SyntaxError:
            continue
        return (line[: m.start()].rstrip() + " " + rest[end:].lstrip()).strip(), expr
    raise UsageError("%%raytrain: --config needs a Python expression, e.g. --config {'lr': 0.01} or --config cfg",
                     saw=f"--config {rest.strip()}")


@magics_class
class RayNBMagics(Magics):
    def __init__(self, shell: Any) -> None:
        super().__init__(shell)
        self.options = RayNB(parent=shell)

    def _settings(self, flags: dict[str, Any]) -> Settings:
        from .cluster import resolve_settings

        return resolve_settings(flags, self.options.values())

    @line_magic
    def raycluster(self, line: str) -> Any:
        """%raycluster up [--local | --k8s --values F --set K=V ...] | down [NAME] | status | list | logs [POD] |
        dashboard | doctor | bench | render"""
        from . import cluster as C

        try:
            args = _cluster_parser().parse_args(shlex.split(line))
        except ValueError as e:  # shlex: unbalanced quotes
            raise UsageError(f"%raycluster: {e}") from None
        cmd = args.command or "status"
        if cmd == "up":
            kube = bool(args.k8s or args.values or args.overrides or args.context or args.namespace
                        or args.kubeconfig or args.recreate or args.no_connect)
            if kube and args.local:
                raise UsageError("%raycluster up: --local cannot be combined with Kubernetes options",
                                 fix="drop --local to create the RayCluster, or drop the Kubernetes options")
            if kube:
                settings = self._settings({"kube_start_timeout_s": args.timeout, "kube_context": args.context,
                                           "kube_namespace": args.namespace})
                return C.up(local=False, values=args.values,
                            set=parse_assignments(args.overrides, "%raycluster up: --set"),
                            kubeconfig=args.kubeconfig, recreate=args.recreate, connect=not args.no_connect,
                            settings=settings)
            settings = self._settings({"local_num_cpus": args.num_cpus, "local_num_gpus": args.num_gpus,
                                       "start_timeout_s": args.timeout,
                                       "local_dashboard": False if args.no_dashboard else None})
            return C.up(local=True, settings=settings)
        if cmd == "down":
            kube = self._settings({"kube_context": args.context, "kube_namespace": args.namespace})
            stopped = C.down(args.name, namespace=kube.kube_namespace, context=kube.kube_context)
            if args.name is None:
                print("cluster stopped" if stopped else "no cluster was running")
            return None
        if cmd == "list":
            kube = self._settings({"kube_context": args.context, "kube_namespace": args.namespace})
            rows = C.clusters(namespace=kube.kube_namespace, context=kube.kube_context)
            if not rows:
                print("no clusters")
            for r in rows:
                print(f"{r['name']:<24} {r['namespace']:<12} {r['kind']:<10} {r['state']}  ({r['image']})")
            return None
        if cmd == "render":
            from .manifest import load_values, render_yaml

            overrides = parse_assignments(args.overrides, "%raycluster render: --set")
            print(render_yaml(load_values(args.values), overrides), end="")
            return None
        cur = C.current()
        if cur is None:
            from .errors import NotConnectedError

            raise NotConnectedError("This kernel is not connected to a Ray cluster.",
                                    fix="run `%raycluster up --local` first.")
        if cmd == "logs":
            print(cur.logs(args.which, tail=args.tail))
            return None
        if cmd == "doctor":
            from .preflight import doctor

            return doctor()
        if cmd == "bench":
            from .probe import bench

            settings = self._settings({"workers": args.workers, "gpu": args.gpu})
            return bench(gpu=args.gpu, settings=settings if (args.workers or args.gpu) else None,
                         sizes=parse_sizes(args.sizes) if args.sizes else None, compare_tcp=args.compare_tcp)
        if cmd == "dashboard":
            from IPython.display import HTML

            url = cur.dashboard_url
            return HTML(f'<a href="{url}" target="_blank">Ray dashboard: {url}</a>') if url else None
        return cur.status()

    @cell_magic
    def raytrain(self, line: str, cell: str) -> None:
        """%%raytrain [--workers N] [--gpu | --cpus-per-worker C] [--config EXPR] [--name RUN] [--out VAR]"""
        from .cell import compile_cell
        from .run import train

        rest, config_expr = split_config_expr(line)
        try:
            args = _train_parser().parse_args(shlex.split(rest))
        except ValueError as e:
            raise UsageError(f"%%raytrain: {e}") from None
        if args.out is not None and not args.out.isidentifier():
            raise UsageError(f"%%raytrain: --out needs a variable name, not {args.out!r}")
        env = parse_assignments(args.env, "%%raytrain: --env")
        config: dict[str, Any] = {}
        if config_expr is not None:
            try:
                config = eval(config_expr, self.shell.user_ns)  # noqa: S307 - the user's own notebook expression
            except Exception as e:  # noqa: BLE001
                raise UsageError(f"%%raytrain: --config {config_expr} failed: {type(e).__name__}: {e}") from None
            if not isinstance(config, dict):
                raise UsageError(f"%%raytrain: --config must give a dict, got {type(config).__name__}")
        settings = self._settings({
            "workers": args.workers, "gpu": args.gpu, "cpus_per_worker": args.cpus_per_worker,
            "nccl": args.nccl, "strict_efa": args.strict_efa,
        })
        full_cell = f"%%raytrain {line}\n{cell}"
        filename = self.shell.compile.cache(full_cell, self.shell.execution_count)
        fn = compile_cell(cell, self.shell.user_ns, filename=filename, first_line=2)
        try:
            run = train(fn, config=config, name=args.name, env=env, settings=settings, cell_file=filename,
                        cell_source=full_cell)
        except RunAborted as e:
            if args.out:
                self.shell.user_ns[args.out] = e.run
            raise
        if args.out:
            self.shell.user_ns[args.out] = run
        run.raise_for_status()


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

