"""cell.py: the cell becomes a function whose line numbers are the cell's own; capture problems are named."""

from __future__ import annotations

import sys
import threading
import traceback
import types
from pathlib import Path

import pytest
from ray import cloudpickle

from raynb._runs.cell import compile_cell, modules_beside, serialize
from raynb.errors import CaptureError, CellSyntaxError


def test_body_runs_with_config_and_notebook_globals() -> None:
    ns = {"__name__": "__main__", "SCALE": 3}
    fn = compile_cell("out = config['x'] * SCALE\nreturn out", ns)
    assert fn.__name__ == "train_loop_per_worker"
    assert fn({"x": 2}) == 6
    assert fn.__globals__ is ns


def test_traceback_line_numbers_match_the_cell() -> None:
    # line 1 is the %%raytrain line, so the body's third line is cell line 4
    fn = compile_cell("a = 1\nb = 2\nraise ValueError('boom')\n", {"__name__": "__main__"}, filename="<cell-7>")
    with pytest.raises(ValueError) as ei:
        fn({})
    frames = [f for f in traceback.extract_tb(ei.value.__traceback__) if f.filename == "<cell-7>"]
    assert [(f.lineno, f.name) for f in frames] == [(4, "train_loop_per_worker")]


def test_syntax_error_points_at_the_cell_line() -> None:
    with pytest.raises(CellSyntaxError) as ei:
        compile_cell("x = 1\ny = (2 +\n", {})
    assert "line 3" in ei.value.what  # body line 2 == cell line 3
    assert "y = (2 +" in ei.value.message


def test_compile_time_error_is_also_a_cell_syntax_error() -> None:
    with pytest.raises(CellSyntaxError) as ei:
        compile_cell("x = 1\nnonlocal y\n", {})
    assert "line 3" in ei.value.what


def test_yield_is_refused() -> None:
    with pytest.raises(CellSyntaxError, match="yield"):
        compile_cell("yield 1", {})


def test_serialize_names_the_unpicklable_global() -> None:
    ns = {"__name__": "__main__", "lock": threading.Lock(), "ok": [1, 2]}
    fn = compile_cell("with lock:\n    return ok", ns)
    with pytest.raises(CaptureError) as ei:
        serialize(fn)
    msg = ei.value.message
    assert "`lock`" in msg and "_thread.lock" in msg and "`ok`" not in msg
    assert "--config" in msg  # says what to do


def test_serialize_round_trips_a_plain_cell() -> None:
    ns = {"__name__": "__main__", "K": 5}
    fn = compile_cell("return config['v'] + K", ns)
    assert cloudpickle.loads(serialize(fn))({"v": 1}) == 6


def test_modules_beside_finds_a_local_module_and_skips_installed(tmp_path: Path) -> None:
    (tmp_path / "mylocalhelpers.py").write_text("def f():\n    return 41\n")
    sys.path.insert(0, str(tmp_path))
    try:
        import mylocalhelpers  # type: ignore[import-not-found]

        found = modules_beside(tmp_path, [mylocalhelpers, types, pytest])
        assert [m.__name__ for m in found] == ["mylocalhelpers"]
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("mylocalhelpers", None)


def test_modules_beside_ignores_pseudo_files(tmp_path: Path) -> None:
    fake = types.ModuleType("generated_thing")
    fake.__file__ = "<string>"
    assert modules_beside(tmp_path, [fake]) == []


def test_a_warm_rank_has_raynb_as_the_notebook_does() -> None:
    """A function a warm cell defines calls ``raynb.report`` without that cell importing raynb (found on an H200:
    NameError on every rank, while the same body ran in a cold cell)."""
    from raynb._remote.warm_worker import rank_namespace, run_cell

    ns = rank_namespace()
    cell = {"kind": "cell", "source": "def f():\n    return raynb.report\nf()", "filename": "<w>", "first_line": 2}
    import raynb

    out = run_cell({**cell, "globals": {}}, ns, set(), 0)
    assert cloudpickle.loads(out["value"]) is raynb.report


