"""Turn a ``%%raytrain`` cell into the function Ray Train runs on every worker.

The cell body becomes ``def train_loop_per_worker(config): <cell>`` without shifting line numbers: the body is parsed
on its own and wrapped in a FunctionDef node, so a traceback's line N is the cell's line N as the notebook shows it
(line 1 being the ``%%raytrain`` line). :func:`serialize` pickles the function with the notebook globals it uses and,
when one cannot travel, names it. Nothing here runs the cell.
"""

from __future__ import annotations

import ast
import inspect
import os
import sys
import sysconfig
import types
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from ..errors import CaptureError, CellSyntaxError, UndefinedNameError

__all__ = ["compile_cell", "serialize", "untravelable", "modules_beside", "FUNCTION_NAME"]

FUNCTION_NAME = "train_loop_per_worker"


def compile_cell(
    source: str,
    namespace: dict[str, Any],
    *,
    filename: str = "<raytrain-cell>",
    first_line: int = 2,
    check_names: bool = True,
) -> Callable[[dict[str, Any]], Any]:
    """Compile ``source`` into ``train_loop_per_worker(config)`` whose globals are ``namespace``.

    ``first_line`` is the line of the cell the body starts on (2 under a ``%%raytrain`` line). ``check_names``: refuse
    a cell that reads a name nobody defines (a typo would otherwise surface on every worker after their start-up).
    """
    try:
        tree = ast.parse(source, filename=filename, mode="exec")
    except SyntaxError as e:
        raise _syntax_error(e, source, first_line) from None
    ast.increment_lineno(tree, first_line - 1)
    args = ast.arguments(
        posonlyargs=[],
        args=[ast.arg(arg="config")],
        vararg=None,
        kwonlyargs=[],
        kw_defaults=[],
        kwarg=None,
        defaults=[],
    )
    fdef = ast.FunctionDef(
        name=FUNCTION_NAME,
        args=args,
        body=tree.body or [ast.Pass()],
        decorator_list=[],
        returns=None,
        type_comment=None,
        lineno=max(first_line - 1, 1),
        col_offset=0,
    )
    if sys.version_info >= (3, 12):
        fdef.type_params = []
    module = ast.Module(body=[fdef], type_ignores=[])
    ast.fix_missing_locations(module)
    try:
        code = compile(module, filename, "exec", dont_inherit=True)
    except SyntaxError as e:  # e.g. a `nonlocal` with nothing to bind: only the compiler sees it
        if e.lineno is not None:
            e.lineno -= first_line - 1
        raise _syntax_error(e, source, first_line) from None
    fcode = next(c for c in code.co_consts if isinstance(c, types.CodeType) and c.co_name == FUNCTION_NAME)
    if fcode.co_flags & (inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR):
        raise CellSyntaxError(
            "A %%raytrain cell cannot contain `yield` or top-level `await`: it becomes a plain function.",
            fix="Report progress with raynb.report(...) instead of yielding values.",
        )
    if check_names:
        missing = undefined_names(fcode, namespace)
        if missing:
            shown = ", ".join(f"`{n}` (line {line})" for n, line in missing[:5])
            raise UndefinedNameError(
                f"The cell reads {shown}, not defined in the notebook or the cell"
                + (f" (and {len(missing) - 5} more)" if len(missing) > 5 else "")
                + "; found before any worker started.",
                fix="define it in an earlier cell or in this one, or fix the spelling. A name that only the workers "
                "have (set up by a module they import) passes with `%%raytrain --no-name-check`.",
            )
    fn = types.FunctionType(fcode, namespace, FUNCTION_NAME)
    fn.__qualname__ = FUNCTION_NAME
    return fn


def undefined_names(code: types.CodeType, namespace: dict[str, Any]) -> list[tuple[str, int]]:
    """Globals the cell's code reads that neither the notebook, the cell (``global`` assignments, class bodies) nor
    builtins define, with the cell line of their first use."""
    import builtins
    import dis

    stored: set[str] = set()
    reads: dict[str, int] = {}

    def walk(c: types.CodeType) -> None:
        line = c.co_firstlineno
        class_locals = {i.argval for i in dis.get_instructions(c) if i.opname == "STORE_NAME"}
        stored.update(i.argval for i in dis.get_instructions(c) if i.opname in ("STORE_GLOBAL", "DELETE_GLOBAL"))
        for ins in dis.get_instructions(c):
            pos = getattr(ins, "positions", None)
            line = (pos.lineno if pos is not None and pos.lineno else None) or line
            reads_global = ins.opname == "LOAD_GLOBAL" or (ins.opname == "LOAD_NAME" and ins.argval not in class_locals)
            if reads_global and isinstance(ins.argval, str):
                reads.setdefault(ins.argval, line)
        for const in c.co_consts:
            if isinstance(const, types.CodeType):
                walk(const)

    walk(code)
    known = set(namespace) | set(dir(builtins)) | stored
    return sorted(((n, ln) for n, ln in reads.items() if n not in known), key=lambda x: x[1])


def _syntax_error(e: SyntaxError, source: str, first_line: int) -> CellSyntaxError:
    body_line = e.lineno or 1
    cell_line = body_line + first_line - 1
    lines = source.splitlines()
    text = lines[body_line - 1] if 0 < body_line <= len(lines) else (e.text or "").rstrip("\n")
    caret = ""
    if e.offset and text:
        caret = "\n    " + " " * (max(e.offset, 1) - 1) + "^"
    return CellSyntaxError(
        f"Syntax error in the %%raytrain cell at line {cell_line}: {e.msg}",
        saw=f"\n    {text}{caret}",
        fix=f"fix line {cell_line} of the cell and run it again.",
    )


