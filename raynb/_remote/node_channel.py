"""In each Train worker and the run's sink: a run's metrics path within one node: the Train workers on the sink's node
hand their batches to the sink over a Unix socket instead of a Ray call each.

Why: on a node whose cores train, what a worker's report costs is Ray's machinery, not raynb's work -- a ``push``
call cost the sink ~2.5 ms of CPU on the 2-core host (the batch's own work 0.15 ms), and the worker's side of it
~1 ms, ten times a second per worker; a write to a local socket and its read cost tens of microseconds. Workers on
other nodes keep Ray's calls (the socket is a file of the sink's node; :func:`find` says which).

The socket lives in a directory only its user can enter (``mkdtemp``: mode 0700), so only processes of the Ray
cluster's own user reach it. One frame per flush: a 4-byte length, then a pickle of ``("batch", rank, events,
lines, records)``; ``("sync",)`` is answered with one byte once everything sent before it has been taken, which
is how ``Reporter.close()`` knows the sink has its last records before the worker says it is done.
Imports nothing heavier than Ray.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import shutil
import socket
import struct
import tempfile
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["ChannelServer", "ChannelClient", "find"]

_LEN = struct.Struct("!I")
_SYNCED = b"\x01"


def _read_exactly(conn: socket.socket, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        part = conn.recv(n - len(buf))
        if not part:
            return None
        buf += part
    return bytes(buf)


class ChannelServer:
    """The sink's end: a listening socket and one reader thread per connected worker; ``take(message)`` gets each
    batch in the order its worker sent it (the sink takes its lock there, as for a Ray call)."""

    def __init__(self, take: Callable[[tuple[Any, ...]], None]) -> None:
        self._take = take
        self._dir = tempfile.mkdtemp(prefix="raynb-sink-")
        self.path = os.path.join(self._dir, "s")
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(self.path)
        self._listener.listen(64)
        threading.Thread(target=self._accept, name="raynb-node-channel", daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:  # closed
                return
            threading.Thread(target=self._serve, args=(conn,), name="raynb-node-channel-worker", daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            while (head := _read_exactly(conn, _LEN.size)) is not None:
                body = _read_exactly(conn, _LEN.unpack(head)[0])
                if body is None:
                    return
                message = pickle.loads(body)
                if message[0] == "sync":
                    conn.sendall(_SYNCED)
                    continue
                try:
                    self._take(message)
                except Exception as e:  # noqa: BLE001 - one bad batch must not cut the worker off
                    print(f"[raynb] a batch from the node's workers was not taken: {type(e).__name__}: {e}", flush=True)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._listener.close()
        shutil.rmtree(self._dir, ignore_errors=True)


class ChannelClient:
    """A worker's end: ``send`` a message (raises ``OSError`` where the sink is gone: the caller falls back to Ray),
    ``sync`` to wait until the sink has taken everything sent before."""

    def __init__(self, path: str, timeout: float = 5.0) -> None:
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.settimeout(timeout)
        self._sock.connect(path)

    def send(self, message: tuple[Any, ...]) -> None:
        body = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        self._sock.sendall(_LEN.pack(len(body)) + body)

    def sync(self, timeout: float) -> bool:
        try:
            self._sock.settimeout(timeout)
            self.send(("sync",))
            return _read_exactly(self._sock, 1) == _SYNCED
        except OSError:
            return False

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.close()


def find(sink: Any, timeout: float = 10.0) -> str | None:
    """The sink's socket where the sink is on this process's node (called by a worker's flush thread, off the
    training path), else None: Ray's calls then."""
    try:
        import ray

        node, path = ray.get(sink.channel.remote(), timeout=timeout)
        here = ray.get_runtime_context().get_node_id()
    except Exception:  # noqa: BLE001 - a sink without the channel (an older raynb on the head), or no answer
        return None
    return path if node == here and path else None  # not reachable after all: the connect fails, Ray's calls then
