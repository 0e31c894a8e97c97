"""In each Train worker: how far a run is, where its training framework already knows, with no line in the cell. Hugging
Face's Trainer tells its callbacks ``state.global_step`` and ``state.max_steps`` at the end of every step;
Lightning's Trainer knows ``global_step`` and ``estimated_stepping_batches`` (its ``max_steps``, or what its epochs
and data make). raynb hooks each framework in the worker process -- whether the cell imported it before the run or
imports it during it -- and sends the two as a progress sample (``kind: "progress"``, at most one a second per rank,
never a Ray call), so the live view has a progress bar, the time left and a stall verdict, and steps advance between
the framework's own reports. Only for the run's life: ``install`` returns what undoes it."""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
import time
from collections.abc import Callable
from typing import Any

__all__ = ["install", "SAMPLE_EVERY_S", "HOOKED"]

Send = Callable[[dict[str, Any]], None]
#: a rank sends its progress at most this often
SAMPLE_EVERY_S = 1.0


def _throttled(send: Send) -> Callable[[int, int | None], None]:
    """``note(step, total)``: sent at most every ``SAMPLE_EVERY_S``, and always the last step."""
    last = [0.0]

    def note(step: int, total: int | None) -> None:
        now = time.monotonic()
        if now - last[0] >= SAMPLE_EVERY_S or (total and step >= total):
            last[0] = now
            send({"kind": "progress", "at_step": step, "total": total or None})

    return note


def _hook_transformers(module: Any, send: Send) -> Callable[[], None]:
    handler = module.CallbackHandler
    original = handler.on_step_end
    note = _throttled(send)

    def on_step_end(self: Any, args: Any, state: Any, control: Any) -> Any:
        note(state.global_step, state.max_steps)
        return original(self, args, state, control)

    handler.on_step_end = on_step_end

    def undo() -> None:
        handler.on_step_end = original

    return undo


def _hook_lightning(module: Any, send: Send) -> Callable[[], None]:
    """Each Lightning Trainer made during the run gets one more callback, which reads the trainer's step and total."""
    trainer_class = module.Trainer
    original = trainer_class.__init__
    note = _throttled(send)

    class _RaynbProgress(module.Callback):
        total: int | None = None

        def on_train_start(self, trainer: Any, pl_module: Any) -> None:
            with_total = trainer.estimated_stepping_batches
            self.total = int(with_total) if with_total not in (None, float("inf")) else None

        def on_train_batch_end(self, trainer: Any, *args: Any, **kwargs: Any) -> None:
            note(trainer.global_step, self.total)

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        self.callbacks.append(_RaynbProgress())

    trainer_class.__init__ = __init__

    def undo() -> None:
        trainer_class.__init__ = original

    return undo


#: module -> its hook: Hugging Face's callback handler, Lightning's Trainer (either package name)
HOOKED: dict[str, Callable[[Any, Send], Callable[[], None]]] = {
    "transformers.trainer_callback": _hook_transformers,
    "pytorch_lightning.trainer.trainer": _hook_lightning,
    "lightning.pytorch.trainer.trainer": _hook_lightning,
}


def install(send: Send) -> Callable[[], None]:
    """Hook each framework now if it is imported, else when it is; returns the undo."""
    undo: list[Callable[[], None]] = []
    finders = []
    for name, hook in HOOKED.items():

        def hook_now(module: Any, hook: Callable[[Any, Send], Callable[[], None]] = hook) -> None:
            try:
                undo.append(hook(module, send))
            except Exception:  # noqa: BLE001 - a framework version this hook does not know: no progress, no harm
                pass

        if name in sys.modules:
            hook_now(sys.modules[name])
        else:
            finders.append(_WhenImported(name, hook_now))
    sys.meta_path[:0] = finders

    def uninstall() -> None:
        for finder in finders:
            if finder in sys.meta_path:
                sys.meta_path.remove(finder)
        for u in undo:
            u()

    return uninstall


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
