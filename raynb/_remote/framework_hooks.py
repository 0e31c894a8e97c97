"""How far a run is, where its training framework already knows, with no line in the cell: Hugging Face's Trainer
tells its callbacks ``state.global_step`` and ``state.max_steps`` at the end of every step. raynb wraps the
Trainer's callback handler in the worker process -- whether the cell imported ``transformers`` before the run or
imports it during it -- and sends the two as a progress sample (``kind: "progress"``, at most one a second per rank,
never a Ray call), so the live view has a progress bar, the time left and a stall verdict, and steps advance between
the Trainer's saves. Only for the run's life: ``install`` returns what undoes it. Lightning is not hooked yet."""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
import time
from collections.abc import Callable
from typing import Any

__all__ = ["install", "SAMPLE_EVERY_S"]

#: the Trainer's callback handler lives here
MODULE = "transformers.trainer_callback"
#: a rank sends its progress at most this often
SAMPLE_EVERY_S = 1.0


def install(send: Callable[[dict[str, Any]], None]) -> Callable[[], None]:
    """Hook the Trainer now if ``transformers`` is imported, else when it is; returns the undo."""
    if MODULE in sys.modules:
        return _hook(sys.modules[MODULE], send)
    undo: list[Callable[[], None]] = []
    finder = _WhenImported(MODULE, lambda module: undo.append(_hook(module, send)))
    sys.meta_path.insert(0, finder)

    def uninstall() -> None:
        if finder in sys.meta_path:
            sys.meta_path.remove(finder)
        for u in undo:
            u()

    return uninstall


def _hook(module: Any, send: Callable[[dict[str, Any]], None]) -> Callable[[], None]:
    handler = module.CallbackHandler
    original = handler.on_step_end
    last = [0.0]

    def on_step_end(self: Any, args: Any, state: Any, control: Any) -> Any:
        now = time.monotonic()
        if now - last[0] >= SAMPLE_EVERY_S or state.global_step >= state.max_steps > 0:
            last[0] = now
            send({"kind": "progress", "at_step": state.global_step, "total": state.max_steps or None})
        return original(self, args, state, control)

    handler.on_step_end = on_step_end

    def undo() -> None:
        handler.on_step_end = original

    return undo


class _WhenImported(importlib.abc.MetaPathFinder):
    """Calls ``then(module)`` once ``name`` has been imported (the finder steps aside after its one import)."""

    def __init__(self, name: str, then: Callable[[Any], None]) -> None:
        self.name, self.then = name, then

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        loader, then = spec.loader, self.then
        exec_module = loader.exec_module

        def exec_and_hook(module: Any) -> None:
            exec_module(module)
            then(module)

        loader.exec_module = exec_and_hook  # type: ignore[method-assign]
        return spec
