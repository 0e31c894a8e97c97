"""In the kernel and the head's supervisor: the embedded Ray head: started by raynb as its own process tree, reused, and
never left behind.

One head per machine user lives in ``$RAYNB_HOME/local`` (default ``~/.raynb/local``). A small supervisor process
(``python -m raynb._cluster.head_supervisor supervise``) leads a new session, starts ``ray start --head --block``
under it, and watches the kernels that use the head (``owners/<pid>`` files): when the last is gone (closed, crashed,
killed) or ``down`` removes ``head.json``, it ends the whole process group. Nothing here calls Ray's Python API.

This module is the kernel's side and the on-disk protocol both sides share (the lock, ``head.json``, ``owners/``,
``leases/``); the supervisor is ``head_supervisor.py``, and finding and killing processes ``processes.py``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .._settings import raynb_home
from .._shared.host import cpus_pinned, leases_active, usable_cpus
from ..errors import ClusterStartError
from .head_command import HOST, PORT_NAMES, free_ports, ray_start_command
from .head_fitness import why_unfit
from .kernel_imports import import_ray_train
from .processes import kill_all, pid_alive, pids_naming

__all__ = ["LocalHead", "find_head", "start_head", "stop_head", "state_dir"]


def state_dir() -> Path:
    """Where the embedded head's record, owners and log live."""
    return raynb_home() / "local"


@dataclass
class LocalHead:
    """A running (or recorded) embedded head."""

    supervisor_pid: int
    ports: dict[str, int]
    temp_dir: str
    #: what the user asked the head to offer; None: what Ray detects (a container's CPU quota and cpuset included)
    num_cpus: float | None
    num_gpus: float | None
    auth_mode: str
    ray_version: str
    python: str
    started_at: float
    dashboard: bool = True
    #: Ray's token for this head (token mode), in a file only this user can read; None: authentication off
    token_path: str | None = None
    #: the Python that started it and the raynb its workers import ("": a head recorded by an earlier raynb)
    python_exe: str = ""
    raynb_dir: str = ""
    reused: bool = field(default=False, compare=False)

    @property
    def client_address(self) -> str:
        return f"ray://{HOST}:{self.ports['client_port']}"

    @property
    def gcs_address(self) -> str:
        return f"{HOST}:{self.ports['gcs_port']}"

    @property
    def dashboard_url(self) -> str | None:
        return f"http://{HOST}:{self.ports['dashboard_port']}" if self.dashboard else None

    def alive(self) -> bool:
        return pid_alive(self.supervisor_pid) and _port_open(self.ports["client_port"])

    def to_json(self) -> str:
        d = asdict(self)
        d.pop("reused")
        return json.dumps(d, indent=1)

    @classmethod
    def from_json(cls, text: str) -> LocalHead:
        return cls(**json.loads(text))


def _port_open(port: int, timeout: float = 0.5) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        return s.connect_ex((HOST, port)) == 0


def _private_dir(d: Path) -> None:
    """Create ``d`` (and its parents) readable by this user alone: it holds the head's token."""
    d.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(d, 0o700)


def _new_token(d: Path) -> Path:
    """A fresh random token for a new head, written 0600 into the private state dir."""
    import secrets

    path = d / "auth_token"
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32))
    return path


