"""The shape of the package, checked: no import circles, small modules, a private implementation.

Imports are read from the source (every ``import`` statement, at module level or inside a function, except those
under ``if TYPE_CHECKING:``, which never run). A circle is any module that imports one that imports it back,
directly or through others.
"""

from __future__ import annotations

import ast
from pathlib import Path

import raynb

PKG = Path(raynb.__file__).parent
MAX_LINES = 400


def _module_name(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING"
    )


def _imports(path: Path, modules: set[str]) -> set[str]:
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                for sub in child.orelse:
                    visit(sub)
                continue
            if isinstance(child, ast.Import):
                out.update(a.name for a in child.names if a.name in modules)
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package.rsplit(".", child.level - 1)[0] if child.level > 1 else package
                    target = f"{base}.{child.module}" if child.module else base
                else:
                    target = child.module or ""
                submodules = {f"{target}.{a.name}" for a in child.names} & modules
                out.update(submodules)  # `from . import _kube_api` imports that module (its package is already in)
                if target in modules and len(submodules) < len(child.names):
                    out.add(target)
            visit(child)

    visit(ast.parse(path.read_text()))
    out.discard(name)
    return out


def _graph() -> dict[str, set[str]]:
    files = sorted(PKG.rglob("*.py"))
    modules = {_module_name(p) for p in files}
    return {_module_name(p): _imports(p, modules) for p in files}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in graph:
        if v not in index:
            strong(v)
    return out


def test_the_import_reader_sees_function_level_imports() -> None:
    g = _graph()
    assert "raynb._worker" in g["raynb._launcher"]  # `from raynb._worker import run_on_worker` inside a method
    assert "raynb._kube_api" in g["raynb._kubernetes"]  # `from . import _kube_api as kube`
    assert "raynb._cluster" not in g["raynb._current"]  # only under TYPE_CHECKING
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_circles() -> None:
    assert _cycles(_graph()) == []


def test_modules_are_small_or_say_why() -> None:
    long = []
    for p in PKG.rglob("*.py"):
        text = p.read_text()
        if len(text.splitlines()) > MAX_LINES and "Why this module is long:" not in (
            ast.get_docstring(ast.parse(text)) or ""
        ):
            long.append(f"{p.relative_to(PKG)}: {len(text.splitlines())} lines")
    assert long == []


def test_implementation_modules_are_private() -> None:
    public = {"magics", "errors", "manifest", "nccl", "notebook"}  # the extension, errors and the CLIs
    top = {p.stem for p in PKG.glob("*.py")}
    assert {m for m in top if not m.startswith("_")} == public
