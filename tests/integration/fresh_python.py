"""A script run in a fresh Python (a kernel that starts clean), its answer read from one ``RESULT {json}`` line."""

from __future__ import annotations

import json
import subprocess
import sys


def script_result(
    script: str,
    args: list[str],
    env: dict[str, str],
    timeout: float,
    wrapper: tuple[str, ...] = (),
    python: str = sys.executable,
) -> dict:
    """Run ``script`` with ``args`` in a fresh Python (``python``, under ``wrapper``'s command, if any) and return what
    its ``RESULT {json}`` line says."""
    cmd = [*wrapper, python, "-c", script, *args]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    line = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
    assert line, p.stdout[-2000:] + p.stderr[-3000:]
    return json.loads(line[0][7:])
