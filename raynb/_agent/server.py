"""On the head, in raynb's agent (a Ray Job): the agent's HTTP server: one ``POST /raynb/v1/<op>`` per seam call, JSON
in and out (``_shared/wire.py``), each call checked against the secret its job carries. It holds a channel per run it
was asked about; the runs themselves, their launchers and sinks, belong to the cluster (detached actors in the
registry) and outlive the agent, so an agent started again finds them. Each run it launches gets a Ray Job of its own
(``run_job.py``): the run's driver, log and stop button where Ray shows jobs.

It listens where the dashboard does, so a kernel reaches it the way it reaches the dashboard (127.0.0.1 for an
embedded head, and for a head started by hand with Ray's default dashboard host; ``RAYNB_AGENT_HOST`` where the kernel
says otherwise: every address of a Kubernetes head pod, which a port-forward reaches through its loopback), at
``RAYNB_AGENT_PORT`` (the kernel's ``agent_port``, 8266 unless set: beside the dashboard's 8265) where that is free,
else on a free port, and says which in its log (``LISTENING``), where a kernel reads it through the Jobs API. It ends
itself after ``RAYNB_AGENT_IDLE_S`` without a call while no run goes on."""

from __future__ import annotations

import concurrent.futures
import contextlib
import hmac
import http.server
import importlib
import os
import pickle
import platform
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from .._client import cluster_side as side
from .._client.run_channel import RunChannel
from .._shared.outcome import Outcome
from .._shared.wire import HOST_ENV, LISTENING, PORT_ENV, PREFIX, SECRET_ENV, dumps, loads
from ..errors import RaynbError

__all__ = ["Agent", "main", "DEFAULT_PORT"]

DEFAULT_PORT = 8266
#: a warm group whose kernel has not said it is there for this long is ended (the kernel says so every 10 s)
FORGET_WARM_AFTER_S = 60.0


