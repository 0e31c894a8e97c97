"""In the kernel, and on the head inside raynb's agent: the seam over HTTP: the kernel asks raynb's agent (``_agent/``,
a Ray Job on the head) what it would otherwise ask the cluster's actors over Ray Client. For a kernel whose Python or
Ray is not the cluster's: nothing crosses but JSON (``_shared/wire.py``), a cell as source and plain data
(``_shared/cell_code.py``), a run's config as a plain pickle, and the picture the sink already pickles."""

from __future__ import annotations

import http.client
import json
import pickle
import socket
import threading
import urllib.parse
from collections.abc import Callable, Mapping
from typing import Any, NoReturn, TypeVar

from .._shared.outcome import Outcome
from .._shared.wire import PREFIX, dumps, loads
from ..errors import ConnectError, UsageError

__all__ = ["JobsSide", "JobsRunChannel", "JobsWarmChannel", "AgentError"]

T = TypeVar("T")


class AgentError(RuntimeError):
    """A call the agent answered with a failure on the cluster's side (its type and message)."""

    def __init__(self, kind: str, message: str) -> None:
        self.kind = kind
        super().__init__(f"{kind}: {message}")


class JobsSide:
    """The connected cluster's side, reached through raynb's agent at ``url`` (``http://HOST:PORT``). ``reach``
    finds the agent again, or starts a new one: called when the agent stops answering (its job was stopped, its node
    restarted), so the next call goes on -- the runs, which belong to the cluster, never stopped."""

    #: a cell crosses as source and plain data; what workers print comes back through raynb's own channel
    code_crosses = False
    streams_worker_output = False

    def __init__(
        self, url: str, secret: str, *, cluster: Mapping[str, str], reach: Callable[[], tuple[str, str]] | None = None
    ) -> None:
        self.url, self._secret = url.rstrip("/"), secret
        #: the cluster's Python and Ray, as its agent runs them
        self.cluster = dict(cluster)
        self._reach = reach
        self._reaching = threading.Lock()
        self._found = 0  # how often the agent was found again (a new one may listen on the same URL)
        self._local = threading.local()  # each thread's kept-alive connection to the agent

    # --- the wire -----------------------------------------------------------------------------------------------
    def call(self, op: str, timeout: float = 60.0, **args: Any) -> Any:
        """The agent's answer to ``op``; when the agent is gone, once more after finding or starting it again."""
        seen = self._found
        try:
            return self._once(op, timeout, args)
        except _Gone as e:
            if self._reach is None:
                raise e.error from None
            with self._reaching:  # one thread finds the agent again; the others use what it found
                if self._found == seen:
                    self.url, self._secret = self._reach()
                    self._found += 1
            try:
                return self._once(op, timeout, args)
            except _Gone as again:
                raise again.error from None

    def _once(self, op: str, timeout: float, args: dict[str, Any]) -> Any:
        try:
            status, body = self._post(op, dumps(args), timeout)
        except TimeoutError as e:  # no answer within the timeout: the agent is there, but busy or stuck
            raise ConnectError(
                f"raynb's agent at {self.url} did not answer {op!r} within {timeout:g} s ({e}).",
                fix="run the cell again; `ray job logs` of the raynb-agent job says what it is doing",
            ) from None
        except (OSError, http.client.HTTPException) as e:
            raise _Gone(
                ConnectError(
                    f"raynb's agent on the cluster does not answer at {self.url} ({e}).",
                    fix="`%raycluster up` with the same address starts it again; runs go on on the cluster meanwhile",
                )
            ) from None
        if status == 401:  # an agent started again on the same port has a secret of its own
            raise _Gone(
                ConnectError(
                    "raynb's agent refused this kernel's call: the secret does not match.",
                    fix="`%raycluster up` again reads the agent's secret from the cluster's jobs",
                )
            )
        if status != 200:
            _raise_from(status, body)
        return loads(body)["ok"]

    def _post(self, op: str, data: bytes, timeout: float) -> tuple[int, bytes]:
        """One POST on this thread's connection to the agent, kept alive between calls (the agent answers HTTP/1.1):
        one TCP connection per kernel thread -- on Kubernetes one port-forward tunnel, not one per call. A kept
        connection the agent closed while it sat idle is opened again, once: the request never reached the agent."""
        for _ in range(2):
            conn: http.client.HTTPConnection | None = getattr(self._local, "conn", None)
            kept = conn is not None and self._local.url == self.url
            if not kept:
                if conn is not None:
                    conn.close()
                parts = urllib.parse.urlsplit(self.url)
                conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=timeout)
                try:
                    conn.connect()
                    if conn.sock is not None:  # no small packet waits on a delayed ACK
                        conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                except OSError as e:  # refused, or no answer to connect: nobody listens there (not a busy agent)
                    raise ConnectionError(str(e) or type(e).__name__) from None
                self._local.conn, self._local.url = conn, self.url
            assert conn is not None
            if conn.sock is not None:
                conn.sock.settimeout(timeout)
            conn.timeout = timeout
            headers = {"Authorization": f"Bearer {self._secret}", "Content-Type": "application/json"}
            try:
                conn.request("POST", f"{PREFIX}{op}", body=data, headers=headers)
                answer = conn.getresponse()
                return answer.status, answer.read()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                conn.close()
                self._local.conn = None
                if not kept:
                    raise
            except BaseException:
                conn.close()  # in an unknown state (a timeout mid-answer): the next call opens another
                self._local.conn = None
                raise
        raise AssertionError("unreachable")

    # --- ClusterSide --------------------------------------------------------------------------------------------
    def connected(self) -> bool:
        return True

    def resources(self) -> dict[str, Any]:
        found: dict[str, Any] = self.call("resources")
        return found

    def prewarm(self, after: str | None = None) -> None:
        self.call("prewarm", after=after)

    def drop_spare(self) -> None:
        self.call("drop_spare")

    def free_name(self, name: str, *, given: bool) -> str:
        return str(self.call("free_name", name=name, given=given))

    def start_run(self, name: str, info: dict[str, Any]) -> JobsRunChannel:
        self.call("start_run", name=name, info=info)
        return JobsRunChannel(self, name)

    def find_run(self, name: str) -> tuple[dict[str, Any], JobsRunChannel] | None:
        info = self.call("find_run", name=name)
        return None if info is None else (info, JobsRunChannel(self, name))

    def list_runs(self) -> list[dict[str, Any]]:
        return list(self.call("list_runs"))

    def active_runs(self) -> list[str]:
        return list(self.call("active_runs"))

    def remove_run(self, name: str) -> dict[str, Any] | None:
        found: dict[str, Any] | None = self.call("remove_run", name=name)
        return found

    def head_started_at(self) -> float | None:
        at = self.call("head_started_at")
        return None if at is None else float(at)

    def open_warm(self, workers: int, idle_s: float) -> JobsWarmChannel:
        return JobsWarmChannel(self, workers, idle_s)

    def run_task(self, fn: Callable[..., T], *args: Any, node_id: str | None = None, timeout: float = 120.0) -> T:
        """One of raynb's own node tasks (``_remote/tasks.py``: the doctor's facts, its storage probe), named by module
        and name -- the cluster has the same raynb -- with plain arguments; its plain answer (a tuple comes back as a
        list)."""
        if not fn.__module__.startswith("raynb."):
            raise UsageError(
                f"{fn.__qualname__} is not raynb's: through Ray Jobs only raynb's own node tasks run on the cluster.",
                fix="run code on the cluster in a %%raytrain cell",
            )
        ref = f"{fn.__module__}:{fn.__qualname__}"
        answer: T = self.call(
            "run_task", timeout=timeout + 30, fn=ref, args=list(args), node_id=node_id, timeout_s=timeout
        )
        return answer


