"""In the kernel: run a notebook headless in a real Jupyter kernel and summarise what its raynb cells did.

``python -m raynb.notebook run notebooks/quickstart.ipynb -o out/quickstart.ipynb -p STEPS=50``

Parameters are injected papermill-style: a cell tagged ``injected-parameters`` goes right after the cell tagged
``parameters``. Cells tagged ``raises-exception`` may fail; any other error stops the run (exit status 1).
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import os
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["execute", "Summary", "main"]

_RUN_ATTRS = re.compile(
    r'class="raynb-run" data-run="([^"]*)" data-status="([^"]*)" data-phase="[^"]*" '
    r'data-step="(\d+)" data-records="(\d+)"'
)


@dataclass
class Summary:
    notebook: str
    output: str
    seconds: float
    size_bytes: int
    runs: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def text(self) -> str:
        lines = [
            f"executed {self.notebook} in {self.seconds:.0f} s -> {self.output} ({self.size_bytes / 1024:.0f} KiB)"
        ]
        for r in self.runs:
            lines.append(f"  run {r['name']}: {r['status']} at step {r['step']} ({r['records']} reports)")
        for e in self.errors:
            lines.append(f"  expected error: {e}")
        lines.append(open_hint(self.output))
        return "\n".join(lines)


def open_hint(output: str) -> str:
    """How to open the executed notebook: JupyterLab where this Python has it, else what to install first."""
    jupyter = os.path.relpath(Path(sys.executable).with_name("jupyter"))
    try:
        has_lab = importlib.util.find_spec("jupyterlab") is not None
    except (ImportError, ValueError):
        has_lab = False
    if has_lab:
        return f"open it in JupyterLab: {jupyter} lab {output}"
    pip = os.path.relpath(Path(sys.executable)) + " -m pip install jupyterlab"
    return f"to open it, install JupyterLab into this Python ({pip}), then: {jupyter} lab {output}"


def _literal(value: str) -> Any:
    try:
        return ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return value


def inject_parameters(nb: Any, parameters: dict[str, Any]) -> None:
    import nbformat

    if not parameters:
        return
    src = "# Parameters injected by raynb.notebook\n" + "\n".join(f"{k} = {v!r}" for k, v in parameters.items())
    cell = nbformat.v4.new_code_cell(src, metadata={"tags": ["injected-parameters"]})
    idx = next((i for i, c in enumerate(nb.cells) if "parameters" in c.get("metadata", {}).get("tags", [])), -1)
    nb.cells.insert(idx + 1, cell)


def summarise(nb: Any) -> tuple[list[dict[str, Any]], list[str]]:
    runs, errors = [], []
    for c in nb.cells:
        for o in c.get("outputs", []):
            html = o.get("data", {}).get("text/html", "")
            for m in _RUN_ATTRS.finditer(html if isinstance(html, str) else "".join(html)):
                runs.append({"name": m[1], "status": m[2], "step": int(m[3]), "records": int(m[4])})
            if o.get("output_type") == "error":
                errors.append(f"{o.get('ename')}: {o.get('evalue', '').splitlines()[0] if o.get('evalue') else ''}")
    return runs, errors


def execute(
    path: str | Path,
    output: str | Path,
    parameters: dict[str, Any] | None = None,
    *,
    timeout: int = 1200,
    kernel: str = "python3",
    cwd: str | Path | None = None,
) -> Summary:
    """Execute ``path`` in a fresh kernel, write the executed notebook to ``output``, return a summary."""
    import nbformat
    from nbclient import NotebookClient

    path, output = Path(path), Path(output)
    nb = nbformat.read(path, as_version=4)
    inject_parameters(nb, parameters or {})
    t0 = time.monotonic()
    client = NotebookClient(
        nb, timeout=timeout, kernel_name=kernel, resources={"metadata": {"path": str(cwd or path.parent)}}
    )
    try:
        client.execute()
    finally:
        output.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, output)
    runs, errors = summarise(nb)
    return Summary(str(path), str(output), time.monotonic() - t0, output.stat().st_size, runs, errors)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m raynb.notebook", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    run = sub.add_parser("run", help="execute a notebook headless")
    run.add_argument("notebook")
    run.add_argument("-o", "--output", help="where to write the executed notebook (default: out/<name>)")
    run.add_argument("-p", "--parameter", action="append", default=[], metavar="KEY=VALUE")
    run.add_argument("--timeout", type=int, default=1200, help="seconds per cell")
    args = ap.parse_args(argv)
    params = {}
    for item in args.parameter:
        k, sep, v = item.partition("=")
        if not sep:
            ap.error(f"-p takes KEY=VALUE, not {item!r}")
        params[k] = _literal(v)
    out = args.output or str(Path("out") / Path(args.notebook).name)
    from nbclient.exceptions import CellExecutionError

    try:
        summary = execute(args.notebook, out, params, timeout=args.timeout)
    except CellExecutionError as e:
        print(f"the notebook failed; the executed copy is in {out}\n{str(e)[-3000:]}", file=sys.stderr)
        return 1
    print(summary.text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
