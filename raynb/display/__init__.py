"""In the kernel: how a run shows itself: live HTML in notebooks, a text line in terminals, a static picture when it is
over.

Live updates replace one display output in place (``display_id``); there is no ``clear_output`` and no widget
state, so nothing flickers and a saved notebook keeps only the final picture (a few kilobytes).
"""

from __future__ import annotations

import sys
import threading
import time
from typing import TYPE_CHECKING, Any

from .run_view import aggregate_of, run_html, run_text

if TYPE_CHECKING:
    from .viewed_run import ViewedRun

__all__ = ["LiveView", "render_bundle", "frontend", "end_progress_line"]


def frontend() -> str:
    """``"html"`` in a Jupyter kernel, ``"text"`` in terminal IPython or plain Python."""
    try:
        from IPython import get_ipython
    except ImportError:
        return "text"
    ip = get_ipython()
    if ip is None:
        return "text"
    return "html" if type(ip).__name__ == "ZMQInteractiveShell" or "ipykernel" in type(ip).__module__ else "text"


def _nccl_html(run: ViewedRun) -> str:
    try:
        from .nccl_badges import badges_html
    except ImportError:  # pragma: no cover
        return ""
    return badges_html(run)


def render_bundle(run: ViewedRun, *, show_error: bool = True) -> dict[str, str]:
    text = run_text(run) if show_error else run_text(run).splitlines()[0]
    return {"text/plain": text, "text/html": run_html(run, nccl_html=_nccl_html(run), show_error=show_error)}


class _Bundle:
    def __init__(self, run: ViewedRun, show_error: bool = True) -> None:
        self.run, self.show_error = run, show_error

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        return render_bundle(self.run, show_error=self.show_error)


_open_line: LiveView | None = None  # the terminal progress line not yet ended with a newline
_line_lock = threading.Lock()


def end_progress_line() -> None:
    """End a terminal's progress line before other output (a worker's print) lands on it."""
    global _open_line
    with _line_lock:
        view, _open_line = _open_line, None
        if view is not None:
            view.stream.write("\n")
            view.stream.flush()
            view._last_text_len = 0


class LiveView:
    """Draws a run while it goes: at most ``hz`` redraws a second, and only when something changed."""

    def __init__(self, run: Any, *, mode: str | None = None, hz: float = 4.0, stream: Any = None) -> None:
        self.run, self.mode, self.hz = run, mode or frontend(), hz
        self.stream = stream or sys.stdout
        self._handle: Any = None
        self._last_draw = 0.0
        self._last_key: tuple[Any, ...] = ()
        self._last_text_len = 0
        self.redraws = 0
        #: the shortest gap between two redraws: the run's pictures need come no faster while this view draws
        self.gap = 1.0 / hz if self.mode == "html" else 1.0
        self._following: Any = None  # the run's stream while this view has it poll at its pace

    def _key(self) -> tuple[Any, ...]:
        r = self.run
        return (r.status, r.phase, aggregate_of(r).records, len(r.events), int(r.elapsed))

    def start(self) -> LiveView:
        self._following = getattr(self.run, "stream", None)  # None: a run not followed from here (a stand-in)
        if self._following is not None:
            self._following.drawn(self.gap)
        if self.mode == "html":
            from IPython.display import display

            self._handle = display(_Bundle(self.run), display_id=True)
        self.refresh(force=True)
        return self

    def refresh(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last_draw < self.gap:
            return
        key = self._key()
        if not force and key == self._last_key:
            return
        self._last_draw, self._last_key = now, key
        self.redraws += 1
        if self.mode == "html":
            if self._handle is not None:
                self._handle.update(_Bundle(self.run))
        elif self.mode == "text":
            global _open_line
            line = run_text(self.run).splitlines()[0]
            with _line_lock:
                pad = max(self._last_text_len - len(line), 0)
                self.stream.write("\r" + line + " " * pad)
                self.stream.flush()
                self._last_text_len = len(line)
                _open_line = self

    def finish(self, *, show_error: bool = True) -> None:
        """The last picture: final curves and status stay in the cell (and in the saved notebook). ``show_error``:
        False when the cell raises the run's error right below (say it once)."""
        if self._following is not None:
            self._following.drawn(self.gap, on=False)
            self._following = None
        if not show_error and self.mode == "html" and self._handle is not None:
            self._handle.update(_Bundle(self.run, show_error=False))
            return
        self.refresh(force=True)
        if self.mode == "text" and _open_line is self:
            end_progress_line()
