"""The kernel's side of the Ray Jobs path talking to the agent's real HTTP handler (``_agent/server.py``) over real
sockets on 127.0.0.1: one kept-alive connection per kernel thread (on Kubernetes, one port-forward tunnel instead of
one per call), a connection the agent closed while idle opened again without the caller seeing it, and what each
failure says. What answers the calls here is a stand-in for the agent's seam (the real one needs a cluster:
tests/integration/test_jobs_path.py)."""

from __future__ import annotations

import http.server
import re
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from raynb._agent.server import _handler
from raynb._client.over_jobs import JobsSide
from raynb.errors import ConnectError

SECRET = "s" * 32


class Answers:
    """Answers ``echo`` and ``sleep``, as the agent answers its seam's calls."""

    def call(self, op: str, args: dict[str, Any]) -> Any:
        if op == "sleep":
            time.sleep(args["s"])
        return {"op": op, **args}


@pytest.fixture
def agent() -> Iterator[tuple[str, set[int], type[http.server.BaseHTTPRequestHandler]]]:
    """The agent's handler on a free port: its URL, the client ports it saw (one per connection), its class."""
    handler = _handler(Answers(), SECRET)
    seen: set[int] = set()

    class Counting(handler):  # type: ignore[valid-type,misc]
        def setup(self) -> None:
            seen.add(self.client_address[1])
            super().setup()

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Counting)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", seen, Counting
    server.shutdown()
    server.server_close()


def test_calls_from_one_thread_share_one_connection_and_each_thread_has_its_own(agent) -> None:
    url, seen, _ = agent
    side = JobsSide(url, SECRET, cluster={})
    assert [side.call("echo", n=i)["n"] for i in range(20)] == list(range(20))
    assert len(seen) == 1
    threads = [threading.Thread(target=lambda: [side.call("echo") for _ in range(5)]) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(seen) == 4


def test_a_connection_the_agent_closed_while_idle_is_opened_again_unseen(agent) -> None:
    url, seen, handler = agent
    handler.timeout = 0.2  # the agent's 600 s, shortened
    side = JobsSide(url, SECRET, cluster={})
    assert side.call("echo", n=1)["n"] == 1
    time.sleep(0.6)  # the agent has closed it
    assert side.call("echo", n=2)["n"] == 2
    assert len(seen) == 2


def test_what_each_failure_says(agent) -> None:
    url, _, _ = agent
    with pytest.raises(ConnectError, match="the secret does not match"):
        JobsSide(url, "x" * 32, cluster={}).call("echo")
    with pytest.raises(ConnectError, match=re.escape("did not answer 'sleep' within 0.3 s")):
        JobsSide(url, SECRET, cluster={}).call("sleep", timeout=0.3, s=1.0)
    with pytest.raises(ConnectError, match=re.escape("does not answer at http://127.0.0.1:1 ")):
        JobsSide("http://127.0.0.1:1", SECRET, cluster={}).call("echo")


def test_both_ends_send_small_packets_at_once(agent) -> None:
    """An answer is two writes (headers, body): with Nagle on, a kept-alive connection held each body for the
    kernel's delayed ACK, ~40 ms a call (48 ms p50 measured here before, 0.2 ms after; bench/jobs_path.py's warm cell
    p50 49 ms). Both ends turn Nagle off."""
    url, _seen, handler = agent
    server_side: list[int] = []
    original = handler.setup

    def setup(self: Any) -> None:
        original(self)
        server_side.append(self.connection.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))

    handler.setup = setup  # type: ignore[method-assign]
    side = JobsSide(url, SECRET, cluster={})
    side.call("echo")
    assert side._local.conn.sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
    assert server_side and server_side[0] != 0


def test_a_node_task_is_named_and_only_raynbs_are_found() -> None:
    """Through Ray Jobs the doctor's node tasks cross by name (the cluster runs the same raynb), never as code."""
    from raynb._agent.server import raynb_function
    from raynb._remote.tasks import node_facts

    assert raynb_function("raynb._remote.tasks:node_facts") is node_facts
    for ref in ("os:system", "raynb._remote.tasks:node_facts()", "subprocess:run"):
        with pytest.raises(ValueError, match="not one of raynb's node tasks"):
            raynb_function(ref)


def _protocol_methods(proto: type) -> set[str]:
    return {n for n, v in vars(proto).items() if callable(v) and not n.startswith("_")}


def test_the_agents_operations_and_the_http_clients_are_the_seams() -> None:
    """Each operation of the seam's Protocols is one the agent serves and one the HTTP client calls -- no more, no
    less: an operation added to the Protocol and missing from either end (or left behind in one) fails here. The
    wire's own: ``hello`` (the handshake) and ``warm_touch`` (a kernel's keep-alive)."""
    import ast
    from pathlib import Path

    from raynb._agent.server import Agent
    from raynb._client import agent_job, over_jobs
    from raynb._shared.seam import ClusterSide, RunChannel, WarmChannel

    local = {"connected"}  # answered by the client itself
    seam = (_protocol_methods(ClusterSide) - local - {"open_warm"}) | {"warm_open"} | _protocol_methods(RunChannel)
    seam |= {f"warm_{m}" for m in _protocol_methods(WarmChannel)}
    wire = {"hello", "warm_touch"}
    served = set(Agent().ops)
    trees = [ast.parse(Path(m.__file__).read_text()) for m in (over_jobs, agent_job)]  # the calls, the handshake
    called = {
        n.args[0].value
        for tree in trees
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "call"
        and n.args and isinstance(n.args[0], ast.Constant)
    }  # fmt: skip
    assert served == seam | wire, (sorted(served - seam - wire), sorted((seam | wire) - served))
    assert called == seam | wire, (sorted(called - seam - wire), sorted((seam | wire) - called))