@contextlib.contextmanager
def _lock(d: Path) -> Iterator[None]:
    _private_dir(d)
    with open(d / "lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def owners_of(d: Path) -> list[int]:
    out = []
    for p in (d / "owners").glob("*"):
        with contextlib.suppress(ValueError):
            out.append(int(p.name))
    return out


def add_owner(pid: int | None = None) -> None:
    """Record that process ``pid`` (default: this one) uses the head; it lives while any owner does."""
    d = state_dir() / "owners"
    d.mkdir(parents=True, exist_ok=True)
    (d / str(pid or os.getpid())).touch()


def remove_owner(pid: int | None = None) -> None:
    with contextlib.suppress(FileNotFoundError):
        (state_dir() / "owners" / str(pid or os.getpid())).unlink()


def leases_dir() -> str:
    return str(state_dir() / "leases")


def find_head() -> LocalHead | None:
    """The recorded head if it is alive, else None (a stale record is cleared)."""
    d = state_dir()
    try:
        head = LocalHead.from_json((d / "head.json").read_text())
    except (FileNotFoundError, ValueError, TypeError):
        return None
    if head.alive():
        return head
    if not pid_alive(head.supervisor_pid):
        with contextlib.suppress(FileNotFoundError):
            (d / "head.json").unlink()
    return None


def start_head(
    *,
    num_cpus: int | None = None,
    num_gpus: int | None = None,
    timeout: float = 90.0,
    progress: Callable[[str], None] | None = None,
    dashboard: bool = True,
    auth: bool = True,
) -> LocalHead:
    """Reuse the running embedded head, or start one and wait until Ray Client and the dashboard answer.
    ``auth``: Ray's token authentication (a random token readable by this user alone), so other users of the
    machine cannot submit jobs or connect through the head's loopback ports."""
    d = state_dir()
    say = progress or (lambda _msg: None)
    with _lock(d):
        existing = _reusable(d, say)
        if existing is not None:
            add_owner()
            existing.reused = True
            return existing
        (d / "owners").mkdir(parents=True, exist_ok=True)
        for stale in owners_of(d):
            if not pid_alive(stale):
                remove_owner(stale)
        shutil.rmtree(d / "leases", ignore_errors=True)  # a previous head's runs are gone with it
        why_cpus, pinned = "", cpus_pinned()
        if num_cpus is None and pinned is not None:  # Ray reads quotas and cpusets, not affinity
            num_cpus = pinned[0]
            why_cpus = f": this process may run on {pinned[0]} of the machine's {pinned[1]} CPUs (its CPU affinity)"
        head = _new_record(d, num_cpus=num_cpus, num_gpus=num_gpus, dashboard=dashboard, auth=auth)
        add_owner()
        proc = _spawn_supervisor(head, d)
        asked = [f"{n:g} {what}" for n, what in ((head.num_cpus, "CPUs"), (head.num_gpus, "GPUs")) if n is not None]
        say(f"starting an embedded Ray head ({', '.join(asked) or 'the CPUs and GPUs Ray finds here'}{why_cpus}) ...")
        # Ray Train imported while the head's processes boot, not on the first run's way (kernel_imports.py); on one
        # CPU (affinity or quota) after they are up: beside them it starved the booting GCS past Ray's deadlines
        crowded = usable_cpus() < 2
        if not crowded:
            import_ray_train()
        t0 = time.monotonic()
        _wait_ready(head, proc, d, timeout)
        if crowded:
            import_ray_train()
        say(f"embedded Ray head ready in {time.monotonic() - t0:.1f} s")
        return head


def _reusable(d: Path, say: Callable[[str], None]) -> LocalHead | None:
    """The running head if it can serve this kernel; one that cannot is stopped, unless runs still use it (the
    caller holds the lock)."""
    existing = find_head()
    if existing is None or (why := why_unfit(existing)) is None:
        return existing
    if leases_active(d):
        raise ClusterStartError(
            f"The running embedded Ray head cannot serve this kernel: {why}.",
            saw="runs still going on it",
            fix="when they end (`%raytrain ls`), `python -m raynb._cluster.head_supervisor stop` stops it; "
            "the next `up` starts a fresh one",
        )
    say(f"the running embedded Ray head cannot serve this kernel ({why}): stopping it to start a fresh one")
    _stop(existing, d)
    return None


def _new_record(d: Path, *, num_cpus: int | None, num_gpus: int | None, dashboard: bool, auth: bool) -> LocalHead:
    from importlib.metadata import version

    return LocalHead(
        supervisor_pid=0,
        ports=dict(zip(PORT_NAMES, free_ports(len(PORT_NAMES)), strict=True)),
        # Ray keeps unix sockets under the temp dir: keep its path short (sun_path is 107 bytes).
        temp_dir=f"/tmp/raynb-{os.getuid()}-{os.urandom(3).hex()}",
        num_cpus=num_cpus,
        num_gpus=num_gpus,
        # Pinned, so head and client agree whatever ~/.ray holds (a token file there flips Ray 2.58 into token mode)
        auth_mode="token" if auth else "disabled",
        token_path=str(_new_token(d)) if auth else None,
        ray_version=version("ray"),
        python=".".join(map(str, sys.version_info[:2])),
        started_at=time.time(),
        dashboard=dashboard,
        python_exe=sys.executable,
        raynb_dir=str(Path(__file__).resolve().parents[1]),
    )


def _spawn_supervisor(head: LocalHead, d: Path) -> subprocess.Popen[bytes]:
    """Start the head's supervisor (which runs ``ray start``) in a session of its own, and record the head."""
    spec = {
        "command": ray_start_command(head),
        "auth_mode": head.auth_mode,
        "token_path": head.token_path,
        "temp_dir": head.temp_dir,
        "gcs_address": head.gcs_address,
    }
    (d / "spec.json").write_text(json.dumps(spec))
    log = open(d / "head.log", "wb")  # noqa: SIM115 - handed to the child
    # the head's `python` is this one, as in an activated venv: a Ray Job's entrypoint (raynb's agent) runs
    # `python -m ...` through the shell, and must find this Ray, not the system's Python
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    # gRPC's fork handlers off in the head's processes: Ray Client's proxy forks a server for each new client
    # while its gRPC threads run, and with them on that server died at birth about one connect in five here
    # (ray-project/ray#63202; the client then waits ~45 s before its next attempt)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PATH": path, "GRPC_ENABLE_FORK_SUPPORT": "0"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "raynb._cluster.head_supervisor", "supervise", str(d)],
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env=env,
    )
    log.close()
    head.supervisor_pid = proc.pid
    (d / "head.json").write_text(head.to_json())
    return proc