class Agent:
    """The seam's calls by name, over the cluster's own Ray."""

    def __init__(self) -> None:
        self.channels: dict[str, RunChannel] = {}
        self.outcomes: dict[str, concurrent.futures.Future[tuple[Outcome, float | None]]] = {}
        self.last_call = time.monotonic()
        self.warm: dict[str, Any] = {}  # warm group id -> its mailbox (a WarmChannel of the Ray Client seam)
        self.touched: dict[str, float] = {}  # warm group id -> when its kernel last said it is there
        self.ops: dict[str, Callable[..., Any]] = {
            "hello": self.hello,
            "resources": side.resources,
            "prewarm": side.prewarm,
            "drop_spare": side.drop_spare,
            "free_name": side.free_name,
            "start_run": self.start_run,
            "find_run": self.find_run,
            "list_runs": side.list_runs,
            "active_runs": side.active_runs,
            "remove_run": side.remove_run,
            "head_started_at": side.head_started_at,
            "launch": self.launch,
            "outcome": self.outcome,
            "entry": lambda name, timeout_s=None: self._channel(name).entry(timeout_s),
            "stop": lambda name, step=None: self._channel(name).stop(step),
            "failed": lambda name, outcome: self._channel(name).failed(Outcome.from_wire(outcome)),
            "picture": lambda name, version, events_seen, timeout_s, since=None: self._channel(name).picture(
                version, events_seen, timeout_s, since
            ),
            "records": lambda name, cursor, chunk: self._channel(name).records(cursor, chunk),
            "watch": lambda name, total, factor, min_s: self._channel(name).watch(total, factor, min_s),
            "logs": lambda name, after, rank, tail, timeout_s=None: self._channel(name).logs(
                after, rank, tail, timeout_s
            ),
            "run_task": lambda fn, args, node_id=None, timeout_s=120.0: side.run_task(
                raynb_function(fn), *args, node_id=node_id, timeout=timeout_s
            ),
            "warm_open": self.warm_open,
            "warm_touch": self.warm_touch,
            "warm_post": lambda id, cell: self._warm(id).post(cell),
            "warm_results": lambda id, cell_id, timeout_s: self._warm(id).results(cell_id, timeout_s),
            "warm_interrupt": lambda id, cell_id: self._warm(id).interrupt(cell_id),
            "warm_idle_for": lambda id: self._warm(id).idle_for(),
            "warm_stop": self.warm_stop,
        }

    def warm_open(self, workers: int, idle_s: float) -> str:
        """A warm group's mailbox, kept here for the kernel that asked (it says it is there: ``warm_touch``)."""
        warm_id = f"w{len(self.warm) + 1}-{os.urandom(4).hex()}"
        self.warm[warm_id] = side.open_warm(workers, idle_s)
        self.touched[warm_id] = time.monotonic()
        return warm_id

    def warm_touch(self, id: str) -> bool:
        """The kernel of warm group ``id`` is there; False when the group is gone."""
        if id not in self.warm:
            return False
        self.touched[id] = time.monotonic()
        return True

    def warm_stop(self, id: str) -> None:
        channel = self.warm.pop(id, None)
        self.touched.pop(id, None)
        if channel is not None:
            channel.stop()

    def forget_silent_kernels(self, after_s: float = FORGET_WARM_AFTER_S) -> None:
        """End the warm groups whose kernel stopped saying it is there (it died): their workers give back what
        they hold, as when a Ray Client connection's mailbox goes with its kernel."""
        for warm_id, at in list(self.touched.items()):
            if time.monotonic() - at > after_s:
                print(
                    f"raynb agent: warm group {warm_id}'s kernel is gone ({after_s:g} s silent); ending it", flush=True
                )
                with contextlib.suppress(Exception):
                    self.warm_stop(warm_id)

    def _warm(self, warm_id: str) -> Any:
        if warm_id not in self.warm:
            raise KeyError(f"no warm group {warm_id!r} here (it ended, or the agent was started again)")
        return self.warm[warm_id]

    def hello(self) -> dict[str, Any]:
        import ray

        return {"python": platform.python_version(), "ray": ray.__version__, "node": socket.gethostname()}

    def start_run(self, name: str, info: dict[str, Any]) -> None:
        self.channels[name] = side.start_run(name, info)

    def find_run(self, name: str) -> dict[str, Any] | None:
        found = side.find_run(name)
        if found is None:
            return None
        info, self.channels[name] = found
        self._follow(name)
        return info

    def launch(self, name: str, payload: bytes, config: bytes, spec: dict[str, Any]) -> None:
        cfg = pickle.loads(config)
        mailbox = cfg.get("mailbox") if isinstance(cfg, dict) else None
        if isinstance(mailbox, dict) and "raynb_warm" in mailbox:  # a warm group's run: the workers poll its mailbox
            cfg["mailbox"] = self._warm(mailbox["raynb_warm"]).token
        self._channel(name).launch(payload, cfg, spec)
        self._follow(name)
        threading.Thread(target=self.submit_run_job, args=(name,), name=f"raynb-job-{name}", daemon=True).start()

    def submit_run_job(self, name: str) -> str | None:
        """Give run ``name`` a Ray Job of its own (``run_job.py``: its driver while it goes on, its log, its stop),
        with this agent's runtime environment less its secret (raynb's package, already on the cluster). The job's
        id, or None where it could not be submitted -- said in the agent's log; the run goes on without it."""
        import ray
        from ray.job_submission import JobSubmissionClient

        from .run_job import ENTRYPOINT, submission_id

        try:
            own = ray.get_runtime_context().runtime_env
            env = {k: own[k] for k in ("py_modules", "excludes") if own.get(k)}
            job_id: str = JobSubmissionClient(f"http://{dashboard()}").submit_job(
                entrypoint=f"{ENTRYPOINT} {name}",
                submission_id=submission_id(name),
                runtime_env=env,
                metadata={"raynb": "run", "raynb_run": name},
                entrypoint_num_cpus=0,
            )
        except Exception as e:  # noqa: BLE001 - the run does not depend on it
            print(f"raynb agent: run {name} goes on without a Ray Job of its own: {type(e).__name__}: {e}", flush=True)
            return None
        return job_id

    def outcome(self, name: str, wait_s: float) -> dict[str, Any]:
        """How the run ended and when, or ``{"ended": False}`` when it goes on after ``wait_s``."""
        if name not in self.outcomes:
            self._channel(name)
            self._follow(name)
        try:
            outcome, at = self.outcomes[name].result(timeout=wait_s)
        except concurrent.futures.TimeoutError:
            return {"ended": False}
        return {"ended": True, "outcome": outcome.to_wire(), "at": at}

    def _channel(self, name: str) -> RunChannel:
        if name not in self.channels and self.find_run(name) is None:
            raise KeyError(f"no run named {name!r} on this cluster")
        return self.channels[name]

    def _follow(self, name: str) -> None:
        """Wait for the run's end in a thread of its own, so an ``outcome`` call only looks."""
        future: concurrent.futures.Future[tuple[Outcome, float | None]] = concurrent.futures.Future()
        channel = self.channels[name]

        def wait() -> None:
            try:
                future.set_result(channel.outcome())
            except BaseException as e:  # noqa: BLE001 - the kernel is told what it was
                future.set_exception(e)

        self.outcomes[name] = future
        threading.Thread(target=wait, name=f"raynb-agent-{name}", daemon=True).start()

    def call(self, op: str, args: dict[str, Any]) -> Any:
        self.last_call = time.monotonic()
        if op not in self.ops:
            raise KeyError(f"raynb's agent has no call {op!r} (the kernel's raynb is another version)")
        return self.ops[op](**args)


