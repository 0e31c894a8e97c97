"""In the kernel: the runs on the connected cluster, from any kernel: list, attach, stop, remove (``raynb.runs()``,
``raynb.attach(name)``, ``raynb.stop_run(name)``, ``raynb.remove_run(name)``, ``raynb.run_logs(name)``; ``%raytrain
ls|attach|stop|rm|logs``). The runs themselves live in the cluster's registry (``_remote/registry.py``)."""

from __future__ import annotations

import datetime as _dt
import time
from dataclasses import dataclass
from typing import Any

from .._client import side
from .._current import resolve_settings
from .._shared.picture import log_line
from .._shared.seam import ACTIVE, RunChannel
from ..display.tables import table
from ..errors import UsageError, not_connected
from .journal import recall, remember
from .run import Run
from .storage import run_dir

__all__ = ["runs", "attach", "stop_run", "remove_run", "run_logs", "active_runs", "RunList"]

_COLUMNS = ("name", "status", "step", "workers", "started", "last report", "started by")


def _connected() -> None:
    if not side().connected():
        raise not_connected()


def _found(name: str) -> tuple[dict[str, Any], RunChannel]:
    """The registry's entry for run ``name`` and a channel to it; the error a person reads when there is none."""
    _connected()
    found = side().find_run(name)
    if found is None:
        raise _unknown(name)
    return found


def _span(seconds: float) -> str:
    s = max(0, int(seconds))
    return f"{s} s" if s < 120 else f"{s // 60} min" if s < 7200 else f"{s // 3600} h"


def _ago(t: float | None, now: float) -> str:
    return f"{_span(now - t)} ago" if t else "-"


def _status(row: dict[str, Any]) -> str:
    """``running``, ``running, STALLED for 6 min`` (no new step for that long), ``aborted (stalled, stopped by
    raynb)``."""
    if row.get("stall"):
        return f"{row['status']}, STALLED for {_span(row['stall']['quiet_s'])}"
    return f"{row['status']} ({row['why'].split(':')[0]})" if row.get("why") else row["status"]


def _step(row: dict[str, Any]) -> str:
    """``120``, or ``120 of 200 (60%)`` where the run's total is known."""
    step, done = str(row.get("step", 0)), row.get("progress") or {}
    return f"{step} of {done['total']:,.0f} ({done['fraction']:.0%})" if done.get("total") else step


@dataclass
class RunList:
    """The runs on the cluster, newest first; a table in notebooks and terminals, rows in ``.rows``."""

    rows: list[dict[str, Any]]

    def _cells(self) -> list[tuple[str, ...]]:
        now = time.time()
        return [
            (
                r["name"],
                _status(r),
                _step(r),
                f"{r['spec']['workers']}{' GPU' if r['spec']['gpu'] else ''}",
                _dt.datetime.fromtimestamp(r["started"]).strftime("%Y-%m-%d %H:%M:%S"),
                _ago(r.get("last_report"), now),
                r.get("user", "?"),
            )
            for r in self.rows
        ]

    def __repr__(self) -> str:
        if not self.rows:
            return "no runs on this cluster: a %%raytrain cell (or raynb.train) starts one"
        cells = self._cells()
        widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(_COLUMNS)]
        line = "  ".join(f"{{:<{w}}}" for w in widths)
        out = [line.format(*(c.upper() for c in _COLUMNS))] + [line.format(*row) for row in cells]
        return "\n".join(s.rstrip() for s in out)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        if not self.rows:
            return {"text/plain": repr(self)}
        return {"text/plain": repr(self), "text/html": table(list(_COLUMNS), self._cells(), cls="raynb-runs")}

    def __len__(self) -> int:
        return len(self.rows)

    def names(self) -> list[str]:
        return [r["name"] for r in self.rows]


def runs() -> RunList:
    """The runs on the connected cluster: running ones and finished ones not yet removed, newest first."""
    _connected()
    return RunList(sorted(side().list_runs(), key=lambda r: -r["started"]))


def active_runs() -> list[str]:
    """Names of the runs going on on the connected cluster (none when not connected)."""
    return side().active_runs() if side().connected() else []


