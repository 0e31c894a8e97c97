"""In the kernel: the control bar beside a running run's live view, where the front-end renders ipywidgets: Stop, and
for a cell that waits on its run, Detach (the cell returns; the run goes on in the background, its view still
updating).

The bar lives in an output of its own, replaced by an empty one when the run ends: the saved notebook keeps the
static picture and no widget state. Where widgets are not rendered (nbviewer, GitHub, a terminal) the output reads
as one line of text and nothing else changes.

A click reaches the kernel while a cell runs only on a subshell (JEP 91): JupyterLab >= 4.4 and Notebook >= 7.4
send comm messages on one (their default, "Kernel comms over subshells"), and ipykernel >= 7 runs them there. The
kernel would route the click of a widget made by a running cell back to that cell's shell, behind it; the bar's
widgets keep the front-end's choice instead. Elsewhere the click waits for the cell: the interrupt stops a waiting
run, and ``--background`` returns at once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

__all__ = ["RunControls"]


class RunControls:
    def __init__(self, run_name: str, on_stop: Callable[[], None], *, detachable: bool = False) -> None:
        self.run_name, self.on_stop = run_name, on_stop
        #: set when the user clicked Detach (the waiting cell polls it)
        self.detach_requested = threading.Event()
        self._detachable = detachable
        self._box: Any = None
        self._stop_button: Any = None
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
        buttons = [stop]
        if self._detachable:
            detach = w.Button(
                description="Detach",
                icon="external-link",
                tooltip="the cell returns; the run goes on in the background (run.wait() waits for it)",
            )
            detach.add_class("raynb-detach")
            detach.on_click(lambda _b: self._detach(detach))
            buttons.append(detach)
        self._stop_button = stop
        self._box = w.HBox(buttons)
        self._box.add_class("raynb-controls")
        for widget in (self._box, *buttons):
            _clicks_on_frontends_subshell(widget)
        self._handle = display(self._box, display_id=True)
        return self

    def _stop(self, button: Any) -> None:
        button.disabled, button.description = True, "Stopping ..."
        threading.Thread(target=self.on_stop, name="raynb-stop", daemon=True).start()

    def _detach(self, button: Any) -> None:
        button.disabled, button.description = True, "Detaching ..."
        self.detach_requested.set()

    def detached(self) -> None:
        """The cell returned: only Stop stays."""
        if self._box is not None and self._stop_button is not None:
            for b in self._box.children:
                if b is not self._stop_button:
                    b.close()
            self._box.children = (self._stop_button,)

    def close(self) -> None:
        """The run ended: take the bar away, leaving an empty output."""
        if self._handle is not None:
            self._handle.update({"text/plain": ""}, raw=True)
        if self._box is not None:
            for b in self._box.children:
                b.close()
            self._box.close()


def _clicks_on_frontends_subshell(widget: Any) -> None:
    """ipykernel 7 routes a comm's incoming messages to the shell that last published on it (the running cell's),
    overriding the subshell the front-end chose; keep the front-end's choice, so a click runs while the cell waits."""
    comm = getattr(widget, "comm", None)
    if comm is not None and hasattr(comm, "_reply_subshell_for"):
        comm._reply_subshell_for = lambda _data, default: default
