"""In the kernel, and on the head inside raynb's agent: find or start raynb's agent on a cluster through Ray's Jobs API
(``_agent/``), and reach it.

One agent serves every kernel of a cluster that runs the same raynb: it is a Ray Job (metadata ``raynb: agent`` and
a hash of raynb's source), with raynb's package shipped in its runtime environment, so the cluster needs no raynb
installed. Its secret is in the job's environment: a kernel that may read the cluster's jobs (the cluster's token,
where it has one) may use the agent, and no other. The kernel's own Ray only submits and reads jobs over HTTP,
which works across Ray versions."""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .._shared.wire import HOST_ENV, LISTENING, PORT_ENV, SECRET_ENV
from ..errors import ConnectError
from .over_jobs import JobsSide

__all__ = ["reach_agent", "source_key"]

_PACKAGE = Path(__file__).resolve().parent.parent


def source_key(root: Path = _PACKAGE) -> str:
    """A hash of raynb's Python source: a kernel uses only an agent that runs the same raynb."""
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def reach_agent(
    dashboard_url: str,
    *,
    at: Callable[[int], str],
    port: int,
    bind: str | None,
    token: str | None,
    say: Callable[[str], None],
    timeout: float = 180.0,
) -> JobsSide:
    """The agent of the cluster whose dashboard is ``dashboard_url`` (started when none runs this raynb), reached at
    ``at(the port it says in its log)``; found (or started) again whenever it stops answering. A new agent asks for
    ``port`` and binds ``bind`` (None: the head node's address)."""
    import logging

    from ray.job_submission import JobSubmissionClient

    for noisy in ("ray.dashboard.modules.dashboard_sdk", "ray._private.runtime_env.packaging"):
        logging.getLogger(noisy).setLevel(logging.WARNING)  # "Uploading package ...": said here in one line
    client = JobSubmissionClient(dashboard_url, headers={"Authorization": f"Bearer {token}"} if token else None)

    def reach() -> tuple[str, str]:
        return _find_or_start(client, at, port, bind, say, timeout)

    def reach_again() -> tuple[str, str]:
        say("raynb's agent on the cluster stopped answering: finding or starting it again (runs go on meanwhile)")
        return reach()

    url, secret = reach()
    side = JobsSide(url, secret, cluster={}, reach=reach_again)
    side.cluster = {k: str(v) for k, v in side.call("hello").items()}
    return side


def _find_or_start(
    client: Any, at: Callable[[int], str], port: int, bind: str | None, say: Callable[[str], None], timeout: float
) -> tuple[str, str]:
    """(the agent's URL, its secret): the running agent of this raynb that answers, or a new one. An agent whose
    job still says RUNNING but which does not answer is on its way out (its job being stopped): not used."""
    from ray.job_submission import JobStatus

    key = source_key()
    live = (JobStatus.PENDING, JobStatus.RUNNING)
    for job in client.list_jobs():
        meta = job.metadata or {}
        if meta.get("raynb") != "agent" or meta.get("raynb_source") != key or job.status not in live:
            continue
        secret = str(((job.runtime_env or {}).get("env_vars") or {}).get(SECRET_ENV, ""))
        url = at(_port_from_log(client, str(job.submission_id), timeout, say))
        if _answers(url, secret):
            return url, secret
    secret = secrets.token_urlsafe(32)
    say("starting raynb's agent on the cluster: a Ray Job, raynb's package shipped with it")
    job_id = client.submit_job(
        entrypoint="python -m raynb._agent",
        submission_id=f"raynb-agent-{key[:8]}-{secrets.token_hex(3)}",
        runtime_env={
            "py_modules": [str(_PACKAGE)],
            "excludes": ["__pycache__", "*.pyc"],
            "env_vars": {SECRET_ENV: secret, PORT_ENV: str(port), **({HOST_ENV: bind} if bind else {})},
        },
        metadata={"raynb": "agent", "raynb_source": key},
        entrypoint_num_cpus=0,
    )
    return at(_port_from_log(client, job_id, timeout, say)), secret


def _answers(url: str, secret: str) -> bool:
    try:
        JobsSide(url, secret, cluster={}).call("hello", timeout=5)
    except Exception:  # noqa: BLE001 - gone, going, or another agent's secret
        return False
    return True


def _port_from_log(client: Any, job_id: str, timeout: float, say: Callable[[str], None]) -> int:
    """The port the agent says it listens on, read from its job's log as it starts."""
    from ray.job_submission import JobStatus

    t0 = time.monotonic()
    said = 0.0
    while True:
        log = client.get_job_logs(job_id)
        for line in log.splitlines():
            if line.startswith(LISTENING):
                return int(line.split()[-1])
        status = client.get_job_status(job_id)
        if status.is_terminal():
            tail = "\n".join(log.splitlines()[-15:])
            raise ConnectError(
                f"raynb's agent (Ray Job {job_id}) ended with {status.value} before it listened.",
                saw=f"the end of its log:\n{tail}" if tail else "an empty log",
                fix="the log says why; `ray job logs " + job_id + "` shows it whole",
            )
        waited = time.monotonic() - t0
        if waited > timeout:
            raise ConnectError(
                f"raynb's agent (Ray Job {job_id}) did not start listening within {timeout:g} s ({status.value}).",
                fix="a job waits while the cluster has no room for its driver; `ray job status " + job_id + "`",
            )
        if waited - said >= 10:
            said = waited
            say(f"waiting for raynb's agent: job {job_id} {status.value.lower()}, {waited:.0f} s")
        time.sleep(0.5 if status == JobStatus.RUNNING else 1.0)
