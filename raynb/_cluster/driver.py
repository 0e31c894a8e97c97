"""In the kernel: the kernel as a Ray driver of the embedded head on its own machine: ``ray.init`` on the head's GCS
address, the way plain Ray's ``ray.init()`` connects. Ray Client, the way to every other cluster, starts a server
process on the head for each kernel that connects (Python, Ray, a driver of its own: ~5 s of a 2-core machine at
every ``up``); a kernel beside the head does not need one. Both give the seam the same Ray handles
(``_client/cluster_side.py``).

What Ray does to a driver that a notebook must not suffer is handled here:

- Ray turns a loopback bootstrap address into the machine's outward IP before connecting (ray-project/ray#59110),
  where the embedded head, bound to 127.0.0.1, does not listen: the address is kept as given while ``ray.init`` runs.
- A driver whose GCS has been gone for 60 s ends its own process (Ray's ``gcs_rpc_server_reconnect_timeout_s``):
  the kernel would die with the head (another kernel's ``down``, a crash). :class:`HeadWatch` disconnects once the
  head's GCS port stops answering, and says so.
- A driver's ``breakpoint()`` goes to Ray's remote debugger: the notebook's is put back.
- A driver's Ray call made after it disconnected starts a local Ray of its own in the process (Ray's auto-init): off.
"""

from __future__ import annotations

import contextlib
import io
import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from .._client import handles
from ..errors import ClusterStartError, ConnectError
from .log_filter import LineFilter

__all__ = ["available", "connect", "HeadWatch"]

#: how often the kernel asks whether the head's GCS still answers, and how many misses in a row mean it is gone
WATCH_EVERY_S = 1.0
MISSES = 2


def available() -> bool:
    """Whether this Ray lets raynb keep a loopback address as given (else the kernel uses Ray Client)."""
    try:
        from ray._private import services
    except ImportError:
        return False
    return callable(getattr(services, "resolve_ip_for_localhost", None))


@contextlib.contextmanager
def _loopback_kept() -> Iterator[None]:
    """``127.0.0.1:PORT`` reaches the head bound there (Ray would dial the outward IP: ray-project/ray#59110)."""
    from ray._private import services

    resolve = services.resolve_ip_for_localhost
    services.resolve_ip_for_localhost = lambda host: host
    try:
        yield
    finally:
        services.resolve_ip_for_localhost = resolve


@contextlib.contextmanager
def _breakpoint_kept() -> Iterator[None]:
    """A driver's ``ray.init`` points ``breakpoint()`` at Ray's remote debugger (``PYTHONBREAKPOINT``), where a
    notebook's own ``breakpoint()`` would wait for a debugger to attach; the cell's stays the notebook's."""
    before = os.environ.get("PYTHONBREAKPOINT")
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("PYTHONBREAKPOINT", None)
        else:
            os.environ["PYTHONBREAKPOINT"] = before


