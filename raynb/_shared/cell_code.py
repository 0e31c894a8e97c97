"""In any process: a cell as source and plain data, for a cluster whose Python may not be the kernel's (the Ray Jobs
path): code objects do not cross Python minors, source does. Both sides import this; standard library only.

``wrap`` turns a cell body into ``def train_loop_per_worker(config): <cell>`` without shifting line numbers (the
kernel compiles it once to check it, the worker again to run it). A packed cell (:func:`pack`) holds the body or a
``def``'s source, the notebook globals it reads -- modules by name, the notebook's own functions and classes by their
source, everything else as a plain pickle -- and :func:`build` makes the function again on the worker."""

from __future__ import annotations
import __future__

import ast
import builtins
import importlib
import pickle
import sys
import types
from collections.abc import Callable, Mapping
from typing import Any, Literal

__all__ = ["FUNCTION_NAME", "MARK", "wrap", "pack", "is_packed", "build", "unpack_globals"]

FUNCTION_NAME = "train_loop_per_worker"
#: the first bytes of a packed cell (a cloudpickled function never starts so: pickle's protocol byte comes first)
MARK = b"raynb-cell/1\n"
#: pickles stay readable from Python 3.8 on, whichever side is newer
PROTOCOL = 4
#: a notebook's ``def``s are compiled with lazy annotations: a type hint names what only the notebook imported
_LAZY = __future__.annotations.compiler_flag


def wrap(source: str, *, filename: str, first_line: int) -> types.CodeType:
    """The code of ``train_loop_per_worker(config)`` whose body is ``source``, line N of the body being line
    ``first_line + N - 1`` of the cell. A ``SyntaxError`` keeps the body's own line number."""
    tree = ast.parse(source, filename=filename, mode="exec")
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
        raise
    return next(c for c in code.co_consts if isinstance(c, types.CodeType) and c.co_name == FUNCTION_NAME)


def pack(
    kind: Literal["cell", "def"],
    source: str,
    *,
    name: str,
    filename: str,
    first_line: int,
    modules: Mapping[str, str],
    definitions: Mapping[str, str],
    values: Mapping[str, bytes],
) -> bytes:
    """A cell (``kind="cell"``: the body of ``%%raytrain``) or a function (``"def"``: its ``def`` statement, ``name``
    the function's) with what it reads from the notebook: ``modules`` (global name -> module to import),
    ``definitions`` (global name -> the source defining it, run in order), ``values`` (name -> a plain pickle)."""
    doc = {
        "kind": kind,
        "source": source,
        "name": name,
        "filename": filename,
        "first_line": first_line,
        "modules": dict(modules),
        "definitions": dict(definitions),
        "values": dict(values),
        "python": f"{sys.version_info[0]}.{sys.version_info[1]}",
    }
    return MARK + pickle.dumps(doc, protocol=PROTOCOL)


def is_packed(payload: bytes) -> bool:
    return payload.startswith(MARK)


def unpack_globals(captured: Mapping[str, Any], ns: dict[str, Any] | None = None) -> dict[str, Any]:
    """The notebook globals ``captured`` holds (``modules``, ``definitions``, ``values``, as :func:`pack` takes
    them), made in ``ns`` (a new namespace unless given): modules imported, values unpickled, definitions run."""
    if ns is None:
        ns = {"__name__": "__raynb_cell__", "__builtins__": builtins}
    for global_name, module in captured["modules"].items():
        ns[global_name] = importlib.import_module(module)
    for global_name, blob in captured["values"].items():
        ns[global_name] = pickle.loads(blob)
    for global_name, definition in captured["definitions"].items():
        exec(compile(definition, f"<notebook: {global_name}>", "exec", _LAZY, dont_inherit=True), ns)
    return ns


def build(payload: bytes) -> Callable[[dict[str, Any]], Any]:
    """The function a packed cell holds, made in this process: its modules imported, the notebook's definitions run,
    its values unpickled, in a namespace of its own."""
    doc = pickle.loads(payload[len(MARK) :])
    ns = unpack_globals(doc)
    if doc["kind"] == "cell":
        fn = types.FunctionType(wrap(doc["source"], filename=doc["filename"], first_line=doc["first_line"]), ns)
        fn.__qualname__ = FUNCTION_NAME
        return fn
    tree = ast.parse(doc["source"], filename=doc["filename"])
    ast.increment_lineno(tree, doc["first_line"] - 1)
    exec(compile(tree, doc["filename"], "exec", _LAZY, dont_inherit=True), ns)
    made: Callable[[dict[str, Any]], Any] = ns[doc["name"]]
    return made
