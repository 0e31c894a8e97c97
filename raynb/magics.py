"""In the kernel: ``%raycluster`` and ``%%raytrain``: parse flags, call the public API, nothing else.

Options can also be set with ``%config RayNB.<name> = value`` (or ``c.RayNB.<name>`` in an IPython profile); a flag
wins over ``%config``, which wins over ``RAYNB_*`` environment variables, which win over defaults.
"""

from __future__ import annotations

from argparse import Namespace
from collections.abc import Callable
from typing import Any

from IPython.core.magic import Magics, line_cell_magic, line_magic, magics_class
from traitlets.config import Configurable

from ._current import read_magic_config, resolve_settings
from ._magic_args import parse_cluster_line, parse_runs_line, parse_train_line, setting_flags, split_datasets
from ._settings import Settings, config_traits, parse_assignments
from .errors import KubeError, RunAborted, TrainingFailedError, UsageError, not_connected

__all__ = ["RayNB", "RayNBMagics", "register", "unregister"]


class _RayNBBase(Configurable):
    def values(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.trait_names(config=True) if getattr(self, k) is not None}


#: raynb options settable with ``%config RayNB.<name> = value``; one trait per Settings field (``_settings.py``).
#: Unset (None) means: take the next layer.
RayNB = type("RayNB", (_RayNBBase,), {"__doc__": "raynb options (%config RayNB.<name> = value).", **config_traits()})


@magics_class
class RayNBMagics(Magics):
    def __init__(self, shell: Any) -> None:
        super().__init__(shell)
        self.ip: Any = shell
        self.options = RayNB(parent=shell)
        read_magic_config(self.options.values)

    def _settings(self, flags: dict[str, Any]) -> Settings:
        return resolve_settings(flags)

    @line_magic
    def raycluster(self, line: str) -> Any:
        """%raycluster up [--local | --k8s --values F --set K=V ... | --address URL [--via jobs]] | down [NAME] | status |
        list | logs [POD] | dashboard | doctor | bench | render | warm [stop]"""
        args = parse_cluster_line(line)
        return _CLUSTER_COMMANDS[args.command or "status"](self, args)

    def _cluster_up(self, args: Namespace) -> Any:
        from ._cluster import cluster as C

        kube = bool(
            args.k8s
            or args.values
            or args.overrides
            or args.template
            or args.kube_context
            or args.kube_namespace
            or args.kubeconfig
            or args.recreate
            or args.force
            or args.no_connect
        )
        if args.address or args.token_file or args.dashboard_url:
            if kube or args.local:
                raise UsageError(
                    "%raycluster up --address connects to a running cluster; --local and the Kubernetes options "
                    "start one",
                    fix="give either --address or what to start",
                )
            return C.up(
                address=args.address,
                token_file=args.token_file,
                dashboard_url=args.dashboard_url,
                settings=self._settings({"connect_timeout_s": args.timeout, "connect_via": args.connect_via}),
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
                template=args.template,
                kubeconfig=args.kubeconfig,
                recreate=args.recreate,
                force=args.force,
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

    def _cluster_down(self, args: Namespace) -> None:
        from ._cluster import cluster as C

        where = self._settings({"kube_context": args.kube_context, "kube_namespace": args.kube_namespace})
        stopped = C.down(args.name, namespace=where.kube_namespace, context=where.kube_context, force=args.force)
        if args.name is None:
            print("cluster stopped" if stopped else "no cluster was running")

    def _cluster_list(self, args: Namespace) -> None:
        from ._cluster import cluster as C

        where = self._settings({"kube_context": args.kube_context, "kube_namespace": args.kube_namespace})
        try:
            rows = C.clusters(namespace=where.kube_namespace, context=where.kube_context)
            note = ""
        except KubeError as e:  # no embedded head, and Kubernetes cannot be asked: say both
            rows, note = [], f"\n(Kubernetes not asked: {e.what})"
        print(_cluster_table(rows) + note)

    def _cluster_render(self, args: Namespace) -> None:
        from .manifest import render_yaml

        overrides = parse_assignments(args.overrides, "%raycluster render: --set")
        print(render_yaml(args.values, overrides, template=args.template), end="")

    def _cluster_logs(self, args: Namespace) -> None:
        print(_connected().logs(args.which, tail=args.tail))

    def _cluster_doctor(self, args: Namespace) -> Any:
        from ._doctor.doctor import doctor

        _connected()
        return doctor()

    def _cluster_bench(self, args: Namespace) -> Any:
        from ._doctor.bench import bench

        _connected()
        settings = self._settings(setting_flags(args))
        return bench(
            gpu=args.gpu,
            settings=settings if (args.workers or args.gpu) else None,
            sizes=args.sizes,
            compare_tcp=args.compare_tcp,
        )

    def _cluster_dashboard(self, args: Namespace) -> Any:
        link = _connected().dashboard()
        return _Link("Ray dashboard", link) if link else None

    def _cluster_status(self, args: Namespace) -> Any:
        return _connected().status()

    def _eval(self, expr: str, flag: str) -> Any:
        """A flag's Python expression, evaluated in the notebook (the user's own code)."""
        try:
            return eval(expr, self.ip.user_ns)
        except Exception as e:  # noqa: BLE001
            raise UsageError(f"%%raytrain: {flag}{expr} failed: {type(e).__name__}: {e}") from None

    @line_cell_magic
    def raytrain(self, line: str, cell: str | None = None) -> Any:
        """%%raytrain [--workers N] [--gpu | --cpus-per-worker C] [--config EXPR] [--name RUN] [--out VAR]
        [--background] [--warm]; as a line: %raytrain ls | attach NAME [--out VAR] | stop NAME | rm NAME | logs NAME [--rank R] [--tail N] [--follow] | warm [stop]"""
        if cell is None:
            return self._runs(line)
        from ._runs.cell import compile_cell
        from ._runs.train import train

        args, config_expr = parse_train_line(line)
        env = parse_assignments(args.env, "%%raytrain: --env")
        config: dict[str, Any] = {}
        if config_expr is not None:
            config = self._eval(config_expr, "--config ")
            if not isinstance(config, dict):
                raise UsageError(f"%%raytrain: --config must give a dict, got {type(config).__name__}")
        datasets = {name: self._eval(expr, f"--datasets {name}=") for name, expr in split_datasets(args.datasets)}
        settings = self._settings(setting_flags(args))
        if args.warm:
            return self._warm_cell(args, cell, settings)
        full_cell = f"%%raytrain {line}\n{cell}"
        filename = self.ip.compile.cache(full_cell, self.ip.execution_count)
        fn = compile_cell(cell, self.ip.user_ns, filename=filename, first_line=2, check_names=not args.no_name_check)
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
                raise_on_failure=True,
                wait=not args.background,
            )
        except (RunAborted, TrainingFailedError) as e:
            if args.out:
                self.ip.user_ns[args.out] = e.run
            raise
        if args.out:
            self.ip.user_ns[args.out] = run
        return None

    def _warm_cell(self, args: Any, cell: str, settings: Any) -> Any:
        from ._runs.warm import warm

        refused = [f for f in ("background", "name", "datasets", "config", "max_failures") if getattr(args, f)]
        if refused or args.env:
            raise UsageError(
                "%%raytrain --warm runs the cell on the kernel's warm group: --"
                + ", --".join(x.replace("_", "-") for x in refused or ["env"])
                + " belong(s) to a run of its own.",
                fix="set values in a warm cell (they stay on every rank), or drop --warm for a run of its own",
            )
        shaped = (args.workers, args.gpu, args.cpus_per_worker) != (None, None, None)
        return warm(settings=settings, shaped=shaped).run_cell(cell, self.ip.user_ns)

    def _runs(self, line: str) -> Any:
        args = parse_runs_line(line)
        return _RUNS_COMMANDS[args.cmd](self, args)

    def _runs_ls(self, args: Namespace) -> Any:
        from ._runs.catalog import runs

        return runs()

    def _runs_attach(self, args: Namespace) -> None:
        from ._runs.catalog import attach

        run = attach(args.name, wait=args.wait)
        if args.out:
            self.ip.user_ns[args.out] = run

    def _warm(self, args: Namespace) -> None:
        from ._runs.warm import current_warm

        group = current_warm()
        if group is None:
            print("no warm group in this kernel: a `%%raytrain --warm` cell starts one")
        elif args.action == "stop":
            print(group.stop())
        else:
            print(repr(group))

    def _runs_logs(self, args: Namespace) -> None:
        from ._runs.catalog import run_logs

        text = run_logs(args.name, rank=args.rank, tail=args.tail, follow=args.follow)
        if text:
            print(text)

    def _runs_stop(self, args: Namespace) -> None:
        from ._runs.catalog import stop_run

        print(stop_run(args.name))

    def _runs_rm(self, args: Namespace) -> None:
        from ._runs.catalog import remove_run

        print(remove_run(args.name))


