"""Run a notebook's code cells top to bottom in one in-process IPython shell (magics included), with papermill-style
parameters: for machines that have IPython but no Jupyter (the lent GPU machines). Prints each cell's output and a JSON
summary line; exit status 1 if a cell raised.

    python bench/notebook_inprocess.py notebooks/qwen25_finetune_eks.ipynb -p CLUSTER='"local"' -p GPU=True ...
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("notebook")
    ap.add_argument("-p", action="append", default=[], metavar="NAME=PYTHON_EXPR")
    args = ap.parse_args()
    from IPython.core.interactiveshell import InteractiveShell

    nb = json.loads(Path(args.notebook).read_text())
    os.chdir(Path(args.notebook).resolve().parent)
    shell = InteractiveShell.instance()
    params = "\n".join(args.p)
    summary: list[dict] = []
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "code":
            continue
        src = "".join(cell["source"])
        tags = cell.get("metadata", {}).get("tags", [])
        print(f"\n===== cell {i} {tags} =====\n{src[:300]}\n----- output -----", flush=True)
        t0 = time.monotonic()
        res = shell.run_cell(src, store_history=True)
        if "parameters" in tags and params:
            res = shell.run_cell(params)  # injected parameters, as papermill does
        ok = res.success
        summary.append({"cell": i, "ok": ok, "seconds": round(time.monotonic() - t0, 1)})
        sys.stdout.flush()
        if not ok:
            print(f"cell {i} failed: {res.error_in_exec or res.error_before_exec!r}")
            break
    print(json.dumps({"notebook": args.notebook, "cells": summary}))
    return 0 if all(c["ok"] for c in summary) else 1


if __name__ == "__main__":
    sys.exit(main())
