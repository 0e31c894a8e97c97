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
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:  # what it had said by then, not only "timed out"
        raise AssertionError(f"no answer within {timeout:.0f} s\n{_said(e.stdout, e.stderr)}") from None
    line = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
    assert line, f"exit {p.returncode}\n{_said(p.stdout, p.stderr)}"
    return json.loads(line[0][7:])


def _said(out: str | bytes | None, err: str | bytes | None) -> str:
    """The ends of a script's stdout and stderr; of stderr its own lines (a traceback), not those Ray forwards from
    the cluster's processes, which start with "(name pid=...)"."""
    out, err = (x.decode(errors="replace") if isinstance(x, bytes) else x or "" for x in (out, err))
    own = "\n".join(ln for ln in err.splitlines() if not ln.lstrip("\x1b[0123456789m").startswith("("))
    return f"{out[-2000:]}\n{own[-3000:]}"
