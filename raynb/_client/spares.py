"""In the kernel, and on the head inside raynb's agent: the kernel's handles on raynb's actors on the cluster: the run
registry (created on first use, found by name), a new run's free name, and the spare launcher and sink kept warm for
the next run (one pair per connection; a spare nobody claims exits by itself after ``SPARE_TTL_S``). The spare
launcher is the last run's where that run ended by itself: its process, with Ray Train and torch imported, serves run
after run (``_remote/launcher.py``)."""

from __future__ import annotations

import time
from typing import Any

from .._remote.launcher import Launcher
from .._remote.registry import RunRegistry
from .._remote.sink import MetricsSink
from .._shared.seam import ACTIVE, NAMESPACE, REGISTRY_NAME, SPARE_TTL_S, on_head
from ..errors import UsageError
from . import handles

__all__ = [
    "registry",
    "find_registry",
    "free_name",
    "sink_actor",
    "prewarm",
    "take_spare",
    "drop_taken",
    "drop_spare",
]


@handles.calls_ray
def find_registry() -> Any | None:
    """The cluster's registry if it exists (None before the first run)."""
    import ray

    if _known is not None and _known[0] == handles.generation():
        return _known[1]
    try:
        return handles.typed(ray.get_actor(REGISTRY_NAME, namespace=NAMESPACE), RunRegistry)
    except ValueError:
        return None


#: (connection generation, handle): the registry asked for once per connection, not on every run's start
_known: tuple[int, Any] | None = None


@handles.calls_ray
def registry() -> Any:
    """The cluster's registry, created on first use (detached: it outlives every kernel; 0 CPUs, on the head)."""
    import ray

    global _known
    if _known is not None and _known[0] == handles.generation():
        return _known[1]
    cls = ray.remote(num_cpus=0, max_concurrency=1000)(RunRegistry)
    handle = cls.options(
        name=REGISTRY_NAME, namespace=NAMESPACE, lifetime="detached", get_if_exists=True, resources=on_head()
    ).remote()
    handle = handles.typed(handle, RunRegistry)  # one that existed comes back without its methods (Ray Client)
    _known = (handles.generation(), handle)
    return handle


@handles.calls_ray
def free_name(name: str, *, given: bool) -> str:
    """``name`` if no run on the cluster has it. A name the user gave is refused while a run of that name goes on
    (a finished one is replaced: the same name resumes a Ray Train run from its checkpoints); a made-up name that is
    taken gets a suffix."""
    import ray

    reg = registry()
    for n in [name] + ([] if given else [f"{name}-{i}" for i in range(2, 100)]):
        taken = ray.get(reg.get.remote(n))
        if taken is None or (given and taken[0]["status"] not in ACTIVE):
            return n
        if given:
            raise UsageError(
                f"A run named {n!r} is going on on this cluster.",
                fix=f"give another name (--name {n}-2), follow it with `%raytrain attach {n}`, or stop it with "
                f"`%raytrain stop {n}`.",
            )
    raise UsageError(f"Runs {name}, {name}-2 ... {name}-99 all exist.", fix="give the run a name: --name NAME")


@handles.calls_ray
def sink_actor(ttl_s: float | None = None) -> Any:
    """Create a detached sink actor for one run (0 CPUs, so it never competes with training for a slot; on the head
    node, so the run's history survives the loss of a worker node). ``ttl_s``: exit unless claimed by then."""
    import ray

    # threaded: a kernel's long poll holds one of the threads for up to its timeout; pushes take a lock for ~0.2 ms
    cls = ray.remote(num_cpus=0, max_concurrency=16)(MetricsSink)
    return cls.options(lifetime="detached", namespace=NAMESPACE, resources=on_head()).remote(ttl_s=ttl_s)


#: (launcher, sink, connection generation, when made) of the spare pair, if one is warm.
_spare: tuple[Any, Any, int, float] | None = None
#: the launchers this process gave to runs, by run name (with the connection generation): one whose run ended by
#: itself becomes the next spare (``prewarm(after=name)``)
_taken: dict[str, tuple[Any, int]] = {}


