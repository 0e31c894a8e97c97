"""In the kernel: a training run as the notebook sees it: its spec, status, metrics, NCCL summaries and error.

The run's ``fit()`` happens in a detached launcher actor (``_remote/launcher.py``) listed in the cluster's run registry
(``_remote/registry.py``): the run belongs to the cluster, and this object follows it -- from the kernel that started
it, or from any kernel that attaches later. The kernel only waits -- on an event, so an interrupt lands at once --
and stopping kills the launcher. Starting runs is ``train.py``'s job; finding them again is ``catalog.py``'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import signal
import socket
import threading
import time
from collections.abc import Callable, Generator
from typing import Any, Literal

from .._client import side
from .._client.run_channel import echo_logs
from .._current import active_run, current, ending, set_active, wait_for_ending
from .._settings import Settings
from .._shared.outcome import Outcome, RunStatus
from .._shared.progress import Progress
from .._shared.run_spec import RunSpec
from .._shared.seam import RunChannel
from .._shared.worker_env import launcher_env
from .._shared.worker_info import WorkerInfo
from ..errors import UsageError, up_again
from .early_failure import FAILED_EARLY, WIND_DOWN_S, EarlyFailure
from .journal import remember
from .metrics_table import metrics_table
from .run_error import RunError, assemble_error, nccl_hint, raise_unless_succeeded
from .stream import UNDRAWN_GAP_S, MetricStream

__all__ = ["Run", "RunSpec", "KernelStatus", "active_run", "set_active", "TERMINAL"]

_RERUN = "run its cell (or raynb.train(fn, ...)) again in this kernel: that run can be rerun"
#: the run as this kernel sees it: the registry's ``RunStatus`` and the kernel's own pending, starting and detached
KernelStatus = Literal["pending", "starting", "running", "succeeded", "failed", "aborted", "detached"]
#: the kernel follows the run no more: it ended, or ("detached") the connection was lost while it goes on
TERMINAL: tuple[KernelStatus, ...] = ("succeeded", "failed", "aborted", "detached")


class Run:
    """One training run. ``status`` is pending -> starting -> running -> succeeded | failed | aborted."""

    def __init__(self, spec: RunSpec, settings: Settings) -> None:
        self.spec, self.settings = spec, settings
        self.name = spec.name
        self.status: KernelStatus = "pending"
        self.error: RunError | None = None
        self.result: dict[str, Any] | None = None
        self.started_at: float | None = None
        self.first_step_at: float | None = None
        self.ended_at: float | None = None
        self.stream: MetricStream | None = None
        self._channel: RunChannel | None = None  # the run on the cluster: its registry entry, launcher and sink
        self._done = threading.Event()  # the run ended on the cluster (or the kernel lost it)
        self._ended = threading.Event()  # ... and this object has its final state
        self._lost_connection = False
        self.aborted_at_step: int | None = None
        self.aborted_why: str | None = None  # the cluster stopped it (``on_stall="stop"``): why
        self._stall_seen: tuple[float, dict[str, Any] | None] = (-1e9, None)  # when the cluster was last asked
        self._fit_outcome: Outcome | None = None
        self._fit_exc: BaseException | None = None
        self._early = EarlyFailure(spec.max_failures)  # a worker raised with no restart left: failed already
        #: read every record into this kernel when the run ends (a run started here); an attached run's records
        #: stay on the cluster until asked for (``run.metrics``)
        self._keep_records = True
        #: a thread of this kernel follows the run while cells go on (a background run, or one the user detached)
        self._in_background = False
        #: starts the same function again with changes (set by whoever started this run: ``_runs/train.py``)
        self._rerun: Callable[..., Run] | None = None
        self._on_end: list[Callable[[], None]] = []

    # --- what a user reads ------------------------------------------------------------------------------------
    @property
    def records(self) -> list[dict[str, Any]]:
        return self.stream.records if self.stream else []

    @property
    def events(self) -> list[dict[str, Any]]:
        return self.stream.events if self.stream else []

    @property
    def picture(self) -> Any:
        """The run's charts as its sink aggregates them (``_shared.picture.Aggregate``), or None before one."""
        return self.stream.picture if self.stream else None

    @property
    def _summary(self) -> dict[str, Any]:
        return self.stream.summary if self.stream else {}

    @property
    def metrics(self) -> Any:
        """Every reported record as a pandas DataFrame: ``rank``, ``step``, ``time`` (when it was reported, a UTC
        timestamp), ``seconds`` (since the run started) and each reported key. Each step once: where Ray Train
        started the workers again (``max_failures``), the steps the next attempt did again from its checkpoint are
        that attempt's (the ``attempt`` column says which; ``run.records`` keeps every record)."""
        return metrics_table(self.records, self.started_at)

    @property
    def nccl(self) -> dict[int, dict[str, Any]]:
        """The latest NCCL transport summary of each rank (GPU runs; see raynb.nccl for the fields)."""
        out: dict[int, dict[str, Any]] = {}
        for e in self.events:
            if e.get("kind") == "nccl":
                out[e["rank"]] = {**e["summary"], "node": e.get("node"), "log": e.get("log")}
        return out

    @property
    def attempt(self) -> int:
        """1 for the first try; each restart after a worker failure (``max_failures``) counts one more."""
        return int(self._summary.get("attempt", 1))

    @property
    def step(self) -> int:
        return int(self._summary.get("step", 0))

    @property
    def progress(self) -> Progress:
        """How far the run is (``done``, ``total``, ``fraction``, ``steps_per_s``, ``left_s``: an estimate; ``.as_dict()``)."""
        from ..display.run_view import progress_of

        return progress_of(self)

    @property
    def stall(self) -> dict[str, Any] | None:
        """Why the run looks stuck -- ``text``, ``quiet_s``, each rank's last report and ``last_lines`` (what it last
        printed), as the cluster sees it now (asked at most every 5 s) -- or None while it moves, or once it ended."""
        from ..display.run_view import stall_of

        if self._channel is None or stall_of(self) is None:
            return None
        at, found = self._stall_seen
        if time.monotonic() - at > 5.0:
            spec = self.spec
            with contextlib.suppress(Exception):  # the cluster does not answer now: what it said last
                found = self._channel.watch(spec.total_steps, spec.stall_factor, spec.stall_min_s)["stall"]
            self._stall_seen = (time.monotonic(), found)
        return found

    def rate(self, key: str = "tokens", *, skip_steps: int | None = None) -> float:
        """Steady-state throughput of a reported count (``tokens``, ``samples``): the sum over ranks per second of
        wall time, after the first ``skip_steps`` steps (default: a tenth of the run) — compile, warm-up and
        start-up excluded, unlike ``total / elapsed``."""
        from .._shared.series import steady_rate

        return steady_rate(self.records, key, skip_steps)

    @property
    def elapsed(self) -> float:
        if self.started_at is None:
            return 0.0
        return (self.ended_at or time.time()) - self.started_at

    @property
    def phase(self) -> str:
        """A human phase: starting workers, running, or the final status."""
        if self.status in TERMINAL:
            return self.status
        if self._summary.get("records") or self.status == "running":
            return "running"
        return "starting workers"

    def done(self) -> bool:
        """True once the run has ended (or this kernel lost it: status ``detached``)."""
        return self._ended.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the run ends; True if it has, False if ``timeout`` seconds passed first. An interrupt stops
        only the waiting: a background run goes on (``run.stop()`` stops it)."""
        return self._ended.wait(timeout)

    def stop(self) -> None:
        """Stop the run on the cluster (its workers with it), from any kernel."""
        if self.status in TERMINAL:
            return
        self.abort()

    def __await__(self) -> Generator[Any, None, Run]:
        """``await run`` in async code: waits in a thread, so the event loop goes on."""

        async def ended() -> Run:
            await asyncio.get_running_loop().run_in_executor(None, self._ended.wait)
            return self

        return ended().__await__()

    def raise_for_status(self) -> Run:
        """Raise :class:`TrainingFailedError` / :class:`RunAborted` unless the run succeeded."""
        cl = current()
        raise_unless_succeeded(self, up_again(cl.kind if cl else None, cl.name if cl else None))
        return self

    def __repr__(self) -> str:
        return f"<raynb.Run {self.name!r} {self.status} step={self.step} workers={self.spec.workers}>"

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        from ..display import render_bundle

        return render_bundle(self)

    def rerun(
        self,
        *,
        env: dict[str, str] | None = None,
        name: str | None = None,
        config: dict[str, Any] | None = None,
        workers: int | None = None,
        display: bool | str | None = None,
    ) -> Run:
        """Run the same function again, changing only what is given (e.g. ``env=TCP_ENV`` to force sockets)."""
        if self._rerun is None:
            raise UsageError(f"Run {self.name!r} was attached here; its own kernel can rerun it.", fix=_RERUN)
        return self._rerun(env=env, name=name, config=config, workers=workers, display=display)

    def figure(self) -> Any:
        """An interactive plotly figure of loss and throughput (for exploring after the run)."""
        from ..display.plotly_figure import run_figure

        return run_figure(self)

    # --- lifecycle ----------------------------------------------------------------------------------------------
    def _start(self, payload: bytes) -> None:
        wait_for_ending()  # a run just shown failed leaves its launcher to this one in a moment
        self.started_at = time.time()
        self.status = "starting"
        user = f"{getpass.getuser()}@{socket.gethostname()}"
        info = {"spec": self.spec.summary(), "user": user, "sink_stays_s": self.settings.ended_sink_s}
        self._channel = side().start_run(self.name, info)
        remember(self.name, self.started_at, self.spec.storage_path)
        spec = {
            "name": self.name,
            "leases_dir": self.spec.leases_dir,
            "idle_after_s": self.settings.local_idle_after_run_s,
            "trainer_kwargs": self.spec.trainer_kwargs,
            "env": launcher_env(self.settings.health_check_interval_s),
            "worker_info": WorkerInfo.for_run(self.spec, self.settings).to_wire(),
        }
        self._channel.launch(payload, self.spec.config, spec)
        self.stream = MetricStream(self._channel, min_gap=self.settings.poll_gap_s, undrawn_gap=UNDRAWN_GAP_S).start()
        threading.Thread(target=self._watch_fit, name="raynb-fit-watch", daemon=True).start()
        if not side().streams_worker_output:  # Ray streams what workers print to a driver; through Ray Jobs raynb does
            echo = threading.Thread(target=echo_logs, args=(self._channel, self._done.is_set), name="raynb-echo")
            echo.daemon = True
            echo.start()

    @classmethod
    def _attached(cls, info: dict[str, Any], channel: RunChannel, settings: Settings) -> Run:
        """Follow a run found in the cluster's registry: its history replays from the first record, then live."""
        run = cls(RunSpec(**info["spec"]), settings)
        run.started_at, run.status = info["started"], "running"
        run._channel, run._keep_records = channel, False
        run.stream = MetricStream(channel, min_gap=settings.poll_gap_s, undrawn_gap=UNDRAWN_GAP_S).start()
        threading.Thread(target=run._watch_fit, name="raynb-fit-watch", daemon=True).start()
        return run

    def _watch_fit(self) -> None:
        assert self._channel is not None
        try:
            self._fit_outcome, ended = self._channel.outcome()
            self.ended_at = ended or self.ended_at
        except BaseException as e:  # noqa: BLE001 - launcher killed (stopped, lost) or the client went away
            self._fit_exc = e
            try:
                found = self._channel.entry(timeout=10)
            except BaseException:  # noqa: BLE001 - the cluster does not answer: the run may well go on
                self._lost_connection = True
            else:
                if found is not None and found["status"] == "aborted":  # stopped (here or from another kernel)
                    self._fit_outcome = Outcome.from_wire(found.get("outcome") or {"status": "aborted"})
        finally:
            self._done.set()

    def _wait(
        self,
        on_tick: Callable[[], None] | None = None,
        *,
        stop_on_interrupt: bool = True,
        until: Callable[[], bool] | None = None,
    ) -> bool:
        """Wait for the end, redrawing at most ``refresh_hz`` times a second; an interrupt aborts the run (or, with
        ``stop_on_interrupt=False``, ends only the waiting: a run this kernel attached to goes on). Returns False,
        the run going on, when ``until()`` says to stop waiting (Detach)."""
        period = self.settings.poll_gap_s
        previous = signal.getsignal(signal.SIGINT)
        in_main = threading.current_thread() is threading.main_thread()
        if in_main and previous is not signal.default_int_handler:
            signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            while not self._done.wait(period) and not self._early.due(self.events):
                self._note_progress()
                if on_tick:
                    on_tick()
                if until is not None and until():
                    return False
            self._finish()
        except KeyboardInterrupt:
            if stop_on_interrupt:
                self.abort()
        finally:
            if in_main and previous is not signal.default_int_handler:
                signal.signal(signal.SIGINT, previous)
            if on_tick:
                on_tick()
            if active_run() is self:
                set_active(None)
        return True

    def _note_progress(self) -> None:
        if (
            self.status == "starting"
            and self.stream
            and (self._summary.get("records") or any(e.get("kind") == "worker_started" for e in self.stream.events))
        ):
            self.status = "running"
        if self.first_step_at is None and self._summary.get("records"):
            self.first_step_at = time.time()

    def _finish(self) -> None:
        early = not self._done.is_set()  # a worker failed with no restart left: Ray Train still winds the run down
        if not early:
            self._drain()
        self._note_progress()
        self.ended_at = self.ended_at or time.time()
        out = FAILED_EARLY if early else self._fit_outcome
        if self._lost_connection:
            self.status = "detached"
        elif out is not None and out.status is RunStatus.ABORTED:  # stopped from another kernel
            self.status = "aborted"
            self.aborted_at_step, self.aborted_why = self.step, out.reason
        elif out is None or out.status is RunStatus.FAILED:
            self.status = "failed"
            self.error = assemble_error(
                out,
                self.events,
                self.spec.workers,
                cell_file=self.spec.cell_file,
                cell_source=self.spec.cell_source,
                nccl=nccl_hint(self.nccl),
                lost=self._fit_exc,
            )
        else:
            self.status = "succeeded"
        self.result = out.to_wire() if out is not None else None
        # The sink keeps the history; the launcher serves this kernel's next run. An early failure is in the registry
        if early:  # now (every kernel, ls, down); its last records, outcome and launcher follow when fit() returns
            assert self._channel is not None  # a run with events was started
            with contextlib.suppress(Exception):
                self._channel.failed(FAILED_EARLY)
            ending(threading.Thread(target=self._wind_down, name="raynb-wind-down", daemon=True))
        else:
            self._prewarm()
        self._mark_ended()

    def _drain(self) -> None:
        if self.stream:
            self.stream.stop(final_drain=not self._lost_connection, keep_records=self._keep_records)

    def _wind_down(self) -> None:
        """After an early failure, once ``fit()`` returns: the last records, its outcome, its launcher to the next."""
        self._done.wait(WIND_DOWN_S)
        self._drain()
        self.result = self._fit_outcome.to_wire() if self._fit_outcome is not None else self.result
        self._prewarm()

    def abort(self, timeout: float = 5.0) -> None:
        """Stop the run now: the registry kills the launcher, which takes the Train controller and workers with it."""
        if self.status in TERMINAL:
            return
        step = self.step
        if self._channel is not None:
            self._channel.stop(step)
        self._done.wait(timeout)
        self._drain()
        self.ended_at = time.time()
        self.status = "aborted"
        self.aborted_at_step = max(step, self.step)
        self._prewarm()
        self._mark_ended()

    def _prewarm(self) -> None:
        """A warm launcher for the next cell: a run that ended by itself leaves its own (one this kernel started: else
        it is unknown). Never raises: a cluster that does not answer now (an agent being started again) must not
        leave ``wait()`` waiting forever."""
        with contextlib.suppress(Exception):  # the next run starts its own launcher then
            after = self.name if self.status in ("succeeded", "failed") and self._done.is_set() else None
            side().prewarm(after=after)

    def _mark_ended(self) -> None:
        """The final state is in: what follows the run (a background view) draws its last picture, then wait() returns."""
        hooks, self._on_end = self._on_end, []
        for hook in hooks:
            with contextlib.suppress(Exception):  # a view that cannot draw must not keep wait() from returning
                hook()
        self._ended.set()
