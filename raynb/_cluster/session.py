"""In the kernel: Ray's token, auth and version preflight; the Ray Client connection (connect with retry, disconnect) to
a cluster the kernel does not share a machine with. The embedded head is reached by a driver instead (``driver.py``);
``connection.py`` chooses."""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .._client import handles
from ..errors import ConnectError, VersionMismatchError
from .log_filter import LineFilter

__all__ = [
    "connect",
    "disconnect",
    "is_connected",
    "check_versions",
    "python_minor",
    "auth_preflight",
    "dashboard_get",
    "jobs_token",
    "match_auth_mode",
    "use_token",
    "forget_token",
]


def _filter_known_noise() -> None:
    """Filter the cluster's log stream before it reaches the cell (``log_filter.py`` decides), from the first line on
    (the client server's own start-up lines arrive while ``ray.init`` runs), and end a terminal's progress line first.

    Ray's ``LogstreamClient.stdstream`` (worker output) and ``log`` (Ray's own log records) are documented as the
    override points for where client logs go; raynb wraps them once for the class.
    """
    try:
        from ray.util.client.logsclient import LogstreamClient
    except ImportError:  # Ray moved things: keep Ray's own printing
        return
    if getattr(LogstreamClient.stdstream, "_raynb", False):
        return
    import logging

    from ..display import end_progress_line
    from .log_filter import NoiseRecords

    logging.getLogger("ray._private.worker").addFilter(NoiseRecords())

    lines = LineFilter()
    stdstream, log = LogstreamClient.stdstream, LogstreamClient.log

    def filtered_stdstream(self: Any, level: int, msg: str) -> None:
        msg = lines.text(msg)
        if msg:
            end_progress_line()
            stdstream(self, level, msg)

    def filtered_log(self: Any, level: int, msg: str) -> None:
        if lines.text(msg):
            end_progress_line()
            log(self, level, msg)

    filtered_stdstream._raynb = True  # type: ignore[attr-defined]
    LogstreamClient.stdstream = filtered_stdstream
    LogstreamClient.log = filtered_log


def is_connected() -> bool:
    import ray

    return bool(ray.is_initialized())


def _token_available() -> bool:
    if os.environ.get("RAY_AUTH_TOKEN"):
        return True
    path = os.environ.get("RAY_AUTH_TOKEN_PATH")
    candidates = [Path(path)] if path else [Path.home() / ".ray" / "auth_token"]
    return any(p.is_file() and p.stat().st_size > 0 for p in candidates)


def _process_uses_token_auth() -> bool:
    if "ray._raylet" in sys.modules:
        from ray._raylet import AuthenticationMode, get_authentication_mode

        return bool(get_authentication_mode() == AuthenticationMode.TOKEN)
    return os.environ.get("RAY_AUTH_MODE", "disabled").lower() == "token"


def _token_in_use() -> str | None:
    """The token this process authenticates with in token mode (RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH, ~/.ray)."""
    if os.environ.get("RAY_AUTH_MODE", "").lower() != "token":
        return None
    if os.environ.get("RAY_AUTH_TOKEN"):
        return os.environ["RAY_AUTH_TOKEN"]
    path = Path(os.environ.get("RAY_AUTH_TOKEN_PATH") or Path.home() / ".ray" / "auth_token")
    try:
        return path.read_text().strip() or None
    except OSError:
        return None


def jobs_token(dashboard_url: str, token_path: str | None) -> str | None:
    """The token for the dashboard's Jobs API: ``token_path``'s, else where the dashboard asks for one, Ray's own
    (RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH, ~/.ray/auth_token); None where it asks for none."""
    if token_path:
        return Path(token_path).read_text().strip() or None
    mode = (dashboard_get(dashboard_url, "/api/authentication_mode", 5.0) or {}).get("authentication_mode")
    if mode != "token":
        return None
    if os.environ.get("RAY_AUTH_TOKEN"):
        return os.environ["RAY_AUTH_TOKEN"]
    path = Path(os.environ.get("RAY_AUTH_TOKEN_PATH") or Path.home() / ".ray" / "auth_token")
    try:
        return path.read_text().strip() or None
    except OSError:
        raise ConnectError(
            "The cluster's dashboard requires Ray's token, and this kernel has none.",
            saw=f"{dashboard_url}/api/authentication_mode answered 'token'; no RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or "
            "~/.ray/auth_token here",
            fix="give the token's file (--token-file / token_file=) or set RAY_AUTH_TOKEN, then run the cell again.",
        ) from None


