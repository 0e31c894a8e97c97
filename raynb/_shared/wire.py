"""In any process: what crosses between the kernel and raynb's agent on the Ray Jobs path: JSON, with bytes (a packed
cell, the pickled picture) as base64 and tuples as lists. Both sides import this; standard library only."""

from __future__ import annotations

import base64
import json
from typing import Any

__all__ = ["PREFIX", "SECRET_ENV", "PORT_ENV", "HOST_ENV", "LISTENING", "dumps", "loads"]

#: every call is ``POST {PREFIX}<op>``
PREFIX = "/raynb/v1/"
#: the agent's job carries its secret here (readable by whoever may read the cluster's jobs, and nobody else)
SECRET_ENV = "RAYNB_AGENT_SECRET"
#: the port the agent tries first (a free one when that is taken; it says which in its log)
PORT_ENV = "RAYNB_AGENT_PORT"
#: the address it binds (unset: the head node's)
HOST_ENV = "RAYNB_AGENT_HOST"
#: the agent's log line that tells a kernel where it listens: ``LISTENING <port>``
LISTENING = "raynb agent listening on port"


def _plain(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray)):
        return {"__bytes__": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return repr(value)  # e.g. a numpy number in a run's final metrics: shown, not computed with


def _unplain(value: dict[str, Any]) -> Any:
    if set(value) == {"__bytes__"}:
        return base64.b64decode(value["__bytes__"])
    return value


def dumps(value: Any) -> bytes:
    return json.dumps(_plain(value), allow_nan=True).encode()


def loads(data: bytes) -> Any:
    return json.loads(data, object_hook=_unplain)