class JobsRunChannel:
    """One run, through the agent (the seam's ``RunChannel``)."""

    def __init__(self, side: JobsSide, name: str) -> None:
        self.side, self.name = side, name

    def launch(self, payload: bytes, config: dict[str, Any], spec: dict[str, Any]) -> None:
        self.side.call("launch", name=self.name, payload=payload, config=pickle.dumps(config, protocol=4), spec=spec)

    def outcome(self) -> tuple[Outcome, float | None]:
        while True:
            answer = self.side.call("outcome", timeout=40, name=self.name, wait_s=10.0)
            if answer["ended"]:
                return Outcome.from_wire(answer["outcome"]), answer["at"]

    def entry(self, timeout: float | None = None) -> dict[str, Any] | None:
        found: dict[str, Any] | None = self.side.call(
            "entry", timeout=(timeout or 50) + 10, name=self.name, timeout_s=timeout
        )
        return found

    def stop(self, step: int | None = None) -> None:
        self.side.call("stop", name=self.name, step=step)

    def failed(self, outcome: Outcome) -> None:
        self.side.call("failed", name=self.name, outcome=outcome.to_wire())

    def picture(
        self, version: int, events_seen: int, timeout: float, since: dict[int, tuple[int, int]] | None = None
    ) -> tuple[int, bytes | None, list, dict]:
        shape = {} if since is None else {"since": since}
        v, pic, events, summary = self.side.call(
            "picture",
            timeout=timeout + 30,
            name=self.name,
            version=version,
            events_seen=events_seen,
            timeout_s=timeout,
            **shape,
        )
        return int(v), pic, list(events), dict(summary)

    def records(self, cursor: int, chunk: int) -> list[dict[str, Any]]:
        return list(self.side.call("records", name=self.name, cursor=cursor, chunk=chunk))

    def watch(self, total: float | None, factor: float, min_s: float) -> dict[str, Any]:
        return dict(self.side.call("watch", name=self.name, total=total, factor=factor, min_s=min_s))

    def logs(
        self, after: int, rank: int | None, tail: int | None, timeout: float | None = None
    ) -> tuple[int, list[dict[str, Any]], int]:
        seq, lines, dropped = self.side.call(
            "logs", timeout=(timeout or 0) + 30, name=self.name, after=after, rank=rank, tail=tail, timeout_s=timeout
        )
        return int(seq), list(lines), int(dropped)


