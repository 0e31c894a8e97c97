"""In the kernel: turn a ``%%raytrain`` cell into the function Ray Train runs on every worker.

The cell body becomes ``def train_loop_per_worker(config): <cell>`` without shifting line numbers: the body is parsed
on its own and wrapped in a FunctionDef node, so a traceback's line N is the cell's line N as the notebook shows it
(line 1 being the ``%%raytrain`` line). :func:`serialize` pickles the function with the notebook globals it uses and,
when one cannot travel, names it. Nothing here runs the cell.
"""

from __future__ import annotations

import ast
import inspect
import os
import pickle
import sys
import sysconfig
import textwrap
import types
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from .._shared.cell_code import FUNCTION_NAME, pack, wrap
from ..errors import CaptureError, CellSyntaxError, UndefinedNameError

__all__ = ["compile_cell", "serialize", "pack_portable", "untravelable", "modules_beside", "FUNCTION_NAME"]


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
        fcode = wrap(source, filename=filename, first_line=first_line)
    except SyntaxError as e:
        raise _syntax_error(e, source, first_line) from None
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
    fn._raynb_cell = (source, filename, first_line)  # type: ignore[attr-defined]  # what pack_portable sends
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


#: the most a cell may carry through Ray Jobs: it crosses as JSON over HTTP (base64, held whole in the agent's memory)
JOBS_PAYLOAD_LIMIT = 128 * 2**20


def pack_portable(fn: Callable[..., Any], limit: int = JOBS_PAYLOAD_LIMIT) -> bytes:
    """``fn`` as source and plain data (``_shared/cell_code.py``), for a cluster on another Python: a cell's body as
    it was compiled, else the function's ``def``; the notebook globals it reads -- modules by name, functions and
    classes defined in the notebook by their source (and what those read, in turn), other values as plain pickles.
    What cannot travel so is named, as :func:`serialize` does."""
    cell = getattr(fn, "_raynb_cell", None)
    if cell is not None:
        (source, filename, first_line), kind, name = cell, "cell", FUNCTION_NAME
    else:
        if getattr(fn, "__closure__", None):
            raise CaptureError(
                f"`{fn.__name__}` reads variables of the function it was defined in; through Ray Jobs a function "
                "travels as its source, which cannot take them along.",
                fix="define the function at the top level of a cell (or module), passing values through config",
            )
        try:
            source = textwrap.dedent(inspect.getsource(fn))
        except (OSError, TypeError):
            raise CaptureError(
                f"The source of `{getattr(fn, '__name__', fn)}` cannot be read; through Ray Jobs a function "
                "travels as its source.",
                fix="define it in a notebook cell or a .py file (not by exec or a lambda), or use a %%raytrain cell",
            ) from None
        kind, name = "def", fn.__name__
        filename, first_line = fn.__code__.co_filename, fn.__code__.co_firstlineno
    captured = capture(sorted(_referenced_names(fn.__code__)), fn.__globals__, skip={name} if kind == "def" else set())
    packed = pack(
        kind,  # type: ignore[arg-type]
        source,
        name=name,
        filename=filename,
        first_line=first_line,
        modules=captured["modules"],
        definitions=captured["definitions"],
        values=captured["values"],
    )
    if len(packed) > limit:
        mb = 2**20
        biggest = sorted(captured["values"].items(), key=lambda kv: -len(kv[1]))[:3]
        raise CaptureError(
            f"This cell takes {len(packed) / mb:,.1f} MB of notebook data to the cluster; through Ray Jobs a cell "
            f"carries at most {limit / mb:,.0f} MB.",
            saw="the biggest: " + ", ".join(f"`{n}` {len(b) / mb:,.1f} MB" for n, b in biggest),
            fix="have the workers load the data themselves (a path on the cluster's storage, s3://...), passing the "
            "path through --config",
        )
    return packed


