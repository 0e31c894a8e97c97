"""The shape of the package, checked: no import circles, small modules, a private implementation; and the house by
process (issue 36, ``../shared/design/house-plan.md``): imports only go down the layer map, only the seam calls
raynb's actors, cluster processes load only cluster code.

Imports are read from the source (every ``import`` statement, at module level or inside a function; those under
``if TYPE_CHECKING:``, which never run, only where ``type_checking`` says so); importing ``a.b.c`` also runs the
package ``a.b``. A circle is any module that imports one that imports it back, directly or through others.

The house rules still broken are ``xfail(strict=True)`` with today's state as the reason: each step of the move makes
one pass, and strictness makes it say so (the mark then goes).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

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


def _imports(path: Path, modules: set[str], type_checking: bool = False) -> set[str]:
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child) and not type_checking:
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
    # importing raynb.display.series runs raynb/display/__init__.py first (the root package, which every process
    # imports anyway, is left out)
    out |= {p for m in out for p in _parents(m)} & modules
    out.discard(name)
    out -= set(_parents(name))  # a module runs inside its own package: no edge
    return out


def _parents(mod: str) -> list[str]:
    parts = mod.split(".")
    return [".".join(parts[:i]) for i in range(2, len(parts))]


def _graph(type_checking: bool = False) -> dict[str, set[str]]:
    files = sorted(PKG.rglob("*.py"))
    modules = {_module_name(p) for p in files}
    return {_module_name(p): _imports(p, modules, type_checking) for p in files}


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
    assert "raynb._remote.worker" in g["raynb._remote.launcher"]  # `from raynb._remote.worker import …` in a method
    assert "raynb._cluster.kube_api" in g["raynb._cluster.kubernetes"]  # `from . import kube_api as kube`
    assert "raynb._shared.cost" not in g["raynb._current"]  # only under TYPE_CHECKING
    assert "raynb._shared.cost" in _graph(type_checking=True)["raynb._current"]
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_circles() -> None:
    assert _cycles(_graph()) == []


def test_no_module_over_400_lines() -> None:
    long = [
        f"{p.relative_to(PKG)}: {n} lines"
        for p in PKG.rglob("*.py")
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    ]
    assert long == []


def test_implementation_modules_are_private() -> None:
    public = {"magics", "errors", "manifest", "nccl", "notebook"}  # the extension, errors and the CLIs
    top = {p.stem for p in PKG.glob("*.py")} | {p.parent.name for p in PKG.glob("*/__init__.py")}
    assert {m for m in top if not m.startswith("_")} == public | {"display"}  # display/: the kernel's renderer


# --- the house by process (issue 36): the layer map ARCHITECTURE.md draws, as a table a test reads ----------------
CORE = {"raynb._settings", "raynb._current", "raynb._checks", "raynb._identity", "raynb.errors"}
#: layer (a module, or a package and everything in it) -> the layers it may import besides itself
MAY_IMPORT: dict[str, set[str]] = {
    "raynb._shared": set(),  # pure; any process
    "raynb._remote": {"raynb._shared", "raynb.nccl"},  # on the cluster: head actors, Train workers, node tasks
    "raynb.nccl": set(),
    "raynb.errors": set(),
    "raynb.display": {"raynb._shared"},
    "raynb._identity": {"raynb.errors"},
    "raynb._settings": {"raynb.errors"},
    "raynb._checks": {"raynb.display"},
    "raynb._current": {"raynb._settings", "raynb._shared"},
    "raynb._kuberay_crd": {"raynb.errors"},
    "raynb.manifest": {"raynb._identity", "raynb._settings", "raynb.errors", "raynb._kuberay_crd"},
    "raynb._client": {"raynb._shared", "raynb._remote", "raynb.errors"},  # the seam: Ray Client's, and HTTP's
    "raynb._agent": {"raynb._shared", "raynb._client", "raynb._remote", "raynb.errors"},  # on the head: a Ray Job
    "raynb._cluster": {"raynb._shared", "raynb.display", *CORE, "raynb.manifest", "raynb._client"},
    "raynb._runs": {"raynb._shared", "raynb.display", *CORE, "raynb._client", "raynb._remote"},
    "raynb._doctor": {
        *("raynb._shared", "raynb.display", *CORE, "raynb._client", "raynb._remote", "raynb._cluster", "raynb._runs")
    },
}
#: the faces: they may import anything (``raynb/__init__`` at module level only what a worker needs)
FACES = {"raynb", "raynb.magics", "raynb._magic_args", "raynb.notebook"}
#: where cluster processes start: each imports only cluster code
CLUSTER_ENTRIES = [
    *(
        f"raynb._remote.{m}"
        for m in ("worker", "warm_worker", "launcher", "registry", "sink", "tasks", "train_processes")
    ),
    "raynb._agent.server",
]
KERNEL_ONLY = ("IPython", "ipywidgets", "plotly", "pandas", "traitlets", "kubernetes", "yaml")


def _layer(mod: str) -> str | None:
    keys = [k for k in MAY_IMPORT if mod == k or mod.startswith(k + ".")]
    return max(keys, key=len) if keys else None


def test_no_import_circles_counting_type_only_imports() -> None:
    assert _cycles(_graph(type_checking=True)) == []


def test_imports_only_go_down_the_layer_map() -> None:
    graph = _graph(type_checking=True)
    homeless = sorted(m for m in graph if m not in FACES and _layer(m) is None)
    assert homeless == [], "every module is in a layer of MAY_IMPORT, or a face"
    up = [
        f"{a} -> {b}"
        for a, targets in graph.items()
        if (la := _layer(a)) is not None
        for b in sorted(targets)
        if (lb := _layer(b)) != la and lb not in MAY_IMPORT[la]
    ]
    assert up == []


def _actor_calls(source: str) -> list[int]:
    """Lines of ``x.remote(...)`` and ``ray.get/wait/kill/get_actor(...)`` (Ray's own API -- ``ray.init``,
    ``ray.nodes()`` -- stays allowed anywhere)."""
    ray_calls = {"get", "wait", "kill", "get_actor"}
    return [
        n.lineno
        for n in ast.walk(ast.parse(source))
        if isinstance(n, ast.Call)
        and isinstance(f := n.func, ast.Attribute)
        and (f.attr == "remote" or (isinstance(f.value, ast.Name) and f.value.id == "ray" and f.attr in ray_calls))
    ]


def test_the_actor_call_reader_sees_calls() -> None:
    assert _actor_calls("import ray\nray.get(h.f.remote(1))\nray.nodes()\nray.init()\n") == [2, 2]


def test_only_the_seam_calls_raynbs_actors() -> None:
    calls = [
        c
        for p in sorted(PKG.rglob("*.py"))
        if not _module_name(p).startswith(("raynb._client", "raynb._remote"))
        for c in (f"{p.relative_to(PKG)}:{n}" for n in _actor_calls(p.read_text()))
    ]
    assert calls == []


def test_cluster_processes_load_only_cluster_code() -> None:
    code = (
        "import sys, importlib; [importlib.import_module(m) for m in sys.argv[1:]]; "
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in ('raynb', *{KERNEL_ONLY!r})))"
    )
    p = subprocess.run([sys.executable, "-c", code, *CLUSTER_ENTRIES], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr[-1500:]
    # the agent makes the seam's Ray-handle calls on the head (``_client``), as a kernel would over Ray Client
    ok = ("raynb", "raynb.errors", "raynb.nccl", "raynb._shared", "raynb._remote", "raynb._agent", "raynb._client")
    assert [
        m for m in ast.literal_eval(p.stdout) if m not in ok and not m.startswith(tuple(f"{o}." for o in ok[2:]))
    ] == []


@pytest.mark.parametrize("layer", ["raynb._shared", "raynb._remote"])
def test_shared_and_cluster_code_import_only_their_own(layer: str) -> None:
    """``_shared/`` (pure, any process) imports nothing of raynb outside itself, ``_remote/`` (the cluster side) only
    ``_shared``, itself and ``nccl`` -- counting function-level and type-only imports; ``_shared`` also takes nothing
    but the standard library."""
    graph = _graph(type_checking=True)
    allowed = {layer, *MAY_IMPORT[layer]}
    outside = [f"{a} -> {b}" for a in graph if _layer(a) == layer for b in graph[a] if _layer(b) not in allowed]
    assert outside == []
    if layer != "raynb._shared":
        return
    third_party = []
    for p in sorted((PKG / "_shared").glob("*.py")):
        for n in ast.walk(ast.parse(p.read_text())):
            names = [a.name for a in n.names] if isinstance(n, ast.Import) else []
            if isinstance(n, ast.ImportFrom) and not n.level:
                names = [n.module or ""]
            third_party += [f"{p.name}: {m}" for m in names if m.split(".")[0] not in sys.stdlib_module_names]
    assert third_party == []


def test_no_transport_check_outside_the_seam() -> None:
    """How the kernel reaches the cluster (Ray Client, a driver, Ray Jobs) is ``_client``'s to know: kernel code asks
    the seam what it can do (``code_crosses``, ``streams_worker_output``), never which transport it is (``.via``), and
    imports no transport module. ``_cluster/connection.py`` chooses and installs the transport, and the agent is the
    server end of one (on the head, over the Ray handles): they alone may."""
    transports = {"raynb._client.over_jobs", "raynb._client.cluster_side", "raynb._client.agent_job"}
    graph = _graph(type_checking=True)
    found = []
    for path in sorted(PKG.rglob("*.py")):
        mod = _module_name(path)
        if mod.startswith(("raynb._client", "raynb._agent")) or mod == "raynb._cluster.connection":
            continue
        found += [f"{mod}: .via" for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Attribute)
                  and n.attr == "via"]  # fmt: skip
        found += [f"{mod} imports {t}" for t in sorted(graph.get(mod, set()) & transports)]
    assert found == []


MAX_FUNCTION_LINES = 80


def test_no_function_over_80_lines_of_body() -> None:
    """A function a reader takes in at once: its body (after the docstring) at most 80 lines."""
    long = []
    for path in sorted(PKG.rglob("*.py")):
        for n in ast.walk(ast.parse(path.read_text())):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                body = n.body[1:] if ast.get_docstring(n) is not None and len(n.body) > 1 else n.body
                lines = (body[-1].end_lineno or 0) - body[0].lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{_module_name(path)}.{n.name}: {lines}")
    assert long == []


#: the processes a module's docstring opens with (``In the kernel: ...``): where its code runs
PROCESSES = (
    "In the kernel",
    "On the head",
    "In each Train worker",
    "In the head's supervisor",
    "On each node",
    "On the cluster",
    "In any process",
)


def test_every_module_says_the_process_it_runs_in() -> None:
    """A newcomer reads where a module's code runs before what it does: each module docstring's first sentence, up to
    its colon, names one or more processes (``In the kernel and the head's supervisor: ...``)."""
    missing = []
    for path in sorted(PKG.rglob("*.py")):
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        where = doc.split(":", 1)[0] if ":" in doc else ""
        if not where.startswith(PROCESSES):
            missing.append(f"{_module_name(path)}: {doc[:60]!r}")
    assert missing == []