class _Gone(Exception):
    """The agent is not there (no answer, or another agent's secret): worth finding it again."""

    def __init__(self, error: ConnectError) -> None:
        self.error = error


class JobsWarmChannel:
    """A warm group's mailbox, kept by the agent (the seam's ``WarmChannel``). The agent ends it when this kernel
    stops saying it is there (``TOUCH_S``, from a thread), as a Ray Client connection's own mailbox ends with it."""

    #: how often the kernel says it is there; the agent ends a mailbox after ``AGENT_FORGETS_S`` without it
    TOUCH_S = 10.0

    def __init__(self, side: JobsSide, workers: int, idle_s: float) -> None:
        self.side = side
        self.id = str(side.call("warm_open", workers=workers, idle_s=idle_s))
        self.token: Any = {"raynb_warm": self.id}  # the agent puts the mailbox's handle in its place at launch
        self._stopped = threading.Event()
        threading.Thread(target=self._touch, name="raynb-warm-touch", daemon=True).start()

    def _touch(self) -> None:
        while not self._stopped.wait(self.TOUCH_S):
            try:
                if not self.side.call("warm_touch", id=self.id):
                    return  # the agent no longer has it: the group ended
            except Exception:  # noqa: BLE001 - the agent does not answer now; the next touch tries again
                continue

    def post(self, cell: dict[str, Any]) -> int:
        return int(self.side.call("warm_post", id=self.id, cell=cell))

    def results(self, cell_id: int, timeout: float) -> dict[int, dict[str, Any]]:
        got = self.side.call("warm_results", timeout=timeout + 30, id=self.id, cell_id=cell_id, timeout_s=timeout)
        return {int(rank): r for rank, r in got.items()}

    def interrupt(self, cell_id: int) -> None:
        self.side.call("warm_interrupt", id=self.id, cell_id=cell_id)

    def idle_for(self) -> float:
        return float(self.side.call("warm_idle_for", id=self.id))

    def stop(self) -> None:
        self._stopped.set()
        self.side.call("warm_stop", id=self.id)


def _raise_from(status: int, body: bytes) -> NoReturn:
    try:
        err = json.loads(body)["error"]
    except Exception:  # noqa: BLE001 - not the agent answering (a proxy, another server on the port)
        raise ConnectError(f"Something other than raynb's agent answered (HTTP {status}).") from None
    if err["type"] == "UsageError":
        raise UsageError(err["message"], fix=err.get("fix"))
    raise AgentError(err["type"], err["message"])
