"""A run outlives its notebook's connection: the kernel's way to the cluster is cut for longer than Ray Client's
reconnect grace (raynb's ``client_reconnect_grace_s``: 30 s by default, 10 s in the tests, so the cut is 40 s, not
2 minutes) while a background run goes on; afterwards the kernel connects again and attaching shows every step.

The cut is a real network cut between the notebook and the cluster (a laptop that sleeps, Wi-Fi that drops): the
kernel reaches the API server through a TCP relay here, and the relay drops every connection and then swallows new
ones (accepted, never answered) for the cut, so the port-forward's tunnels die and Ray Client's reconnects hang
until they give up. The cluster itself (API server, kwok's nodes, the head) stays healthy, as it would on EKS."""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import HERE_PY, NAME, VALUES

from tests.notebook.kernels import errors, kernel, run, text

GRACE_S = float(os.environ.get("RAYNB_CLIENT_RECONNECT_GRACE_S", "30"))
BLOCK_S = GRACE_S + 30  # past the grace: the kernel's Ray Client session is gone, the run must not be
STEPS = int(BLOCK_S) + 30  # one a second: the run goes on through the whole cut and ends after it
UP = f"%raycluster up --values {VALUES} --set PYTHON_VERSION={HERE_PY} --timeout 120"
CELL = (
    # no shared storage on this cluster: the run says it never checkpoints, so node-local storage is fine
    "%%raytrain --workers 2 --background --checkpoints false --name outlives-tunnel --out r\nimport time, raynb\n"
    f"for step in range(1, {STEPS + 1}):\n    time.sleep(1.0)\n    raynb.report(loss=1.0 / step)\n"
)


def _printed(msgs: list[dict]) -> str:
    return "".join(m["content"]["text"] for m in msgs if m["msg_type"] == "stream")


class Relay:
    """127.0.0.1:port -> target, byte for byte; ``cut()`` drops every connection and holds new ones unanswered."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target, self.cut_off, self._conns = target, False, []  # type: ignore[var-annotated]
        self._lsock = socket.create_server(("127.0.0.1", 0))
        self.port = self._lsock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            c, _ = self._lsock.accept()
            self._conns.append(c)
            if not self.cut_off:
                threading.Thread(target=self._pump, args=(c,), daemon=True).start()

    def _pump(self, c: socket.socket) -> None:
        up = socket.create_connection(self.target)
        self._conns.append(up)
        sel = selectors.DefaultSelector()
        sel.register(c, selectors.EVENT_READ, up)
        sel.register(up, selectors.EVENT_READ, c)
        try:
            while not self.cut_off:
                for key, _ in sel.select(timeout=0.5):
                    data = key.fileobj.recv(65536)  # type: ignore[union-attr]
                    if not data:
                        return
                    key.data.sendall(data)
        except OSError:
            return
        finally:
            for s in (c, up):
                s.close()

    def cut(self) -> None:
        self.cut_off = True
        for s in self._conns:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def restore(self) -> None:
        self.cut_off = False


@pytest.fixture
def relayed_kubeconfig(stack, tmp_path: Path) -> Iterator[tuple[Relay, Path]]:
    host, port = stack.server.removeprefix("https://").rsplit(":", 1)
    relay = Relay((host, int(port)))
    cfg = tmp_path / "kubeconfig"
    cfg.write_text(Path(stack.kubeconfig).read_text().replace(stack.server, f"https://{host}:{relay.port}"))
    yield relay, cfg
    relay.restore()


def test_a_run_goes_on_while_the_tunnel_is_cut_past_the_grace(head_behind_pods, clean, relayed_kubeconfig) -> None:
    _head, log = head_behind_pods
    relay, cfg = relayed_kubeconfig
    with kernel(cwd=str(log.parent), env={"KUBECONFIG": str(cfg)}) as (_km, kc):
        assert not errors(run(kc, "%load_ext raynb\nimport raynb, ray"))
        out = run(kc, UP, timeout=240)
        assert not errors(out), text(out)
        # a head and two GPU nodes, no shared storage: a run that would checkpoint is refused before workers start
        refused = errors(run(kc, "%%raytrain --workers 2\nimport raynb\nraynb.report(loss=1.0)", timeout=120))
        assert refused and "3 nodes" in refused[0]["evalue"], refused
        assert "STORAGE_PATH=s3://" in "".join(refused[0]["traceback"])
        out = run(kc, CELL, timeout=300)
        assert not errors(out), text(out)
        deadline = time.monotonic() + 120
        while int(_printed(run(kc, "print(r.step)")).split()[-1]) < 3 and time.monotonic() < deadline:
            time.sleep(1)
        relay.cut()
        try:
            time.sleep(BLOCK_S)
        finally:
            relay.restore()
        # The kernel may have lost its Ray Client session (past the grace): connect again, as a user would.
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
        got = json.loads(_printed(out).strip().splitlines()[-1])
        # every step, from both ranks, including the ones reported while no notebook could reach the cluster
        assert got == {"status": "succeeded", "steps": list(range(1, STEPS + 1)), "ranks": [0, 1], "n": 2 * STEPS}, got
        run(kc, f"%raycluster down {NAME}", timeout=120)