def connect(
    gcs_address: str,
    *,
    runtime_env: dict[str, Any],
    timeout: float,
    say: Callable[[str], None],
    head_gone: Callable[[], str | None],
) -> None:
    """Connect this process to the head at ``gcs_address`` (``127.0.0.1:PORT``) as a driver, and start the head's
    watch; this process's Ray auth mode is the head's already (``session.use_token``). ``head_gone`` says what the
    head last logged once it no longer runs: no more attempts then (a ClusterStartError: ``up`` starts one again)."""
    import ray
    from ray._private import auto_init_hook

    # A Ray call once this process has disconnected (a run's thread, after `down`) would start a Ray of its own in the
    # kernel (Ray's auto-init; RAY_ENABLE_AUTO_CONNECT=0 read at import): it must fail, as over Ray Client.
    auto_init_hook.enable_auto_connect = False
    host, _, port = gcs_address.rpartition(":")
    t0 = time.monotonic()
    deadline = t0 + timeout
    attempt = 0
    while True:
        attempt += 1
        if (last_words := head_gone()) is not None:
            raise ClusterStartError(
                "The embedded Ray head stopped while this kernel connected to it.",
                saw=last_words,
                fix="`%raycluster up --local` starts a fresh one; if it stops again, the lines above (Ray's) name the "
                "process that ended and the end of its log (a machine short of memory or CPU is the usual cause).",
            )
        # ray.init waits ~14 min (20 tries of ~41 s) on a GCS that is not there: ask it only of one that answers
        if not _answers(host, int(port)):
            failure = f"nothing answers at {gcs_address}"
        else:
            try:
                with _loopback_kept(), _breakpoint_kept():
                    ray.init(
                        gcs_address,
                        _node_ip_address=host,
                        runtime_env=runtime_env or None,
                        namespace="raynb",
                        logging_level="WARNING",
                        log_to_driver=True,
                    )
                break
            except (ConnectionError, TimeoutError) as e:
                with contextlib.suppress(Exception):
                    ray.shutdown()
                failure = f"{type(e).__name__}: {e}"
        if time.monotonic() > deadline:
            raise ConnectError(
                f"Could not connect to the embedded Ray head at {gcs_address} within {timeout:.0f} s.",
                saw=failure,
                fix="check that it runs (`%raycluster status`); `%raycluster down` then `%raycluster up --local` "
                "starts a fresh one.",
            )
        time.sleep(min(0.5 * attempt, 3.0))
    handles.new_connection()
    _filter_worker_output()
    res = ray.cluster_resources()
    took, cpus, gpus = time.monotonic() - t0, res.get("CPU", 0), res.get("GPU", 0)
    say(f"connected to {gcs_address} as a Ray driver in {took:.1f} s ({cpus:g} CPUs, {gpus:g} GPUs)")
    HeadWatch(host, int(port), handles.generation()).start()


def _filter_worker_output() -> None:
    """Workers' output reaches the cell as Ray prints it for a driver, less what ``log_filter.py`` drops (Ray Client's
    stream gets the same filter in ``session.py``). Ray's printer is replaced under its own name, so ``ray.shutdown``
    removes this one as it would Ray's."""
    from ray._private import worker as ray_worker
    from ray._private.ray_logging import global_worker_stdstream_dispatcher as dispatcher

    from ..display import end_progress_line

    lines = LineFilter()
    prefixless = ray_worker.global_worker.job_logging_config is not None

    def print_filtered(data: dict[str, Any]) -> None:
        dedup = ray_worker.stderr_deduplicator if data["is_err"] else ray_worker.stdout_deduplicator
        batches = dedup.deduplicate(data) if data.get("pid") != "autoscaler" else [data]
        for batch in batches:
            buf = io.StringIO()
            ray_worker.print_worker_logs(batch, buf, prefixless)
            text = lines.text(buf.getvalue())
            if text:
                end_progress_line()
                sink = sys.stderr if data["is_err"] else sys.stdout
                sink.write(text)
                sink.flush()

    dispatcher.remove_handler("ray_print_logs")
    dispatcher.add_handler("ray_print_logs", print_filtered)


def _answers(host: str, port: int) -> bool:
    """Something accepts connections at host:port (the GCS, while the head runs)."""
    try:
        socket.create_connection((host, port), timeout=1.0).close()
    except OSError:
        return False
    return True


class HeadWatch(threading.Thread):
    """Disconnects this process once the head's GCS port no longer answers (the head stopped or died), before Ray's
    own timeout ends the process; ends by itself when the connection it watches is closed or replaced."""

    def __init__(self, host: str, port: int, generation: int) -> None:
        super().__init__(name="raynb-head-watch", daemon=True)
        self.host, self.port, self.generation = host, port, generation

    def _watching(self) -> bool:
        import ray

        return handles.generation() == self.generation and ray.is_initialized()

    def run(self) -> None:
        misses = 0
        while self._watching():
            time.sleep(WATCH_EVERY_S)
            misses = 0 if _answers(self.host, self.port) else misses + 1
            if misses < MISSES or not self._watching():
                continue
            print(
                f"raynb: the embedded Ray head stopped (nothing answers at {self.host}:{self.port}), so this kernel "
                "disconnected from it; `%raycluster up --local` starts one again.",
                file=sys.stderr,
                flush=True,
            )
            import ray

            handles.close(timeout=40.0)  # calls to the dead head fail within seconds; Ray's own end comes at 60 s
            with contextlib.suppress(Exception):
                ray.shutdown()
            return