def capture(names: list[str], g: dict[str, Any], skip: set[str] | None = None) -> dict[str, Any]:
    """The notebook globals ``names`` (of namespace ``g``) as plain data another Python can make again
    (``_shared/cell_code.unpack_globals``): modules by name, functions and classes defined in the notebook by their
    source (and what those read, in turn), other values as plain pickles. What cannot travel so is named."""
    modules: dict[str, str] = {}
    definitions: dict[str, str] = {}
    values: dict[str, bytes] = {}
    culprits: list[str] = []
    todo, seen = list(names), set(skip or ())
    while todo:
        n = todo.pop(0)
        if n in seen or n not in g:
            continue
        seen.add(n)
        v = g[n]
        if _a_builtin(n, v) or (n.startswith("__") and n.endswith("__")):
            continue  # the other side has its own (a class body reads the module's `__name__`)
        if isinstance(v, types.ModuleType):
            modules[n] = v.__name__
        elif isinstance(v, (types.FunctionType, type)) and getattr(v, "__module__", None) == g.get("__name__"):
            found = _source_of(v)
            if found is None:
                culprits.append(f"`{n}` (its source cannot be read)")
                continue
            definitions[n] = found
            todo += sorted(_names_read(found))
        elif type(v).__module__ == g.get("__name__"):
            culprits.append(f"`{n}` (an object of a class defined in the notebook)")
        else:
            try:
                blob = pickle.dumps(v, protocol=4)
            except Exception as e:  # noqa: BLE001 - named below
                culprits.append(f"`{n}` ({type(v).__module__}.{type(v).__qualname__}: {e})")
                continue
            if b"__main__" in blob:
                culprits.append(f"`{n}` (an object of a class defined in the notebook)")
                continue
            values[n] = blob
    if culprits:
        raise CaptureError(
            "Through Ray Jobs the cell travels as source and plain data; these notebook globals cannot: "
            + ", ".join(culprits),
            saw="modules travel by name, the notebook's functions and classes by their source, other values as "
            "pickles of plain data",
            fix="create such objects inside the cell (each worker makes its own), or pass plain values through "
            "--config.",
        )
    # what a definition reads is defined before it
    return {"modules": modules, "definitions": dict(reversed(definitions.items())), "values": values}


def _a_builtin(name: str, value: Any) -> bool:
    """A builtin, or a wrapper of one standing in for it (a Jupyter kernel's ``open`` is IPython's, which refuses
    the kernel's own standard streams): not the notebook's to send."""
    import builtins

    own = getattr(builtins, name, None)
    return own is not None and (value is own or getattr(value, "__wrapped__", None) is own)


def _source_of(obj: Any) -> str | None:
    """The source of a function or class defined in the notebook. Before Python 3.13 ``inspect`` cannot find a
    notebook class's (it looks in ``__main__``'s file); its methods know their cell, and the class is found there."""
    try:
        return textwrap.dedent(inspect.getsource(obj))
    except (OSError, TypeError):
        pass
    import linecache

    for member in vars(obj).values() if isinstance(obj, type) else ():
        code = getattr(inspect.unwrap(member) if callable(member) else member, "__code__", None)
        if code is None or not (lines := linecache.getlines(code.co_filename)):
            continue
        text = "".join(lines)
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef) and node.name == obj.__name__:
                end = node.end_lineno or node.lineno
                if node.lineno <= code.co_firstlineno <= end:
                    return textwrap.dedent("".join(lines[node.lineno - 1 - len(node.decorator_list) : end]))
    return None


def _names_read(source: str) -> set[str]:
    return {n.id for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


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
    seen: set[str] = set()  # each top-level package once (a kernel holds ~10x as many submodules)
    for mod in list(modules if modules is not None else sys.modules.values()):
        name = getattr(mod, "__name__", "")
        top = name.split(".")[0]
        if not name or top in seen or name == "__main__" or top == "raynb":
            continue
        seen.add(top)
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
