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
    # the script's own traceback, not buried under the lines Ray forwards from the cluster's processes
    own = "\n".join(ln for ln in p.stderr.splitlines() if not ln.lstrip("\x1b[0123456789m").startswith("("))
    assert line, f"exit {p.returncode}\n{p.stdout[-2000:]}\n{own[-3000:]}"
    return json.loads(line[0][7:])
