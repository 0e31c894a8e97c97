"""A failing rank's error as the notebook shows it, from a real exception raised in a compiled cell (the path a
worker takes: raynb/_remote/worker.py records the frames, raynb/_runs/run_error.py assembles one error for the run)."""

from __future__ import annotations

import pytest

from raynb._magic_args import parse_train_line
from raynb._remote.worker import error_event
from raynb._runs.cell import compile_cell
from raynb._runs.run_error import assemble_error
from raynb._shared.outcome import Outcome, RunStatus
from raynb.errors import UndefinedNameError

LINE = "%%raytrain --workers 2\n"  # the magic hands the whole cell, its first line included
CELL = (
    "import ray.train\n"  # cell line 2 (line 1 is the %%raytrain line)
    "rank = config['rank']\n"  # line 3
    "if rank == 1:\n"  # line 4
    "    raise ValueError(f'bad shard on rank {rank}')\n"  # line 5
)


def _worker_error(rank: int, cell: str = CELL, filename: str = "<raytrain-cell-3>", check_names: bool = True) -> dict:
    """What a worker sends when the cell raises (raynb/_remote/worker.py's event), from the real traceback."""
    fn = compile_cell(cell, {"__name__": "__main__"}, filename=filename, check_names=check_names)
    try:
        fn({"rank": rank})
    except (ValueError, RuntimeError, NameError) as e:
        return error_event(rank, e)
    raise AssertionError("the cell did not raise")


def test_one_failing_rank_is_one_error_with_the_cells_own_lines() -> None:
    event = _worker_error(1)
    outcome = Outcome(RunStatus.FAILED, failures={1: "WorkerGroupError: Training failed due to worker errors"})
    err = assemble_error(outcome, [event], 2, cell_file="<raytrain-cell-3>", cell_source=LINE + CELL)
    text = str(err)
    assert text.startswith("Rank 1 of 2 failed with ValueError: bad shard on rank 1"), text
    assert "cell line 5, in train_loop_per_worker" in text
    assert "raise ValueError(f'bad shard on rank {rank}')" in text
    assert "_worker.py" not in text  # raynb's wrapper is not the user's business
    assert err.ranks == [1] and err.type == "ValueError"


def test_both_ranks_failing_say_all_workers_and_show_the_lowest() -> None:
    cell = "raise RuntimeError(f\"rank {config['rank']} out of memory\")\n"
    events = [_worker_error(r, cell) for r in (1, 0)]
    err = assemble_error(Outcome(RunStatus.FAILED), events, 2, cell_file="<raytrain-cell-3>", cell_source=LINE + cell)
    assert str(err).startswith("All 2 workers failed with RuntimeError: rank 0 out of memory")
    assert "Traceback (rank 0, most recent call last):" in str(err) and err.ranks == [0, 1]


def test_no_name_check_leaves_an_undefined_name_to_the_workers() -> None:
    cell = "import ray.train\nprint(undefined_thing)\n"
    args, _ = parse_train_line("--workers 2 --no-name-check")
    assert args.no_name_check and not parse_train_line("--workers 2")[0].no_name_check
    with pytest.raises(UndefinedNameError) as ei:
        compile_cell(cell, {"__name__": "__main__"})
    assert "`undefined_thing` (line 3)" in ei.value.message
    event = _worker_error(1, cell, check_names=False)  # what --no-name-check compiles: the workers decide
    err = assemble_error(Outcome(RunStatus.FAILED), [event], 2, cell_file="<raytrain-cell-3>", cell_source=LINE + cell)
    assert str(err).startswith("Rank 1 of 2 failed with NameError") and "cell line 3" in str(err), str(err)