def _unknown(name: str) -> UsageError:
    """No such run here: gone with the head (this machine saw it start before the head's run list did), or never
    here (a misspelt name, another cluster)."""
    known = runs().names()
    saw = "runs here: " + (", ".join(known) if known else "none")
    seen = recall(name)
    head_since = side().head_started_at()
    if seen is not None and head_since is not None and seen["started"] < head_since:
        where = run_dir(seen["storage_path"] or "~/ray_results on the head (Ray default)", name)
        return UsageError(
            f"The run {name!r} is gone with this cluster's head: the head started again at {_hm(head_since)}, after "
            f"the run started at {_hm(seen['started'])} (on Kubernetes: its head pod was replaced). The run list "
            "and the run's driver lived on the head.",
            saw=saw,
            fix=f"checkpoints it saved are under {where}: run the cell again with `--name {name}` (the same "
            "storage path) and it resumes from the newest one through ray.train.get_checkpoint()",
        )
    fix = "`%raytrain ls` lists them; runs live on the cluster they were started on (connect to that one)."
    if not known:  # nothing at all: the head may be new since the run started
        where = resolve_settings().storage_path or "Ray's default, ~/ray_results on the head"
        fix += (
            " If this cluster's head restarted since the run started (on Kubernetes: its head pod was replaced), "
            f"the run ended with it -- the run list lives on the head. Checkpoints it saved are under {where}."
        )
    return UsageError(f"No run named {name!r} on this cluster.", saw=saw, fix=fix)


def _hm(t: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t))


def attach(name: str, *, display: bool | str | None = None, wait: bool = False) -> Run:
    """Follow a run on the connected cluster from this kernel: its whole curve so far, then live. Returns at once
    (the view goes on updating; ``run.wait()`` blocks) unless ``wait``; a finished run shows its final picture. An
    interrupt while waiting ends the waiting, not the run (``run.stop()`` stops it)."""

    from .train import follow

    info, channel = _found(name)
    remember(name, info["started"], info["spec"].get("storage_path"))
    run = Run._attached(info, channel, resolve_settings())
    going = info["status"] in ACTIVE
    here = wait or not going  # a finished run: its final picture, at once
    view = follow(run, display, run.settings.refresh_hz, wait=here, stop_on_interrupt=False, controls_shown=going)
    if here and view is not None and not run._in_background:  # not when the user clicked Detach
        view.finish()
    return run


def stop_run(name: str) -> str:
    """Stop a running run on the connected cluster (its workers with it), from any kernel."""
    info, channel = _found(name)
    if info["status"] not in ACTIVE:
        raise UsageError(
            f"Run {name!r} has already ended ({info['status']}); there is nothing to stop.",
            fix=f"`raynb.attach({name!r})` shows how it ended; `%raytrain rm {name}` removes it.",
        )
    channel.stop()
    return f"stopped run {name}"


def remove_run(name: str) -> str:
    """Remove a finished run from the cluster: its entry and its metrics history."""
    _connected()
    info = side().remove_run(name)
    if info is None:
        raise _unknown(name)
    if info["status"] in ACTIVE:
        raise UsageError(f"Run {name!r} is still running.", fix=f"stop it first: `%raytrain stop {name}`")
    return f"removed run {name}"


def run_logs(
    name: str, *, rank: int | None = None, tail: int | None = 200, follow: bool = False, out: Any = print
) -> str:
    """What the run's workers printed (stdout and stderr of the cell, every rank or ``rank``): the last ``tail``
    lines (None: all kept -- the newest 100,000 lines of a run), as text. ``follow``: print them with ``out`` as
    they come until the run ends (an interrupt stops following, not the run); returns "" then."""
    info, channel = _found(name)
    if rank is not None and not 0 <= rank < info["spec"]["workers"]:
        raise UsageError(
            f"Run {name!r} has ranks 0..{info['spec']['workers'] - 1}; there is no rank {rank}.",
            fix="leave out --rank for every rank",
        )
    seq, lines, dropped = channel.logs(0, rank, tail)
    text = [log_line(x, rank is None) for x in lines]
    if dropped and (tail is None or len(lines) < tail) and lines and lines[0]["seq"] <= dropped + 1:
        text.insert(0, f"(the {dropped:,} oldest lines are no longer kept)")
    if not follow:
        if not text:
            what = f"rank {rank} of run {name!r}" if rank is not None else f"run {name!r}"
            return f"{what} has printed nothing yet ({info['status']})"
        return "\n".join(text)
    for line in text:
        out(line)
    try:
        while True:
            seq, lines, _ = channel.logs(seq, rank, None, timeout=1.0)
            for x in lines:
                out(log_line(x, rank is None))
            if not lines and (now := channel.entry()) is not None and now["status"] not in ACTIVE:
                seq, lines, _ = channel.logs(seq, rank, None, timeout=0.0)
                for x in lines:
                    out(log_line(x, rank is None))
                out(f"(run {name} {now['status']})")
                return ""
    except KeyboardInterrupt:
        return ""
