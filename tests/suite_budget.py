"""The suite's count guard: what each test starts, counted instead of timed.

A sampler thread reads /proc twice a second and keeps every process it sees of four kinds, each by (pid, start time)
so a reused pid is a new process:

- ``cold_groups``: Ray Train runs started cold, one ``ray::TrainController`` process each (a warm group is one too,
  once; its cells are not);
- ``heads``: Ray heads, one ``gcs_server`` each;
- ``kernels``: Jupyter kernels (``ipykernel_launcher``);
- ``client_sessions``: Ray Client sessions, one dedicated server process on the head per connecting kernel or
  Python (``ray.util.client.server … --mode=specific-server``);

plus ``sleep_s``, the seconds of deliberate waits: single ``time.sleep`` calls of a second or more made by test code
in the pytest process (polling loops sleep in short steps and are not counted).

A new process is billed to the test running when it is first seen (a module's kernel or head to the module's first
test). The counts are printed with the slowest tests and written to test-artifacts/test-times.json. When the whole
suite ran, the run fails if a total passes the budget written in tests/BUDGET.md (lines ``budget.<kind> = N``);
``RAYNB_TEST_BUDGET="cold_groups=3,heads=1"`` sets limits for any selection (a test area's own, or to show the guard
failing).
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

KINDS = ("cold_groups", "heads", "kernels", "client_sessions")
DELIBERATE_SLEEP_S = 1.0
BUDGET_MD = Path(__file__).resolve().parent / "BUDGET.md"


def kind_of(cmdline: str) -> str | None:
    """Which counted kind a process is, from its command line (Ray sets an actor's title to ``ray::Class.method``)."""
    if cmdline.startswith("ray::TrainController"):
        return "cold_groups"
    argv0 = cmdline.split(" ", 1)[0]
    if argv0.endswith("/gcs_server") or argv0 == "gcs_server":
        return "heads"
    if "ipykernel_launcher" in cmdline:
        return "kernels"
    if "ray.util.client.server" in cmdline and "--mode=specific-server" in cmdline:
        return "client_sessions"
    return None


def read_budget(text: str) -> dict[str, int]:
    """``budget.cold_groups = 14`` lines (in BUDGET.md) → {"cold_groups": 14}."""
    return {m[1]: int(m[2]) for m in re.finditer(r"^\s*budget\.(\w+)\s*=\s*(\d+)", text, re.MULTILINE)}


def parse_override(spec: str) -> dict[str, int]:
    """``"cold_groups=3,heads=1"`` → {"cold_groups": 3, "heads": 1}."""
    out: dict[str, int] = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        key, _, value = part.partition("=")
        out[key.strip()] = int(value)
    return out


def over_budget(totals: Counter[str], budget: dict[str, int]) -> list[str]:
    return [
        f"{kind}: {totals.get(kind, 0):g} > {limit} allowed"
        for kind, limit in sorted(budget.items())
        if totals.get(kind, 0) > limit
    ]


class Counts:
    """Per-test counts of the processes the suite starts, from a /proc sampler thread, and of deliberate sleeps."""

    def __init__(self, period_s: float = 0.5, classify: Callable[[str], str | None] = kind_of) -> None:
        self.period_s = period_s
        self.classify = classify
        self.per_test: dict[str, Counter[str]] = {}
        self.current = "(before the first test)"
        self._seen: set[tuple[int, str]] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="suite-budget-sampler", daemon=True)
        self._real_sleep = time.sleep
        self._own_files = str(Path(__file__).resolve().parent)

    def start(self) -> None:
        self._seen.update(self._scan())  # what ran before the suite (another user's head) is not the suite's
        self._thread.start()
        time.sleep = self._sleep  # type: ignore[assignment]

    def stop(self) -> None:
        time.sleep = self._real_sleep  # type: ignore[assignment]
        self._stop.set()
        self._thread.join(5)
        self.sample()

    def begin(self, nodeid: str) -> None:
        self.sample()  # what the last test started is the last test's
        self.current = nodeid

    def totals(self) -> Counter[str]:
        out: Counter[str] = Counter()
        for c in self.per_test.values():
            out.update(c)
        return out

    def sample(self) -> None:
        with self._lock:
            for key, kind in self._scan().items():
                if key not in self._seen:
                    self._seen.add(key)
                    self.per_test.setdefault(self.current, Counter())[kind] += 1

    def _scan(self) -> dict[tuple[int, str], str]:
        found: dict[tuple[int, str], str] = {}
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                    cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
                kind = self.classify(cmd)
                if kind is None:
                    continue
                with open(f"/proc/{entry.name}/stat") as f:
                    started = f.read().rsplit(")", 1)[1].split()[19]  # field 22, starttime
            except OSError:
                continue  # gone meanwhile
            found[(int(entry.name), started)] = kind
        return found

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            self.sample()

    def _sleep(self, seconds: float) -> None:
        if seconds >= DELIBERATE_SLEEP_S and threading.current_thread() is threading.main_thread():
            import sys

            caller = sys._getframe(1).f_code.co_filename
            if caller.startswith(self._own_files):
                with self._lock:
                    self.per_test.setdefault(self.current, Counter())["sleep_s"] += seconds
        self._real_sleep(seconds)