def _wait_ready(head: LocalHead, proc: subprocess.Popen[bytes], d: Path, timeout: float) -> None:
    """Wait until Ray Client and the dashboard answer; a head that exits or is too slow is stopped and named (the
    caller holds the lock, so it is stopped here, not through ``stop_head``)."""
    t0 = time.monotonic()
    while not (_port_open(head.ports["client_port"]) and _dashboard_ready(head) and _ray_started(d)):
        if proc.poll() is not None:
            clear_record(d)
            raise ClusterStartError(
                "The embedded Ray head exited while starting.",
                saw=head_log_tail(),
                fix=f"read {d / 'head.log'}; `ray start --head` must work in this environment.",
            )
        if time.monotonic() - t0 > timeout:
            _stop(head, d)
            raise ClusterStartError(
                f"The embedded Ray head did not answer within {timeout:g} s.",
                saw=head_log_tail(),
                fix="the machine may be overloaded; try again, or raise the timeout "
                "(%raycluster up --local --timeout 180).",
            )
        time.sleep(0.2)


def _dashboard_ready(head: LocalHead) -> bool:
    if not head.dashboard:
        return True
    from .session import dashboard_get

    token = Path(head.token_path).read_text().strip() if head.token_path else None
    return dashboard_get(head.dashboard_url, "/api/version", timeout=1, token=token) is not None


def _ray_started(d: Path) -> bool:
    """``ray start`` has said its node is up: Ray Client's port opens before that, and a driver that connects in
    between competes with the node's own registration (on one CPU its GCS calls missed their deadlines)."""
    try:
        return b"Ray runtime started." in (d / "head.log").read_bytes()
    except FileNotFoundError:
        return False


def head_log_tail(n: int = 25) -> str:
    """The end of the head's log: its supervisor's lines, ``ray start``'s, and the ends of Ray's logs if it died."""
    try:
        lines = (state_dir() / "head.log").read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return "(no log)"
    return "\n".join(lines[-n:])


def clear_record(d: Path) -> None:
    for name in ("head.json", "spec.json", "auth_token"):
        with contextlib.suppress(FileNotFoundError):
            (d / name).unlink()


def stop_head(head: LocalHead | None = None, timeout: float = 15.0) -> bool:
    """Stop the embedded head and everything it started. True if one was running."""
    d = state_dir()
    with _lock(d):
        head = head or find_head()
        if head is None:
            return False
        _stop(head, d, timeout)
        return True


def _stop(head: LocalHead, d: Path, timeout: float = 15.0) -> None:
    """Stop ``head`` and everything it started (the caller holds the lock)."""
    clear_record(d)
    with contextlib.suppress(ProcessLookupError):
        os.kill(head.supervisor_pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while pid_alive(head.supervisor_pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if pid_alive(head.supervisor_pid):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(head.supervisor_pid, signal.SIGKILL)
    # Ray starts some workers in sessions of their own; and `down` returns once every process is gone
    deadline = time.monotonic() + 5
    while (left := processes_of(head)) and time.monotonic() < deadline:
        kill_all(left)
        time.sleep(0.1)
    for pid in owners_of(d):
        remove_owner(pid)
    shutil.rmtree(d / "leases", ignore_errors=True)
    shutil.rmtree(head.temp_dir, ignore_errors=True)


def processes_of(head: LocalHead) -> list[int]:
    """PIDs still in the head's process group or naming its temp dir (for checks that nothing is left)."""
    return pids_naming(head.temp_dir, head.supervisor_pid)
