"""What a run's function imports, read in the kernel (``_runs/cell_imports.py``), and the slow, device-free
packages of it imported by the worker's process while it waits (``_remote/ahead_imports.py``). The real path -- a
process started ahead, then its actor -- is tests/integration/test_cluster.py's."""

from __future__ import annotations

import os
import sys
import threading
import types
from pathlib import Path

import pytest

from raynb._remote import ahead_imports
from raynb._runs.cell import compile_cell
from raynb._runs.cell_imports import imports_of
from raynb._shared.worker_env import PRELOAD_VAR, ahead, worker_env

CELL = """
import os, json, torch, raynb, ray.train
import numpy as np
from transformers import Qwen2Config, Qwen2ForCausalLM
import nb_local
import safetensors.numpy as stn
from nb_pkg.sub import thing
build_model()
df = pd.DataFrame()
fig = Figure()
"""


def test_a_cells_imports_are_read_from_its_code_with_those_of_the_notebook_and_its_helpers(tmp_path: Path) -> None:
    """A %%raytrain cell: its own imports, the modules its globals come from (a module, a class), a notebook
    function it calls (read in turn) -- and not the standard library, raynb, Ray, torch itself, or the notebook
    folder's own modules (the worker's path finds those only as the function starts)."""
    (tmp_path / "nb_local.py").write_text("")
    (tmp_path / "nb_pkg").mkdir()
    figure = type("Figure", (), {"__module__": "plotly.graph_objects"})
    ns: dict[str, object] = {"__name__": "__main__", "pd": types.ModuleType("pandas"), "Figure": figure}
    exec(  # a function defined in the notebook, as its own cell would
        "def build_model():\n    from peft import LoraConfig\n    import yaml\n    return [x for x in [helper2()]]\n"
        "def helper2():\n    import safetensors.torch\n",
        ns,
    )
    fn = compile_cell(CELL, ns)
    names = imports_of(fn, tmp_path)
    assert names == (
        "numpy",
        "transformers",
        "transformers:Qwen2Config",
        "transformers:Qwen2ForCausalLM",
        "safetensors.numpy",
        "peft",
        "peft:LoraConfig",
        "yaml",
        "safetensors.torch",
        "pandas",
        "plotly.graph_objects",
    )
    # what the workers import while they wait: transformers and its kin, nothing else (not numpy, pandas, yaml)
    assert ahead(names) == (
        "transformers",
        "transformers:Qwen2Config",
        "transformers:Qwen2ForCausalLM",
        "safetensors.numpy",
        "peft",
        "peft:LoraConfig",
        "safetensors.torch",
    )
    # without the notebook's folder, its modules are names like any other
    assert {"nb_local", "nb_pkg.sub", "nb_pkg.sub:thing"} <= set(imports_of(fn))


def test_relative_imports_and_things_without_code_are_left_out() -> None:
    ns: dict[str, object] = {"__name__": "pkg.mod", "__package__": "pkg"}
    exec("def f():\n    from . import sibling\n    from .other import x\n    import tokenizers\n", ns)
    assert imports_of(ns["f"]) == ("tokenizers",)  # type: ignore[arg-type]
    assert imports_of(print) == () and imports_of(len) == ()

    class Hostile:  # a global whose every attribute raises: what was found before it is kept, the run goes on
        def __getattribute__(self, name: str) -> object:
            raise RuntimeError(name)

    ns = {"__name__": "__main__", "h": Hostile()}
    exec("def g():\n    import pandas\n    return h\n", ns)
    assert imports_of(ns["g"]) == ("pandas",)  # type: ignore[arg-type]


def test_the_names_reach_every_worker_env_and_a_rerun_gets_the_same() -> None:
    env = worker_env("summary", "r", preload=("numpy", "transformers:Qwen2Config"))
    assert env[PRELOAD_VAR] == "numpy,transformers:Qwen2Config"
    assert PRELOAD_VAR not in worker_env("summary", "r")  # nothing to import: the env of runs before this change


def test_the_packages_load_with_torchs_nvml_check_and_each_says_what_came_of_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Real imports from the real thread, of modules that record the process's state as they load."""
    seen: list[tuple[str, str | None]] = []
    monkeypatch.setattr(sys, "ahead_test_seen", seen, raising=False)
    (tmp_path / "ahead_pkg").mkdir()
    (tmp_path / "ahead_pkg" / "__init__.py").write_text(
        "import os, sys\nsys.ahead_test_seen.append(('ahead_pkg', os.environ.get('PYTORCH_NVML_BASED_CUDA_CHECK')))\n"
    )
    (tmp_path / "ahead_pkg" / "sub.py").write_text("import sys\nsys.ahead_test_seen.append(('ahead_pkg.sub', None))\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("PYTORCH_NVML_BASED_CUDA_CHECK", raising=False)
    for name in ("ahead_pkg", "ahead_pkg.sub"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    thread = threading.Thread(
        target=ahead_imports._run, args=(["ahead_pkg", "ahead_pkg:sub", "no_such_module_here", "os"],)
    )
    thread.start()
    thread.join(timeout=30)
    assert seen == [("ahead_pkg", "1"), ("ahead_pkg.sub", None)]  # torch's NVML check on while they load ...
    assert os.environ.get("PYTORCH_NVML_BASED_CUDA_CHECK") is None  # ... and off after
    assert ahead_imports.report()["outcome"] == {
        "ahead_pkg": "ahead",
        "ahead_pkg:sub": "ahead",
        "no_such_module_here": "failed",
        "os": "already",
    }
    # the hook's entry point takes only the packages of AHEAD, whatever the variable holds
    assert ahead_imports.start("os,json,numpy,plotly.io") is None
    started = ahead_imports.start("safetensors,os")
    assert started is not None
    started.join(timeout=30)
    assert set(ahead_imports.report()["outcome"]) == {"safetensors"} and "safetensors" in sys.modules
