"""The run's control bar (raynb/display/controls.py) as ipywidgets builds it: a background run's bar has Stop only, a
waiting cell's has Stop and Detach; Detach leaves Stop; Stop calls the run's stop. (JupyterLab clicking them on a
real run: tests/browser.)"""

from __future__ import annotations

import threading

from raynb.display.controls import RunControls


def _labels(c: RunControls) -> list[str]:
    return [b.description for b in c._box.children]


def test_a_background_run_has_stop_and_a_waiting_cell_also_detach() -> None:
    assert _labels(RunControls("bg", lambda: None, detachable=False).show()) == ["Stop"]
    stopped = threading.Event()
    c = RunControls("fg", stopped.set, detachable=True).show()
    assert _labels(c) == ["Stop", "Detach"] and [b._dom_classes for b in c._box.children] == [
        ("raynb-stop",),
        ("raynb-detach",),
    ]
    c._box.children[1].click()
    assert c.detach_requested.is_set()
    c.detached()
    assert _labels(c) == ["Stop"]
    c._box.children[0].click()
    assert stopped.wait(5)  # on a thread of its own: the click returns at once
    c.close()
