"""A Stop button beside a background (or attached) run's live view, where the front-end renders ipywidgets.

The button lives in an output of its own, replaced by an empty one when the run ends: the saved notebook keeps the
static picture and no widget state. Where widgets are not rendered (nbviewer, GitHub, a terminal) the output reads
as one line of text and nothing else changes. A blocking cell has no button: the kernel handles a widget's click only
between cells, and the notebook's own stop button interrupts (and stops) a blocking run.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

__all__ = ["RunControls"]


class RunControls:
    def __init__(self, run_name: str, on_stop: Callable[[], None]) -> None:
        self.run_name, self.on_stop = run_name, on_stop
        self._box: Any = None
        self._handle: Any = None

    def show(self) -> RunControls:
        try:
            import ipywidgets as w  # type: ignore[import-untyped]
            from IPython.display import display
        except ImportError:
            return self
        stop = w.Button(description="Stop", button_style="danger", icon="stop", tooltip=f"stop {self.run_name}")
        stop.add_class("raynb-stop")
        stop.on_click(lambda _b: self._stop(stop))
        self._box = w.HBox([stop])
        self._box.add_class("raynb-controls")
        self._handle = display(self._box, display_id=True)
        return self

    def _stop(self, button: Any) -> None:
        button.disabled, button.description = True, "Stopping ..."
        threading.Thread(target=self.on_stop, name="raynb-stop", daemon=True).start()

    def close(self) -> None:
        """The run ended: take the button away, leaving an empty output."""
        if self._handle is not None:
            self._handle.update({"text/plain": ""}, raw=True)
        if self._box is not None:
            self._box.close()