def dashboard_get(
    dashboard_url: str | None, path: str, timeout: float = 5.0, token: str | None = None
) -> dict[str, Any] | None:
    """GET one of the dashboard's JSON endpoints (``/api/version``, ``/api/authentication_mode``); None when there is
    no dashboard or it does not answer. A head in token mode wants the token (default: this process's)."""
    if not dashboard_url:
        return None
    token = token or _token_in_use()
    request = urllib.request.Request(f"{dashboard_url}{path}")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as r:
            out = json.loads(r.read().decode())
    except (OSError, ValueError, urllib.error.URLError):
        return None
    return out if isinstance(out, dict) else None


def auth_preflight(dashboard_url: str | None, timeout: float = 3.0) -> str | None:
    """Match this kernel's Ray auth mode to the head's before connecting.

    A head in token mode makes a Ray Client without ``RAY_AUTH_MODE=token`` hang ~30 s and then fail with a misleading
    "connection timeout" (measured with Ray 2.58). The dashboard answers ``/api/authentication_mode`` without a token, so ask
    it first. Returns the head's mode, or None when the dashboard cannot be asked.
    """
    answer = dashboard_get(dashboard_url, "/api/authentication_mode", timeout)
    if answer is None:
        return None
    mode = answer.get("authentication_mode")
    wants_token = mode == "token"
    if wants_token and not _token_available():
        raise ConnectError(
            "The Ray head requires token authentication, but this kernel has no Ray token.",
            saw=f"{dashboard_url}/api/authentication_mode answered 'token'; no RAY_AUTH_TOKEN, "
            "RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token here",
            fix="copy the cluster's token to ~/.ray/auth_token (or set RAY_AUTH_TOKEN), then run the cell again.",
        )
    match_auth_mode(token=wants_token)  # e.g. a kernel that used a token head now reaches one without
    return mode


def match_auth_mode(*, token: bool) -> None:
    """Authenticate with a token from now on, or not, where this process does otherwise (a head whose mode is known)."""
    if token != _process_uses_token_auth():
        _switch_auth_mode(token=token)


def _switch_auth_mode(*, token: bool) -> None:
    """Authenticate with a token from now on (or stop)."""
    os.environ["RAY_AUTH_MODE"] = "token" if token else "disabled"
    _reread_auth_env()


def _reread_auth_env() -> None:
    """Ray reads RAY_AUTH_* when it is imported; a process that imported Ray but is not connected re-reads them
    through Ray's own reset (what Ray's tests use)."""
    if "ray._raylet" not in sys.modules:
        return
    _drop_client()
    try:
        from ray._raylet import AuthenticationTokenLoader, Config

        AuthenticationTokenLoader.instance().reset_cache()
        Config.initialize("")
    except (ImportError, AttributeError) as e:  # a Ray without the reset
        mode = os.environ.get("RAY_AUTH_MODE", "disabled")
        raise ConnectError(
            f"This cluster needs Ray's authentication mode '{mode}', and Ray was imported in this kernel with another.",
            saw=f"Ray reads RAY_AUTH_MODE only at import, and this Ray cannot re-read it ({e})",
            fix=f"restart the kernel and run `%env RAY_AUTH_MODE={mode}` before anything imports ray "
            f"(or export RAY_AUTH_MODE={mode} before starting Jupyter).",
        ) from None


_AUTH_VARS = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH", "RAY_AUTH_TOKEN")
#: RAY_AUTH_* as they were before raynb pointed this process at an embedded head's token (None: not pointed)
_auth_env_before: dict[str, str | None] | None = None


def use_token(token_path: str) -> None:
    """Authenticate this process with the token in ``token_path`` (the embedded head's). Always through Ray's reset:
    Ray caches the token it read, and a head started again writes a new token at the same path."""
    global _auth_env_before
    if _auth_env_before is None:
        _auth_env_before = {k: os.environ.get(k) for k in _AUTH_VARS}
    os.environ["RAY_AUTH_TOKEN_PATH"] = token_path
    os.environ.pop("RAY_AUTH_TOKEN", None)
    _switch_auth_mode(token=True)


def forget_token() -> None:
    """Put RAY_AUTH_* back as they were before :func:`use_token`: the next cluster is not the embedded head, whose
    token file goes with it (Ray in token mode with a missing token file refuses every connection)."""
    global _auth_env_before
    if _auth_env_before is None:
        return
    for k, v in _auth_env_before.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    _auth_env_before = None
    _reread_auth_env()


def cluster_versions(refusal: str) -> tuple[str, str] | None:
    """(Ray, Python) of the cluster from Ray Client's "Version mismatch" refusal; None for any other error."""
    m = re.search(r"Version mismatch: The cluster was started with:\s*Ray: (\S+)\s*Python: (\S+)", refusal)
    return None if m is None else (m[1], m[2])


def python_minor(version: str) -> str:
    """``3.13`` of ``3.13.5`` (Ray Client needs the same minor on both ends)."""
    return ".".join(version.split(".")[:2])


