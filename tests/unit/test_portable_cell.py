"""A cell as source and plain data (the Ray Jobs path, ``_shared/cell_code.py`` and ``_runs/cell.pack_portable``):
packed here, built again in a fresh Python that has none of this notebook -- its line numbers the cell's, its
notebook functions and classes by their source, its values by plain pickles; what cannot travel so is named."""

from __future__ import annotations

import linecache
import math
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from raynb._remote.trainer_plan import TrainerPlan
from raynb._runs.cell import compile_cell, pack_portable
from raynb._runs.trainer_config import plain_trainer, trainer_kwargs
from raynb._shared import wire
from raynb._shared.cell_code import MARK, is_packed
from raynb.errors import CaptureError, UsageError

ROOT = Path(__file__).resolve().parents[2]

#: what a fresh Python does with a packed cell: build it, run it, print the answer or the traceback's last frame
_ON_THE_CLUSTER = """
import sys, traceback
from raynb._shared.cell_code import build
fn = build(sys.stdin.buffer.read())
try:
    print("answer", fn({"x": 3}))
except Exception as e:
    last = traceback.extract_tb(e.__traceback__)[-1]
    print("raised", type(e).__name__, last.filename, last.lineno, last.line)
"""


def _elsewhere(payload: bytes) -> str:
    out = subprocess.run(
        [sys.executable, "-c", _ON_THE_CLUSTER],
        input=payload,
        capture_output=True,
        cwd="/",
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        timeout=60,
        check=True,
    )
    return out.stdout.decode().strip()


def _notebook(*cells: str) -> dict[str, Any]:
    """A notebook's namespace after running ``cells``, each registered in linecache as IPython does (so their
    functions' source can be read)."""
    ns: dict[str, Any] = {"__name__": "__main__"}
    for i, cell in enumerate(cells):
        filename = f"/tmp/ipykernel_1/{i}.py"
        linecache.cache[filename] = (len(cell), None, cell.splitlines(True), filename)
        exec(compile(cell, filename, "exec"), ns)
    return ns


def test_a_cell_travels_as_source_with_its_modules_functions_classes_and_values() -> None:
    ns = _notebook(
        "import math as m\nSCALE = 2.5\nSHAPE = (3, 4)\n",
        "class Scaler:\n    def __init__(self, k):\n        self.k = k\n",
        "def helper(v):\n    return Scaler(SCALE).k * v\n",
    )
    fn = compile_cell("y = helper(config['x'])\nreturn round(m.sqrt(y * y), 3), SHAPE", ns, filename="<cell-3>")
    payload = pack_portable(fn)
    assert is_packed(payload) and payload.startswith(MARK)
    assert _elsewhere(payload) == "answer (7.5, (3, 4))"


def test_a_kernels_stand_in_for_a_builtin_and_its_module_names_stay_behind() -> None:
    """A Jupyter kernel's namespace holds IPython's own ``open`` (not picklable: "not the same object as io.open")
    and ``__name__`` (``"__main__"``, which a class body reads): a cell uses the other side's."""
    from IPython.core.interactiveshell import _modified_open

    ns = _notebook("PATH = '/dev/null'\n")
    ns["open"] = _modified_open  # as ipykernel's namespace has it
    cell = "class Empty:\n    pass\nwith open(PATH) as f:\n    return f.read() + str(len(config)) + Empty.__name__"
    fn = compile_cell(cell, ns, filename="<cell-4>")  # a class body reads the module's `__name__`: theirs
    assert _elsewhere(pack_portable(fn)) == "answer 1Empty"


def test_a_failing_cell_keeps_its_own_line_numbers_on_the_other_side() -> None:
    fn = compile_cell("a = 1\nb = 2\nraise ValueError('boom')\n", {"__name__": "__main__"}, filename="<cell-7>")
    assert _elsewhere(pack_portable(fn)) == "raised ValueError <cell-7> 4"  # the kernel has the cell's text


def _module_helper(v: float) -> float:
    return math.floor(v * 10)


