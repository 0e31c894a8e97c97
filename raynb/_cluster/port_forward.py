"""In the kernel: forward a local port on 127.0.0.1 to a pod's port through the Kubernetes API (``pods/portforward``),
like ``kubectl port-forward``, without kubectl.

Each local TCP connection gets its own tunnel (a websocket to the API server), so a tunnel that drops takes one
connection with it and the next connection opens a fresh one — to the pod ``pod_name()`` names *then*, so a head pod
that was replaced is found again. Ray Client reconnects on its own, which makes the whole path self-healing.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["PortForward"]


class PortForward:
    """Listen on ``127.0.0.1:local_port`` (0: a free port) and relay each connection to ``remote_port`` of a pod."""

    def __init__(
        self, api: Any, namespace: str, pod_name: Callable[[], str], remote_port: int, local_port: int = 0
    ) -> None:
        self.api, self.namespace, self.pod_name, self.remote_port = api, namespace, pod_name, remote_port
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", local_port))
        self._listener.listen(64)
        self.local_port: int = self._listener.getsockname()[1]
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._closed = False
        self._tunnel_api: Any = None  # an API client of the forward's own (see _tunnel)
        self._tunnel_lock = threading.Lock()
        self.tunnels_opened = 0
        self.last_error: str | None = None
        threading.Thread(target=self._accept, name=f"raynb port-forward :{self.local_port}", daemon=True).start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.local_port}"

    def _tunnel(self) -> Any:
        """A new tunnel. The client library's ``portforward`` swaps the API client's ``call_api`` for a websocket one
        while it connects and puts back what it found: two at once on one client leave the websocket one in place
        (every later call then fails: "Missing required parameter `ports`"), and a plain API call made meanwhile goes
        out as a websocket. So tunnels are opened one at a time, on an API client of the forward's own -- the Jobs
        path opens one per HTTP call, several at once."""
        from kubernetes import client
        from kubernetes.stream import portforward

        name = self.pod_name()
        with self._tunnel_lock:
            if self._tunnel_api is None:
                self._tunnel_api = client.ApiClient(self.api.configuration)
            core = client.CoreV1Api(self._tunnel_api)
            return portforward(
                core.connect_get_namespaced_pod_portforward, name, self.namespace, ports=str(self.remote_port)
            )

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            pf = self._tunnel()
            remote = pf.socket(self.remote_port)
            remote.setblocking(True)
        except Exception as e:  # noqa: BLE001 - the API said no: drop this connection, keep listening
            self.last_error = f"{type(e).__name__}: {e}"
            conn.close()
            return
        self.tunnels_opened += 1
        with self._lock:
            self._open.add(conn)
        sel = selectors.DefaultSelector()
        sel.register(conn, selectors.EVENT_READ, remote)
        sel.register(remote, selectors.EVENT_READ, conn)
        try:
            while True:
                for key, _ in sel.select(timeout=1.0):
                    src = key.fileobj
                    data = src.recv(1 << 20)  # type: ignore[union-attr]
                    if not data:
                        return
                    key.data.sendall(data)
                if self._closed:
                    return
        except OSError as e:
            self.last_error = f"{type(e).__name__}: {e}"
        finally:
            sel.close()
            with self._lock:
                self._open.discard(conn)
            for s in (conn, remote):  # shut down before closing: the proxy thread then sees EOF, not a reset
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                with contextlib.suppress(OSError):
                    s.close()
            err = pf.error(self.remote_port)
            if err:
                self.last_error = err

    def reset(self) -> None:
        """Close every open tunnel; clients that reconnect get new ones (to the head pod as it is now)."""
        with self._lock:
            conns = list(self._open)
        for c in conns:
            with contextlib.suppress(OSError):
                c.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self._listener.close()
        self.reset()
