"""What a run's function imports, read in the kernel (``_runs/cell_imports.py``), and imported by the worker's process
while it waits (``_remote/ahead_imports.py``): the slow, device-free packages at once, the rest only once Ray has set
the process's devices and thread count for its actor. The real path -- a process started ahead, then its actor --
is tests/integration/test_cluster.py's."""

from __future__ import annotations

import os
import sys
import threading
import time
import types
from pathlib import Path

import pytest

from raynb._remote import ahead_imports
from raynb._runs.cell import compile_cell
from raynb._runs.cell_imports import imports_of
from raynb._shared.worker_env import PRELOAD_VAR, worker_env

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
    assert imports_of(fn, tmp_path) == (
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


@pytest.mark.parametrize(
    ("facts", "environ", "omp_at_start", "settled"),
    [
        ({"actor": None, "cpus": 2.0, "gpus": []}, {"OMP_NUM_THREADS": "2"}, None, False),  # no actor yet
        ({"actor": "a", "cpus": 2.0, "gpus": []}, {}, None, False),  # Ray has not set the thread count yet
        ({"actor": "a", "cpus": 2.0, "gpus": []}, {"OMP_NUM_THREADS": "2"}, None, True),
        ({"actor": "a", "cpus": 0.5, "gpus": []}, {"OMP_NUM_THREADS": "1"}, None, True),  # floor, at least 1
        ({"actor": "a", "cpus": None, "gpus": []}, {"OMP_NUM_THREADS": "1"}, None, True),  # an actor of no CPUs
        ({"actor": "a", "cpus": 8.0, "gpus": []}, {"OMP_NUM_THREADS": "4"}, "4", True),  # the user's, kept by Ray
        ({"actor": "a", "cpus": 2.0, "gpus": ["1"]}, {"OMP_NUM_THREADS": "2"}, None, False),  # devices not set
        ({"actor": "a", "cpus": 2.0, "gpus": ["1"]}, {"OMP_NUM_THREADS": "2", "CUDA_VISIBLE_DEVICES": "0,1"}, None, False),
        ({"actor": "a", "cpus": 2.0, "gpus": [1, 3]}, {"OMP_NUM_THREADS": "2", "CUDA_VISIBLE_DEVICES": "1,3"}, None, True),
        ({"actor": "a", "cpus": 2.0, "gpus": ["1"], "noset_cuda": True}, {"OMP_NUM_THREADS": "2"}, None, True),
        ({"actor": "a", "cpus": 2.0, "gpus": [], "override_on_zero": True}, {"OMP_NUM_THREADS": "2"}, None, False),
        (
            {"actor": "a", "cpus": 2.0, "gpus": [], "override_on_zero": True},
            {"OMP_NUM_THREADS": "2", "CUDA_VISIBLE_DEVICES": ""},
            None,
            True,
        ),
    ],
)  # fmt: skip
def test_the_rest_waits_until_ray_has_set_the_actors_devices_and_threads(
    facts: dict[str, object], environ: dict[str, str], omp_at_start: str | None, settled: bool
) -> None:
    assert ahead_imports.settled(facts, environ, omp_at_start) is settled


def test_early_packages_load_at_once_with_torchs_nvml_check_and_the_rest_once_the_actor_is_settled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Real imports from a real thread: modules that record, as they load, the process's state then."""
    seen: list[tuple[str, str | None]] = []
    monkeypatch.setattr(sys, "ahead_test_seen", seen, raising=False)
    for name in ("early_pkg", "late_mod"):
        (tmp_path / f"{name}.py").write_text(
            f"import os, sys\nsys.ahead_test_seen.append(({name!r}, os.environ.get('PYTORCH_NVML_BASED_CUDA_CHECK')))\n"
        )
    (tmp_path / "early_pkg2").mkdir()
    (tmp_path / "early_pkg2" / "__init__.py").write_text("")
    (tmp_path / "early_pkg2" / "sub.py").write_text(
        "import sys\nsys.ahead_test_seen.append(('early_pkg2.sub', None))\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("PYTORCH_NVML_BASED_CUDA_CHECK", raising=False)
    for name in ("early_pkg", "late_mod", "early_pkg2", "early_pkg2.sub"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    gate = threading.Event()
    names = ["early_pkg", "late_mod", "early_pkg2:sub", "no_such_module_here", "os"]
    thread = threading.Thread(
        target=ahead_imports._run,
        args=(names, None),
        kwargs={"facts": lambda: {"actor": "a" if gate.is_set() else None, "cpus": 1.0, "gpus": []},
                "early": frozenset({"early_pkg", "early_pkg2"})},
    )  # fmt: skip
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    thread.start()
    deadline = time.monotonic() + 10
    while len(seen) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.2)  # the thread polls every 20 ms: time for a wrong import of the late module to show
    assert seen == [("early_pkg", "1"), ("early_pkg2.sub", None)], seen  # torch's NVML check on while they load
    assert "late_mod" not in sys.modules and os.environ.get("PYTORCH_NVML_BASED_CUDA_CHECK") is None
    gate.set()
    thread.join(timeout=10)
    assert seen[-1] == ("late_mod", None)
    outcome = ahead_imports.report()["outcome"]
    assert outcome == {
        "early_pkg": "early",
        "late_mod": "late",
        "early_pkg2:sub": "early",
        "no_such_module_here": "failed",
        "os": "already",
    }