def test_a_warm_cells_answers_come_back_as_soon_as_every_rank_has_given_one() -> None:
    """The mailbox the kernel asks: every rank's answer already there is returned at once (an unconditional wait
    used to cost a quarter second), a missing one waits for the next answer; and a rank's own watcher returns as
    soon as any rank's answer arrives, which is why a rank posts its answer without waiting for its watcher (that
    wait made every warm cell a second slower)."""
    import threading
    import time

    from raynb._remote.warm_worker import WarmMailbox

    box = WarmMailbox(workers=2, idle_s=60)
    cell = box.put({"kind": "cell"})
    watcher = threading.Thread(target=box.interrupted, args=(cell, 30.0))
    watcher.start()
    box.done(cell, 0, {"seconds": 0.0})
    watcher.join(5)
    assert not watcher.is_alive(), "a watcher waits only until an answer arrives"
    t0 = time.perf_counter()
    assert list(box.results(cell, 0.5)) == [0] and time.perf_counter() - t0 >= 0.4  # one missing: it waits
    threading.Timer(0.1, box.done, args=(cell, 1, {"seconds": 0.0})).start()
    assert len(box.results(cell, 30.0)) == 2  # the next answer ends the wait
    t0 = time.perf_counter()
    assert len(box.results(cell, 30.0)) == 2 and time.perf_counter() - t0 < 0.1  # all there: at once


def test_packages_pip_installed_under_the_notebooks_folder_are_not_shipped(tmp_path: Path) -> None:
    """``pip install --target libs`` beside the notebook: what it installed has a dist-info, so it is imported on the
    workers as installed code, never pickled by value (found: Ray itself shipped by value, then "excessively deep
    recursion"). A plain module beside it still travels. And the venv under the notebook's folder (as here:
    .venv in the project) is installed too."""
    libs = tmp_path / "libs"
    (libs / "vendoredpkg").mkdir(parents=True)
    (libs / "vendoredpkg" / "__init__.py").write_text("X = 1\n")
    info = libs / "vendoredpkg-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: vendoredpkg\nVersion: 1.0\n")
    (info / "RECORD").write_text("vendoredpkg/__init__.py,,\nvendoredpkg-1.0.dist-info/METADATA,,\n")
    (info / "top_level.txt").write_text("vendoredpkg\n")
    (tmp_path / "nbhelper.py").write_text("Y = 2\n")
    sys.path[:0] = [str(libs), str(tmp_path)]
    try:
        import nbhelper  # type: ignore[import-not-found]
        import vendoredpkg  # type: ignore[import-not-found]

        assert [m.__name__ for m in modules_beside(tmp_path, [vendoredpkg, nbhelper, pytest])] == ["nbhelper"]
        here = Path(pytest.__file__).parents[3]  # a folder holding the venv that has pytest installed
        assert modules_beside(here, [pytest]) == []
    finally:
        del sys.path[:2]
        sys.modules.pop("nbhelper", None)
        sys.modules.pop("vendoredpkg", None)


def test_the_biggest_globals_a_cell_takes_along_are_named_biggest_first() -> None:
    from raynb._runs.cell import large_payload_note, largest_globals

    ns = {"__name__": "__main__", "table": b"x" * 3_000_000, "labels": list(range(1000)), "np": types}
    fn = compile_cell("n = len(table) + len(labels)\nnp.SimpleNamespace()", ns)
    sizes = largest_globals(fn, cloudpickle, n=2)
    assert [name for name, _ in sizes] == ["table", "labels"] and sizes[0][1] > 3_000_000  # modules travel by name
    note = large_payload_note(len(serialize(fn)), sizes)
    assert note.startswith("this cell takes 3 MB of notebook globals to the cluster (`table` 3 MB, `labels` 0 MB)")
    assert "--datasets" in note