def raynb_function(ref: str) -> Callable[..., Any]:
    """``raynb.MODULE:NAME`` -> that function of this raynb (only raynb's: a kernel names a node task, never code)."""
    module, _, name = ref.partition(":")
    if not module.startswith("raynb.") or not name.isidentifier():
        raise ValueError(f"{ref!r} is not one of raynb's node tasks")
    fn: Callable[..., Any] = getattr(importlib.import_module(module), name)
    return fn


def dashboard() -> str:
    """``HOST:PORT`` of the cluster's dashboard, as its head says it ("" without one)."""
    import ray

    return str(ray._private.worker.global_worker.node.address_info.get("webui_url") or "").split("://")[-1]


def _handler(agent: Agent, secret: str) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # a kernel keeps one connection per thread (on Kubernetes: one tunnel)
        timeout = 600  # an idle one is closed after this; the kernel opens another

        def setup(self) -> None:
            super().setup()
            # an answer is two writes (headers, then body): on a kept-alive connection Nagle holds the body until the
            # kernel ACKs the headers, which a delayed ACK puts off ~40 ms -- every call, every cell
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def do_POST(self) -> None:
            given = self.headers.get("Authorization", "")
            if not hmac.compare_digest(given.encode(), f"Bearer {secret}".encode()):
                self._answer(401, {"error": {"type": "Unauthorized", "message": "a call without the agent's secret"}})
                return
            if not self.path.startswith(PREFIX):
                self._answer(404, {"error": {"type": "NotFound", "message": self.path}})
                return
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            try:
                answer = agent.call(self.path[len(PREFIX) :], loads(body) if body else {})
            except RaynbError as e:
                self._answer(400, {"error": {"type": type(e).__name__, "message": e.what, "fix": e.fix}})
            except BaseException as e:  # noqa: BLE001 - every failure goes back to the kernel as data
                self._answer(500, {"error": {"type": type(e).__name__, "message": str(e)[:4000]}})
            else:
                self._answer(200, {"ok": answer})

        def _answer(self, status: int, doc: dict[str, Any]) -> None:
            data = dumps(doc)
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # one line per call would fill the job's log

    return Handler


def _listen(handler: type[http.server.BaseHTTPRequestHandler], host: str, port: int) -> http.server.ThreadingHTTPServer:
    try:
        return http.server.ThreadingHTTPServer((host, port), handler)
    except OSError:  # taken (another cluster's agent on this machine): any free port, said in the log
        return http.server.ThreadingHTTPServer((host, 0), handler)


def main() -> None:
    import ray

    secret = os.environ.get(SECRET_ENV, "")
    if len(secret) < 16:
        sys.exit(f"raynb agent: {SECRET_ENV} is missing; it is started by raynb's kernel side, which sets it")
    idle_s = float(os.environ.get("RAYNB_AGENT_IDLE_S", "3600"))
    ray.init(log_to_driver=False)
    agent = Agent()
    # where the dashboard listens, so the agent is reached the way the dashboard is (a head started by hand binds its
    # dashboard to 127.0.0.1 unless told otherwise, whatever its node's address); else the head node's address
    host = os.environ.get(HOST_ENV) or dashboard().rpartition(":")[0] or ray.util.get_node_ip_address()
    server = _listen(_handler(agent, secret), host, int(os.environ.get(PORT_ENV, DEFAULT_PORT)))
    server.daemon_threads = True

    def stop_answering(*_: Any) -> None:
        # the job is stopped: stop answering first -- an agent whose Ray is shutting down would answer with errors
        # where a kernel should see no answer, and find (or start) the agent again
        server.socket.close()
        os._exit(0)

    signal.signal(signal.SIGTERM, stop_answering)
    print(f"{LISTENING} {server.server_address[1]}", flush=True)
    threading.Thread(target=server.serve_forever, name="raynb-agent-http", daemon=True).start()
    parent, last_check = os.getppid(), time.monotonic()
    while True:
        time.sleep(1.0)
        if os.getppid() != parent:  # the job's supervisor is gone (the head stopped): nothing left to serve
            stop_answering()
        if time.monotonic() - last_check < min(10.0, idle_s):
            continue
        last_check = time.monotonic()
        agent.forget_silent_kernels()
        if time.monotonic() - agent.last_call > idle_s and not side.active_runs() and not agent.warm:
            print(f"raynb agent: no call for {idle_s:g} s and no run going on; ending", flush=True)
            server.shutdown()
            return
