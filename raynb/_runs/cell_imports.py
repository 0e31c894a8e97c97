"""In the kernel: what a run's function will import, read from its bytecode in the kernel, so the workers' processes can
import the slow packages of it (:data:`~raynb._shared.worker_env.AHEAD`) while they wait for Ray Train
(``_remote/ahead_imports.py``).

Measured on an H100 (records first_step-h100-2026-12-07, -07b): a cold run's worker spent 6.3-11.8 s in its
function's ``from transformers import ...`` after Ray Train handed it over, while its process had been idle for
several seconds before -- started ahead, torch imported, waiting for the controller. Read from the code, not the
source: a ``%%raytrain`` cell, a function defined in the notebook and one imported from a file all have bytecode,
and the names a cell imports at the notebook's top level are there too (a global that is a module, or a class or
function that one defines). Functions of the same module it calls are read as well (a few levels deep).

Left out: the standard library (imported in milliseconds, or already), raynb, Ray and torch itself (the worker
has them), relative imports, and any name that is also a module or package in the notebook's folder -- the worker
puts that folder first on its path only as the function starts, so an import ahead of it would find another module
of that name and keep it.
"""

from __future__ import annotations

import dis
import sys
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

__all__ = ["imports_of"]

#: what the worker has imported before any of this (its own package, Ray, and torch in raynb's setup hook)
_HAVE = frozenset({"raynb", "ray", "torch", "__main__", "builtins", "__future__"})
#: how deep calls to the same module's functions are followed, and how many names are sent at most
_DEPTH, _LIMIT = 3, 32
_STORES = frozenset({"STORE_FAST", "STORE_NAME", "STORE_GLOBAL", "STORE_DEREF", "POP_TOP", "IMPORT_FROM"})


def imports_of(fn: Callable[..., Any], beside: str | Path | None = None) -> tuple[str, ...]:
    """The modules ``fn`` imports, in the order it meets them: ``"pkg.mod"``, or ``"pkg:Name"`` for ``from pkg
    import Name`` (a name a lazy package such as transformers loads only when asked for it). ``beside``: the
    notebook's folder (its own modules are left out). ``worker_env.ahead`` keeps those a worker imports ahead."""
    code = getattr(fn, "__code__", None)
    if not isinstance(code, types.CodeType):
        return ()
    home = getattr(fn, "__module__", None)
    local = _local_names(Path(beside)) if beside else frozenset()
    found: dict[str, None] = {}
    try:
        for name in _walk(code, getattr(fn, "__globals__", {}), home, 0, set()):
            top = name.split(":")[0].split(".")[0]
            if name == "torch" or top in _HAVE - {"torch"} or top in sys.stdlib_module_names or top in local or not top:
                continue
            found.setdefault(name)
            if len(found) >= _LIMIT:
                break
    except Exception:  # noqa: BLE001 - a global whose attributes raise, an unusual code object: what was found so far
        pass
    return tuple(found)


def _walk(code: types.CodeType, globs: dict[str, Any], home: str | None, depth: int, seen: set[int]) -> Iterator[str]:
    if id(code) in seen:
        return
    seen.add(id(code))
    ops = list(dis.get_instructions(code))
    for i, op in enumerate(ops):
        if op.opname == "IMPORT_NAME":
            level = ops[i - 2].argval if i >= 2 and ops[i - 2].opname == "LOAD_CONST" else 0
            if level or not isinstance(op.argval, str):
                continue  # relative: a module of the function's own package
            yield op.argval
            if not isinstance(ops[i - 1].argval, tuple):  # no names to take: `import a.b as c` walks a's attributes
                continue
            for nxt in ops[i + 1 :]:  # `from pkg import a, b`: IMPORT_FROM a, STORE a, IMPORT_FROM b, ...
                if nxt.opname not in _STORES:
                    break
                if nxt.opname == "IMPORT_FROM":
                    yield f"{op.argval}:{nxt.argval}"
        elif op.opname in ("LOAD_GLOBAL", "LOAD_NAME") and isinstance(op.argval, str):
            yield from _global(globs.get(op.argval), home, depth, seen)
    for const in code.co_consts:  # nested functions, comprehensions, classes
        if isinstance(const, types.CodeType):
            yield from _walk(const, globs, home, depth, seen)


def _global(obj: Any, home: str | None, depth: int, seen: set[int]) -> Iterator[str]:
    """What a global the code reads stands for: a module, a function or class of another module (its module), or
    a function of the same module (read in turn)."""
    if obj is None:
        return
    if isinstance(obj, types.ModuleType):
        yield obj.__name__
        return
    module = getattr(obj, "__module__", None)
    if not isinstance(module, str):
        return
    if isinstance(obj, types.FunctionType) and module == home:
        if depth < _DEPTH:
            yield from _walk(obj.__code__, obj.__globals__, home, depth + 1, seen)
        return
    if isinstance(obj, (type, types.FunctionType, types.BuiltinFunctionType)):
        yield module


def _local_names(folder: Path) -> frozenset[str]:
    """Top-level module and package names the notebook's folder holds."""
    try:
        return frozenset(
            p.stem if p.suffix == ".py" else p.name for p in folder.iterdir() if p.suffix == ".py" or p.is_dir()
        )
    except OSError:
        return frozenset()