@handles.calls_ray
def _new_pair() -> tuple[Any, Any]:
    import ray

    cls = ray.remote(num_cpus=0, max_concurrency=4)(Launcher)
    # No runtime env of its own (a run's variables are set in the launcher as it starts the run): with the job's,
    # Ray may hand it a worker process it started ahead, with Ray already imported -- seconds on a small head
    launcher = cls.options(  # on the head: Ray Train attaches its controller to the launcher's node
        lifetime="detached", namespace=NAMESPACE, resources=on_head()
    ).remote()
    launcher.warm.remote()
    return launcher, sink_actor(ttl_s=SPARE_TTL_S)


@handles.calls_ray
def prewarm(after: str | None = None) -> None:
    """Make a launcher (with Ray Train imported) and a sink ready for the next run, in the background; and the
    cluster's run registry, if this is its first run. ``after``: a run this process started that has just ended by
    itself (succeeded or failed, not stopped): its launcher is the next run's."""
    import ray

    global _spare
    ended = _taken.pop(after, None) if after is not None else None
    gen = handles.generation()
    if not ray.is_initialized() or (_spare is not None and _spare[2] == gen):
        return
    registry()
    if ended is not None and ended[1] == gen and _claimed(ended[0]):
        launcher, sink = ended[0], sink_actor(ttl_s=SPARE_TTL_S)
    else:
        launcher, sink = _new_pair()
    _spare = (launcher, sink, gen, time.monotonic())


@handles.calls_ray
def _claimed(launcher: Any) -> bool:
    """One short call: the ended run's launcher kept for ``SPARE_TTL_S``, as a new spare is -- unclaimed, it leaves
    ``RECLAIM_S`` after its run, and a cell run a minute later paid a new one (Ray Train's import: ~2.5 s on 2 cores,
    the third round of bench/train_overhead.py); one lost with its run (its node, its process) is replaced now, not at
    the next run."""
    import ray

    try:
        return bool(ray.get(launcher.claim.remote(), timeout=5))
    except Exception:  # noqa: BLE001 - dead, or too busy to answer: a new one then
        return False


@handles.calls_ray
def take_spare(name: str) -> tuple[Any, Any]:
    """The warm launcher and sink for run ``name`` if they belong to this connection, else new ones; claimed, so
    neither exits as an unclaimed spare would."""
    import ray

    global _spare
    spare, _spare = _spare, None
    gen = handles.generation()
    pair = None
    if spare is not None and spare[2] == gen:
        try:
            if ray.get(spare[0].claim.remote(), timeout=30):  # False: it hosts a run (one started meanwhile)
                pair = spare[0], spare[1]
                if time.monotonic() - spare[3] < SPARE_TTL_S / 2:
                    spare[1].claim.remote()  # made moments ago, maybe still starting: the run need not wait for it
                elif not ray.get(spare[1].claim.remote(), timeout=30):  # it expired: it is leaving
                    pair = None
        except Exception:  # noqa: BLE001 - it expired (idle longer than SPARE_TTL_S) or died: start a new pair
            pair = None
    if pair is None:
        pair = _new_pair()
        ray.get([pair[0].claim.remote(), pair[1].claim.remote()], timeout=120)
    _taken[name] = (pair[0], gen)
    return pair


def drop_taken(name: str) -> None:
    """Run ``name`` did not start (its launcher was killed): its launcher is nobody's next."""
    _taken.pop(name, None)


@handles.calls_ray
def drop_spare() -> None:
    """Kill the warm spare pair (at kernel exit: detached actors do not go with the connection)."""
    import ray

    global _spare
    spare, _spare = _spare, None
    _taken.clear()
    if spare is not None and ray.is_initialized():
        for actor in spare[:2]:
            try:
                ray.kill(actor, no_restart=True)
            except Exception:  # noqa: BLE001
                pass