def _connected() -> Any:
    """The cluster this kernel works with, or the error that says how to connect."""
    from ._cluster.cluster import current_cluster

    cur = current_cluster()
    if cur is None:
        raise not_connected()
    return cur


_Command = Callable[[RayNBMagics, Namespace], Any]
#: every subcommand of ``%raycluster`` and of ``%raytrain``'s line form -> what runs it (the parsers in
#: ``_magic_args.py`` list the same names: tests/unit/test_magics.py holds them equal)
_CLUSTER_COMMANDS: dict[str, _Command] = {
    "up": RayNBMagics._cluster_up,
    "down": RayNBMagics._cluster_down,
    "list": RayNBMagics._cluster_list,
    "render": RayNBMagics._cluster_render,
    "status": RayNBMagics._cluster_status,
    "logs": RayNBMagics._cluster_logs,
    "dashboard": RayNBMagics._cluster_dashboard,
    "doctor": RayNBMagics._cluster_doctor,
    "bench": RayNBMagics._cluster_bench,
    "warm": RayNBMagics._warm,
}
_RUNS_COMMANDS: dict[str, _Command] = {
    "ls": RayNBMagics._runs_ls,
    "attach": RayNBMagics._runs_attach,
    "logs": RayNBMagics._runs_logs,
    "stop": RayNBMagics._runs_stop,
    "rm": RayNBMagics._runs_rm,
    "warm": RayNBMagics._warm,
}


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


_LIST_COLUMNS = ("name", "namespace", "kind", "state", "runs", "owner", "cost", "image")


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
    read_magic_config(None)
    del ip._raynb_magics
