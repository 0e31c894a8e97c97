"""In the head's supervisor: the embedded head's supervisor: ``python -m raynb._cluster.head_supervisor supervise DIR``
leads a new session, runs ``ray start --head --block`` under it, and ends the whole process group when the last
kernel that owns the head is gone and no run holds a lease, or when ``down`` removes ``head.json``. ``stop`` and
``status`` stop the head or print its record from a shell. The on-disk protocol it shares with the kernel is in
``embedded_head.py``."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from .._shared.host import leases_active
from .embedded_head import clear_record, find_head, owners_of, remove_owner, stop_head
from .processes import group_members, kill_all, pid_alive, pids_naming

__all__ = ["main"]

#: seconds the head's processes get after SIGTERM when it stops, before SIGKILL (see _supervise's end)
STOP_GRACE_S = 0.5


def _supervise(d: Path) -> int:
    spec = json.loads((d / "spec.json").read_text())
    stop = threading.Event()

    def on_term(_sig: int, _frm: object) -> None:
        stop.set()  # ends the wait below at once, not at its next half second

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a kernel interrupt must not reach the head
    # Ray turns 127.0.0.1 into the "remotely reachable" address unless it runs in its single-machine mode (the one
    # it uses on macOS): then every component, the Ray Client server included, stays on loopback.
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")}
    if spec.get("token_path"):
        env["RAY_AUTH_TOKEN_PATH"] = spec["token_path"]
    env = {
        **env,
        "RAY_AUTH_MODE": spec["auth_mode"],
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
        # Ray's own helpers in this head's processes (Train's placement-group cleaner, the State API) look for "the"
        # local cluster when given no address, and give up when a machine runs several heads: name ours.
        "RAY_ADDRESS": spec["gcs_address"],
    }
    # The dashboard gives each of its modules 30 s to start and itself 60 s; on a 2-core machine that is busy (a
    # build, another kernel's training) MetricsHead misses that and the whole head exits. Minutes beat failing.
    env.setdefault("RAY_DASHBOARD_SUBPROCESS_MODULE_WAIT_READY_TIMEOUT", "180")
    env.setdefault("RAY_DASHBOARD_STARTUP_TIMEOUT_S", "240")
    # Train's preemption watcher polls Ray for nodes being drained (spot reclaims, autoscaler scale-down): one machine
    # has none to drain, so every run would start that actor for nothing. A user's own setting still wins.
    env.setdefault("RAY_TRAIN_ENABLE_PREEMPTION_WATCHER", "0")
    ray = subprocess.Popen(spec["command"], stdin=subprocess.DEVNULL, env=env)
    print(f"[raynb] supervisor {os.getpid()} started ray pid {ray.pid}", flush=True)
    ownerless = 0
    while not stop.wait(0.5):
        if ray.poll() is not None:
            print(f"[raynb] ray start exited with {ray.returncode}", flush=True)
            break
        if not (d / "head.json").exists():
            break
        alive = [p for p in owners_of(d) if pid_alive(p)]
        for p in set(owners_of(d)) - set(alive):
            remove_owner(p)
        ownerless = 0 if alive or leases_active(d) else ownerless + 1
        if ownerless >= 2:
            print("[raynb] no kernel and no run uses the head any more: stopping it", flush=True)
            clear_record(d)
            break
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(os.getpgid(0), signal.SIGTERM)
    # Nothing of a stopped head outlives it (its temp dir goes below), so Ray's graceful exit buys nothing: the
    # dashboard's helpers leave within a few seconds of SIGTERM, but the raylet and the GCS linger past 8 s (measured
    # on 2 cores). A short grace, then SIGKILL: with 2 s of grace `down` took 3.4 s against plain `ray.shutdown()`'s
    # 1.5 s (bench/quickstart_phases.py); with 0.5 s, stopping the head takes 0.7 s instead of 2.5.
    deadline = time.monotonic() + STOP_GRACE_S
    while time.monotonic() < deadline and len(group_members()) > 1:
        time.sleep(0.2)
    # Ray starts some workers in sessions of their own; they all name this head's temp dir.
    kill_all(pids_naming(spec["temp_dir"]))
    shutil.rmtree(spec["temp_dir"], ignore_errors=True)
    print("[raynb] head stopped", flush=True)
    os.killpg(os.getpgid(0), signal.SIGKILL)  # whatever ignored SIGTERM, and this process last
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m raynb._cluster.head_supervisor", description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    sup = sub.add_parser("supervise", help="(internal) run the head and stop it when its owners are gone")
    sup.add_argument("dir", type=Path)
    sub.add_parser("stop", help="stop the embedded head")
    sub.add_parser("status", help="print the embedded head's record")
    args = ap.parse_args(argv)
    if args.cmd == "supervise":
        return _supervise(args.dir)
    if args.cmd == "stop":
        print("stopped" if stop_head() else "no embedded head is running")
        return 0
    head = find_head()
    print(head.to_json() if head else "no embedded head is running")
    return 0


if __name__ == "__main__":
    sys.exit(main())