def check_versions(server_ray: str, server_python: str, *, where: str = "the cluster") -> None:
    """Ray Client needs the same Ray version and Python minor on both ends; say exactly what to install."""
    import ray

    here_py = ".".join(map(str, sys.version_info[:2]))
    problems = []
    if server_ray and server_ray != ray.__version__:
        problems.append(f"Ray {ray.__version__} here vs {server_ray} on {where}")
    if server_python and python_minor(server_python) != here_py:
        problems.append(f"Python {here_py} here vs {server_python} on {where}")
    if problems:
        py = python_minor(server_python) if server_python else here_py
        raise VersionMismatchError(
            "This notebook's environment does not match the cluster image, so Ray Client cannot connect.",
            saw="; ".join(problems),
            fix=f"make a kernel that matches: `conda env create -f environment.yml && conda activate raynb && "
            "python -m ipykernel install --user --name raynb` (Python 3.13, Ray 2.58.0, as the DLC image), or in any "
            f'Python {py}: `pip install "ray[client,train,default]=={server_ray or ray.__version__}" ipykernel && python -m ipykernel '
            "install --user --name raynb`; then pick the kernel `raynb` in Jupyter (Kernel → Change kernel).",
        )


def connect(
    address: str,
    *,
    token_path: str | None = None,
    dashboard_url: str | None = None,
    runtime_env: dict[str, Any] | None = None,
    timeout: float = 60.0,
    reconnect_grace_s: float | None = None,
    progress: Callable[[str], None] | None = None,
) -> None:
    """Connect this kernel to ``address`` (``ray://host:port``) with Ray Client, retrying transient refusals.
    ``reconnect_grace_s``: how long the cluster keeps this session after its connection drops (Ray Client reads
    ``RAY_CLIENT_RECONNECT_GRACE_PERIOD`` when it connects; None leaves Ray's own setting).

    About 1 in 25 connects fail with ``ConnectionAbortedError`` while a previous client's server process is still
    shutting down (measured on Ray 2.58); those are retried until ``timeout``.
    """
    say = progress or (lambda _m: None)
    t0 = time.monotonic()
    say(f"connecting to {address} with Ray Client (the head starts a server process for this kernel) ...")
    if token_path:
        use_token(token_path)
    else:
        forget_token()
    auth_preflight(dashboard_url)  # before `import ray`: Ray fixes its auth mode at import
    import ray

    _drop_client()
    _filter_known_noise()
    if reconnect_grace_s is not None:
        os.environ["RAY_CLIENT_RECONNECT_GRACE_PERIOD"] = str(max(round(reconnect_grace_s), 1))
    deadline = t0 + timeout
    attempt, last = 0, None
    while time.monotonic() < deadline:
        attempt += 1
        try:
            ray.init(
                address, runtime_env=runtime_env or None, namespace="raynb", logging_level="WARNING", log_to_driver=True
            )
            handles.new_connection()
            res = ray.cluster_resources()
            took = time.monotonic() - t0
            say(f"connected to {address} in {took:.1f} s ({res.get('CPU', 0):g} CPUs, {res.get('GPU', 0):g} GPUs)")
            return
        except RuntimeError as e:  # Ray Client refuses a kernel whose Ray or Python differs from the cluster's
            if (versions := cluster_versions(str(e))) is None:
                raise
            _drop_client()
            check_versions(*versions, where=f"the cluster at {address}")
            raise
        except (ConnectionError, ConnectionAbortedError, TimeoutError) as e:
            last = e
            _drop_client()
            if attempt >= 3:  # one or two refusals right after a head starts are normal: say nothing
                say(f"Ray Client connect attempt {attempt} failed ({type(e).__name__}); retrying ...")
            time.sleep(min(1.0 * attempt, 5.0))
    raise ConnectError(
        f"Could not connect to the Ray head at {address} within {timeout:.0f} s.",
        saw=f"{type(last).__name__}: {last}" if last else "no answer",
        fix="check that the head is running (%raycluster status) and that its client port (10001 on Kubernetes) "
        "is reachable from this kernel.",
    )


def disconnect() -> None:
    _drop_client()


def _drop_client() -> None:
    """End this process's Ray Client session -- also one whose connection was lost (past Ray Client's reconnect
    grace): Ray no longer counts it as initialized but still holds its context, and refuses the next ``ray.init``
    ("already connected ... with allow_multiple=True") until it is shut down."""
    import ray
    from ray.util import client as ray_client

    if ray.is_initialized() or ray_client.num_connected_contexts() > 0:
        handles.close()  # no call of raynb's in flight when Ray shuts down (a driver kernel would be ended)
        with contextlib.suppress(Exception):
            ray.shutdown()