def _referenced_names(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _referenced_names(const)
    return names


def serialize(fn: Callable[..., Any], pickler: Any = None) -> bytes:
    """Pickle ``fn`` by value with what it captures; on failure name each global that cannot travel."""
    if pickler is None:
        from ray import cloudpickle

        pickler = cloudpickle
    try:
        return pickler.dumps(fn)
    except Exception as whole:  # noqa: BLE001 - any pickling failure is reported by name below
        g = getattr(fn, "__globals__", {})
        culprits = untravelable({n: g[n] for n in sorted(_referenced_names(fn.__code__) & g.keys())}, pickler)
        if not culprits:
            culprits.append(f"{type(whole).__name__}: {whole}")
        plural = "s" if len(culprits) > 1 else ""
        raise CaptureError(
            f"The cell uses notebook global{plural} that cannot be sent to the workers: " + ", ".join(culprits),
            saw="the workers get a pickled copy of every notebook global the cell refers to",
            fix="create such objects inside the cell (each worker makes its own), or pass the plain values "
            "they need through --config.",
        ) from None


def untravelable(values: dict[str, Any], pickler: Any) -> list[str]:
    """``name (type: why)`` for each value that does not pickle (modules travel by reference: skipped)."""
    out = []
    for name, value in values.items():
        if isinstance(value, types.ModuleType):
            continue
        try:
            pickler.dumps(value)
        except Exception as e:  # noqa: BLE001
            out.append(f"`{name}` ({type(value).__module__}.{type(value).__qualname__}: {e})")
    return out


def largest_globals(fn: Callable[..., Any], pickler: Any = None, n: int = 3) -> list[tuple[str, int]]:
    """The ``n`` biggest notebook globals ``fn`` takes along, as (name, pickled bytes), biggest first (``pickler``:
    Ray's cloudpickle unless given, as in :func:`serialize`)."""
    if pickler is None:
        from ray import cloudpickle

        pickler = cloudpickle
    g = getattr(fn, "__globals__", {})
    sizes = []
    for name in sorted(_referenced_names(fn.__code__) & g.keys()):
        if isinstance(g[name], types.ModuleType):
            continue
        try:
            sizes.append((name, len(pickler.dumps(g[name]))))
        except Exception:  # noqa: BLE001 - serialize() already took it along; a second pickling may still fail
            continue
    return sorted(sizes, key=lambda kv: -kv[1])[:n]


def large_payload_note(size: int, largest: list[tuple[str, int]]) -> str:
    """What to tell a user whose cell takes a lot of notebook data to a remote cluster."""
    mb = 2**20
    named = ", ".join(f"`{n}` {b / mb:,.0f} MB" for n, b in largest)
    return (
        f"this cell takes {size / mb:,.0f} MB of notebook globals to the cluster ({named}): through the "
        "port-forward that takes a while, and every worker gets a copy. Faster: have the workers load the data "
        "themselves (a path on the cluster's storage, s3://...), or hand a Ray Dataset read there to --datasets"
    )


def _stdlib_and_site_roots() -> list[Path]:
    """The interpreter's own folders (its library, its site-packages, its prefix): what lies there is installed,
    with a distribution or without one."""
    roots = {
        Path(p).resolve()
        for key in ("stdlib", "platstdlib", "purelib", "platlib")
        if (p := sysconfig.get_paths().get(key))
    }
    roots |= {Path(p).resolve() for p in sys.path if "site-packages" in p or "dist-packages" in p}
    roots.add(Path(sys.prefix).resolve())
    return sorted(roots)


def _installed_from(top: str, path: Path, owners: Mapping[str, list[str]]) -> bool:
    """Is ``path`` (the file of top-level module ``top``) part of an installed distribution, where pip put it?

    ``pip install``, ``--user`` and ``--target DIR`` all leave a ``*.dist-info`` beside what they install; a module
    beside a notebook has none. An editable install of a project under the notebook's folder does not count: its
    files live where the user edits them, which workers elsewhere do not have."""
    from importlib.metadata import PackageNotFoundError, distribution

    for dist_name in owners.get(top, ()):
        try:
            base = Path(str(distribution(dist_name).locate_file(""))).resolve()
        except PackageNotFoundError:
            continue
        if path.is_relative_to(base) and path != base:
            return True
    return False


def modules_beside(root: Path, modules: Iterable[types.ModuleType] | None = None) -> list[types.ModuleType]:
    """Top-level modules imported from under ``root`` (the notebook's folder) that no installed distribution holds.

    Workers cannot import these (they are not installed there), so they travel by value with the cell. Installed
    are the interpreter's own folders (a venv under the notebook's folder included) and whatever a distribution
    holds, wherever it lies: packages put by ``pip install --target libs`` into a folder under the notebook's are
    installed (their ``dist-info`` says so), not modules beside the notebook.
    """
    from importlib.metadata import packages_distributions

    root = root.resolve()
    installed = _stdlib_and_site_roots()
    owners: Mapping[str, list[str]] | None = None
    found: dict[str, types.ModuleType] = {}
    for mod in list(modules if modules is not None else sys.modules.values()):
        name = getattr(mod, "__name__", "")
        top = name.split(".")[0]
        if not name or top in found or name == "__main__" or top == "raynb":
            continue
        top_mod = sys.modules.get(top, mod)
        path = getattr(top_mod, "__file__", None)
        if not path or not os.path.isabs(path) or not os.path.isfile(path):
            continue  # builtins, namespace packages, generated code ("<string>")
        p = Path(path).resolve()
        if not p.is_relative_to(root) or any(p.is_relative_to(r) for r in installed if r != root):
            continue
        if owners is None:
            owners = packages_distributions()  # read once, only when a module lies under the notebook's folder
        if not _installed_from(top, p, owners):
            found[top] = top_mod
    return [found[k] for k in sorted(found)]
