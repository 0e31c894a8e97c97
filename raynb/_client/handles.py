"""In the kernel, and on the head inside raynb's agent: this kernel's Ray connections as raynb's handles see them: which
connection is this one (actors of an earlier one are gone), the gate every call of the kernel's side goes through,
and handles that know their methods without asking the cluster.

The gate: a kernel that is a plain Ray driver of its head (``_cluster/driver.py``) is ended by Ray when one of its
threads has a Ray call in flight while the connection shuts down ("The core worker has already been shutdown ... The
process will exit"). Every call of the seam's Ray side (``cluster_side``, ``run_channel``, ``warm_channel``,
``spares``) is made inside :func:`calls_ray`; :func:`close`, before any ``ray.shutdown()``, refuses new calls and
waits for those in flight. No call blocks long for that reason: each waits a few seconds at most, then asks again."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from ..errors import NotConnectedError

__all__ = ["generation", "new_connection", "typed", "calls_ray", "close"]

F = TypeVar("F", bound=Callable[..., Any])

_generation = 0
_gate = threading.Condition()
_in_flight = 0
_closed = False


def calls_ray(fn: F) -> F:
    """Make ``fn`` (a call of the seam's Ray side) inside the gate: refused once the connection is closing."""

    @functools.wraps(fn)
    def gated(*args: Any, **kwargs: Any) -> Any:
        global _in_flight
        with _gate:
            if _closed:
                raise NotConnectedError(
                    "This kernel has disconnected from the cluster.", fix="`%raycluster up` connects it again"
                )
            _in_flight += 1
        try:
            return fn(*args, **kwargs)
        finally:
            with _gate:
                _in_flight -= 1
                _gate.notify_all()

    return gated  # type: ignore[return-value]


def close(timeout: float = 20.0) -> bool:
    """Refuse new calls and wait (at most ``timeout``) for those in flight: True when none is left."""
    global _closed
    with _gate:
        _closed = True
        return _gate.wait_for(lambda: _in_flight == 0, timeout)


def generation() -> int:
    """Counts connections made by this process: actors from an earlier connection are gone."""
    return _generation


def new_connection() -> None:
    """A connection was made (``_session.connect``): handles and spares kept for the previous one are stale."""
    global _generation, _closed
    with _gate:
        _generation += 1
        _closed = False


def typed(handle: Any, cls: type) -> Any:
    """``handle`` -- from ``ray.get_actor``, or handed back by an actor -- with ``cls``'s methods known in this kernel.
    Over Ray Client such a handle otherwise asks the cluster for them on its first call, by a task
    (``ClientActorHandle._init_class_info``), and in a connection that has run no task yet that task waits for a new
    worker process: 3-10 s measured on a busy 2-core head, before ``down`` could even ask whether runs go on. Ray
    builds the same table from the class when the client creates the actor (``ClientActorHandle(actor_class=...)``,
    Ray 2.58); a Ray without that keeps its own way."""
    try:
        from ray.util.client.common import ClientActorClass, ClientActorHandle
    except ImportError:
        return handle
    if not isinstance(handle, ClientActorHandle) or handle._method_num_returns is not None:
        return handle
    try:
        known = ClientActorHandle(handle.actor_ref, actor_class=ClientActorClass(cls))
    except TypeError:
        return handle
    handle._method_num_returns, handle._method_signatures = known._method_num_returns, known._method_signatures
    return handle
