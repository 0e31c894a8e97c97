"""This kernel's Ray Client connections as raynb's handles see them: which connection is this one (actors of an
earlier one are gone), and handles that know their methods without asking the cluster."""

from __future__ import annotations

from typing import Any

__all__ = ["generation", "new_connection", "typed"]

_generation = 0


def generation() -> int:
    """Counts connections made by this process: actors from an earlier connection are gone."""
    return _generation


def new_connection() -> None:
    """A connection was made (``_session.connect``): handles and spares kept for the previous one are stale."""
    global _generation
    _generation += 1


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
