"""How a run shows itself: live HTML in notebooks, a text line in terminals, a static picture when it is over.

Live updates replace one display output in place (``display_id``); there is no ``clear_output`` and no widget
state, so nothing flickers and a saved notebook keeps only the final picture (a few kilobytes).
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Any

from .run_view import run_html, run_text

if TYPE_CHECKING:
    from .viewed_run import ViewedRun

__all__ = ["LiveView", "render_bundle", "frontend"]


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


def render_bundle(run: ViewedRun) -> dict[str, str]:
    return {"text/plain": run_text(run), "text/html": run_html(run, nccl_html=_nccl_html(run))}


class _Bundle:
    def __init__(self, run: ViewedRun) -> None:
        self.run = run

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        return render_bundle(self.run)


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

    def _key(self) -> tuple[Any, ...]:
        r = self.run
        return (r.status, r.phase, len(r.records), len(r.events), int(r.elapsed))

    def start(self) -> LiveView:
        if self.mode == "html":
            from IPython.display import display

            self._handle = display(_Bundle(self.run), display_id=True)
        self.refresh(force=True)
        return self

    def refresh(self, force: bool = False) -> None:
        now = time.monotonic()
        min_gap = 1.0 / self.hz if self.mode == "html" else 1.0
        if not force and now - self._last_draw < min_gap:
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
            line = run_text(self.run).splitlines()[0]
            pad = max(self._last_text_len - len(line), 0)
            self.stream.write("\r" + line + " " * pad)
            self.stream.flush()
            self._last_text_len = len(line)

    def finish(self) -> None:
        """The last picture: final curves and status stay in the cell (and in the saved notebook)."""
        self.refresh(force=True)
        if self.mode == "text":
            self.stream.write("\n")
            self.stream.flush()
