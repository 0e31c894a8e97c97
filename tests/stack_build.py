"""The background build of the test stack (the Kubernetes control plane and the S3 server, from Go modules), started
by `make test` before lint (Makefile: k8s-stack-start): minutes on a cold machine, seconds when cached. The tests that
need it run last, and wait for it here, before their own time limit starts."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

#: the longest a test waits for the build (a cold build on 2 busy cores took 33 min)
WAIT_S = 3600.0


def needs_stack(k8s: bool, s3: bool) -> bool:
    """The Kubernetes tests, and the tests marked ``s3`` (they start the S3 server)."""
    return k8s or s3


def wait_for_build(say: Callable[[str], None], folder: str | None = None) -> str | None:
    """Wait until the background build has ended; its exit status ("0": built), or None where none was started
    (pytest run by hand: the tests find the binaries or skip, as before)."""
    folder = folder or os.environ.get("RAYNB_STACK_BUILD")
    if not folder:
        return None
    rc, log = Path(folder) / "rc", Path(folder) / "log"
    t0 = time.monotonic()
    said = -60.0
    while not rc.exists() and time.monotonic() - t0 < WAIT_S:
        waited = time.monotonic() - t0
        if waited - said >= 60:
            tail = log.read_text(errors="replace").strip().splitlines()[-1:] if log.exists() else []
            say(f"waiting for the test stack's build ({waited:.0f} s so far; {log}){': ' + tail[0] if tail else ''}")
            said = waited
        time.sleep(0.5)
    return rc.read_text().strip() if rc.exists() else "timeout"