def train_fn(config: dict[str, Any]) -> float:
    return _module_helper(config["x"] / 7)


def test_a_function_given_to_train_travels_as_its_def_with_what_it_reads() -> None:
    """``raynb.train(fn)`` with a function of a module the cluster does not have (this test module)."""
    assert _elsewhere(pack_portable(train_fn)) == "answer 4"


def test_what_cannot_travel_as_source_or_plain_data_is_named() -> None:
    ns = _notebook("import threading\nclass Box:\n    pass\nBOX = Box()\n")
    ns["LOCK"] = threading.Lock()
    fn = compile_cell("return BOX, LOCK", ns)
    with pytest.raises(CaptureError) as e:
        pack_portable(fn)
    assert "`BOX` (an object of a class defined in the notebook)" in str(e.value)
    assert "`LOCK` (_thread.lock" in str(e.value)

    def closure() -> None:
        return None

    def outer() -> Any:
        x = 1

        def inner(config: dict[str, Any]) -> int:
            return x

        return inner

    with pytest.raises(CaptureError, match="reads variables of the function it was defined in"):
        pack_portable(outer())


def test_a_cell_too_heavy_for_the_path_is_refused_with_its_size_and_the_way_round() -> None:
    ns = _notebook("SMALL = b'x' * 1000\nBIG = b'y' * 300_000\n")
    fn = compile_cell("return len(SMALL) + len(BIG)", ns)
    assert len(pack_portable(fn)) > 300_000  # under the path's own limit
    with pytest.raises(CaptureError) as e:
        pack_portable(fn, limit=200_000)
    assert "0.3 MB of notebook data" in e.value.what and "`BIG` 0.3 MB" in (e.value.saw or "")
    assert "the cluster's storage" in (e.value.fix or "")


def test_the_trainer_travels_as_data_and_ray_objects_are_refused_naming_them() -> None:
    plain = plain_trainer(
        name="r1", workers=2, gpu=True, cpus_per_worker=3.0, worker_env={"A": "1"}, storage_path=None, max_failures=1
    )
    made = TrainerPlan.from_wire(wire.loads(wire.dumps(plain))["plain"]).ray_kwargs()
    sc, rc = made["scaling_config"], made["run_config"]
    assert (sc.num_workers, sc.use_gpu, sc.resources_per_worker) == (2, True, {"CPU": 3.0, "GPU": 1})
    assert (rc.name, rc.failure_config.max_failures, rc.worker_runtime_env) == ("r1", 1, {"env_vars": {"A": "1"}})
    # one description: the objects the kernel makes where Ray's objects cross are the launcher's, field for field
    here = trainer_kwargs(
        name="r1", workers=2, gpu=True, cpus_per_worker=3.0, worker_env={"A": "1"}, storage_path=None, max_failures=1
    )
    assert here["scaling_config"] == sc and here["run_config"] == rc
    # an earlier raynb's description (resources_per_worker, no cpus_per_worker) still reads
    old = {"name": "r", "workers": 1, "gpu": False, "resources_per_worker": {"CPU": 2.0}, "storage_path": None,
           "max_failures": 0, "log_level": "WARNING", "worker_env": {}}  # fmt: skip
    assert TrainerPlan.from_wire(old).cpus_per_worker == 2.0
    with pytest.raises(UsageError, match=r"Ray Train objects \(run_config, scaling_config\) cannot travel"):
        plain_trainer(
            name="r", workers=1, gpu=False, cpus_per_worker=1, worker_env={}, storage_path=None, max_failures=0,
            scaling_config=object(), run_config=object(), datasets=None,
        )  # fmt: skip


def test_the_wire_carries_bytes_and_nests() -> None:
    doc = {"pic": b"\x00\x80pickle", "events": [{"rank": 1, "t": (1, 2)}], "n": None, "f": 1.5}
    assert wire.loads(wire.dumps(doc)) == {**doc, "events": [{"rank": 1, "t": [1, 2]}]}
    assert wire.loads(wire.dumps({"x": threading})) == {"x": repr(threading)}
