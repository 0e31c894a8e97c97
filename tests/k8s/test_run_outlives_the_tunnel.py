"""A run outlives its notebook's connection: the tunnel to the head is cut for 2 minutes -- longer than Ray Client's
30 s reconnect grace -- while a background run goes on; afterwards the kernel connects again and attaching shows
every step.

The cut is real: kwok, which carries every pods/portforward stream to the head, is frozen (SIGSTOP) and the
kernel's tunnels are closed, so Ray Client's reconnects hang until they give up; then kwok is thawed (SIGCONT)."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest
from conftest import HERE_PY, VALUES

from tests.notebook.kernels import errors, kernel, run, text

pytestmark = pytest.mark.k8s

BLOCK_S = 120
UP = f"%raycluster up --values {VALUES} --set PYTHON_VERSION={HERE_PY} --timeout 120"
CELL = (
    "%%raytrain --workers 2 --background --name outlives-tunnel --out r\nimport time, raynb\n"
    "for step in range(1, 181):\n    time.sleep(1.0)\n    raynb.report(loss=1.0 / step)\n"
)


def _kwok_pid(stack) -> int:
    for line in (stack.dir / "pids").read_text().splitlines():
        pid, name = line.split()
        if name == "kwok":
            return int(pid)
    raise AssertionError("kwok is not running")


def test_a_run_goes_on_while_the_tunnel_is_cut_for_two_minutes(stack, head_behind_pods, clean) -> None:
    _head, log = head_behind_pods
    kwok = _kwok_pid(stack)
    with kernel(cwd=str(log.parent)) as (_km, kc):
        assert not errors(run(kc, "%load_ext raynb\nimport raynb, ray"))
        out = run(kc, UP, timeout=240)
        assert not errors(out), text(out)
        out = run(kc, CELL, timeout=300)
        assert not errors(out), text(out)
        deadline = time.monotonic() + 120
        while int(text(run(kc, "print(r.step)")).split()[-1]) < 3 and time.monotonic() < deadline:
            time.sleep(1)
        os.kill(kwok, signal.SIGSTOP)
        try:
            cut_at = time.monotonic()
            out = run(kc, "c = raynb.current()\nfor f in c.backend.forwards.values():\n    f.reset()\nprint('cut')")
            assert "cut" in text(out), text(out)
            time.sleep(max(0.0, BLOCK_S - (time.monotonic() - cut_at)))
        finally:
            os.kill(kwok, signal.SIGCONT)
        # The kernel may have lost its Ray Client session (past the 30 s grace): connect again, as a user would.
        out = run(kc, "print('status during the cut:', r.status)", timeout=120)
        assert "status during the cut:" in text(out), text(out)
        out = run(kc, UP, timeout=300)
        assert not errors(out), text(out)
        out = run(kc, "%raytrain attach outlives-tunnel --out a --wait", timeout=400)
        assert not errors(out), text(out)
        out = run(
            kc,
            "df = a.metrics\nimport json\nprint(json.dumps({'status': a.status, 'steps': sorted(set(df.step)), "
            "'ranks': sorted(set(df['rank'])), 'n': len(df)}))",
            timeout=120,
        )
        got = json.loads(text(out).strip().splitlines()[-1])
        # every step, from both ranks, including the ones reported while no notebook could reach the cluster
        assert got == {"status": "succeeded", "steps": list(range(1, 181)), "ranks": [0, 1], "n": 360}, got
        run(kc, "%raycluster down ray-train-cluster", timeout=120)
