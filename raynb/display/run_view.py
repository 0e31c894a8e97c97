"""In the kernel: render a Run: the HTML dashboard (phase, step, elapsed, loss and throughput charts, NCCL badges,
error) and the one-line text form used in terminals and as ``text/plain``. Reads the run; holds no state of its own."""

from __future__ import annotations

import html
import math
import time
import weakref
from typing import TYPE_CHECKING, Any

from .._shared import series as S
from .._shared.cost import PRICE_BASIS, usd
from .._shared.picture import RANK_LINES, Aggregate
from .._shared.progress import PACE_STEPS, Progress, Stall, progress, stall
from .restart_text import restart_text
from .svg import line_chart

if TYPE_CHECKING:
    from .viewed_run import ViewedRun

__all__ = ["run_html", "run_text", "clock", "aggregate_of", "progress_of", "stall_of"]

_PHASE_COLORS = {
    "starting workers": "#6c757d",
    "running": "#0d6efd",
    "succeeded": "#198754",
    "failed": "#dc3545",
    "aborted": "#fd7e14",
    "pending": "#6c757d",
    "detached": "#6c757d",
}


def clock(seconds: float) -> str:
    """``1:05`` or ``1:02:03``."""
    s = int(seconds)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


def _status_text(run: ViewedRun) -> str:
    phase = run.phase
    if run.attempt > 1:  # Ray Train restarted the workers after a failure (max_failures)
        return f"{phase}, attempt {run.attempt} of {run.spec.max_failures + 1} ({restart_text(run, aggregate_of(run).restarts)})"
    if phase == "aborted":
        at, why = getattr(run, "aborted_at_step", None), getattr(run, "aborted_why", None)
        return f"aborted at step {run.step if at is None else at}" + (f" ({why})" if why else "")
    if phase == "detached":
        return "connection lost: the run goes on on the cluster"
    return phase


def _fmt_num(v: float | None) -> str:
    if v is None:
        return "-"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    return f"{v:.4g}"


#: a finished run's mean throughput needs this many complete steps (a burst of a few back-to-back reports has no time
#: base; the quickstart's 150 steps take ~0.3 s on 2 cores and do)
FINISHED_MIN_STEPS = 10


def _finished(run: ViewedRun) -> bool:
    return run.status in ("succeeded", "failed", "aborted", "detached")


def _summary(run: ViewedRun) -> dict[str, Any]:
    agg = aggregate_of(run)
    mean = agg.metric_mean()
    total = agg.tput_total()
    ranks = max(len(agg.tput_ranks), 1)
    # counts (samples=, tokens=) need a time base, else "–"; rates reported as such (tokens_per_s=): the median of
    # the last 10 complete steps. A finished run too short for the live window says its mean over its last segment.
    rate = agg.counted_rate() if agg.has_counts else S.median(y for _, y in total[-10:])
    run_mean = rate is None and agg.has_counts and _finished(run)
    if run_mean:
        rate = agg.counted_rate(window_s=math.inf, min_span_s=0.0, min_steps=FINISHED_MIN_STEPS)
    return {
        "key": agg.key,
        "agg": agg,
        "mean": mean,
        "last": mean[-1][1] if mean else None,
        "unit": agg.unit,
        "total": total,
        "rate": rate,
        "ranks": ranks,
        "run_mean": run_mean,
        "mfu": agg.mfu(rate),
    }


#: more ranks than this: the GPU strip shows one cell per node
GPU_CELLS = 8


def _gpu_cells(run: ViewedRun, agg: Any) -> list[tuple[str, float, str]]:
    """(label, utilisation %, detail) per rank, or per node beyond GPU_CELLS ranks."""
    gpus = agg.gpu
    if len(gpus) <= GPU_CELLS:
        out = []
        for rank, g in sorted(gpus.items()):
            mem = f"{g['gpu_mem_gb']:.0f}/{g['gpu_mem_total_gb']:.0f} GB" if g.get("gpu_mem_total_gb") else ""
            power = f" · {g['gpu_power_w']:.0f} W" if g.get("gpu_power_w") is not None else ""
            out.append((f"rank {rank}", float(g.get("gpu_util") or 0.0), mem + power))
        return out
    node_of = {e["rank"]: e.get("node", "?") for e in run.events if e.get("kind") == "worker_started"}
    nodes: dict[str, list[float]] = {}
    for rank, g in gpus.items():
        nodes.setdefault(node_of.get(rank, "?"), []).append(float(g.get("gpu_util") or 0.0))
    return [(node, sum(u) / len(u), f"{len(u)} GPUs, min {min(u):.0f}%") for node, u in sorted(nodes.items())]


def _gpu_strip(run: ViewedRun, agg: Any) -> str:
    """A compact strip: each rank's (or node's) GPU utilisation as a bar, memory and power; an idle rank named. On
    GPU workers that cannot read NVML, one line that says so (rather than no strip and no word)."""
    cells = _gpu_cells(run, agg)
    if not cells:
        off = sorted((e["rank"], e["gpu_sampling_off"]) for e in run.events if e.get("gpu_sampling_off"))
        if not off:
            return ""
        ranks = ", ".join(str(r) for r, _ in off)
        return (
            f'<div class="raynb-gpu-sampling-off" style="font-size:12px;margin-top:4px;color:#666">GPU sampling is off on '
            f"rank {html.escape(ranks)}: {html.escape(off[0][1])} (no GPU strip, no MFU)</div>"
        )
    parts = []
    for label, util, detail in cells:
        color = "#198754" if util >= 60 else "#fd7e14" if util >= 30 else "#dc3545"
        parts.append(
            f'<span class="raynb-gpu" data-util="{util:.0f}" title="{html.escape(detail)}" '
            f'style="display:inline-flex;align-items:center;gap:4px;margin-right:10px">{html.escape(label)} '
            f'<span style="display:inline-block;width:40px;height:8px;background:#e9ecef;border-radius:2px">'
            f'<span style="display:block;width:{min(util, 100):.0f}%;height:8px;background:{color};border-radius:2px">'
            f"</span></span><b>{util:.0f}%</b> <span style=\"color:#666\">{html.escape(detail)}</span></span>"
        )
    idle = "".join(
        f'<span class="raynb-gpu-idle" style="color:#dc3545;margin-left:6px">rank {r}: GPU {u:.0f} % — input-bound?'
        "</span>"
        for r, u in agg.idle_gpus()
    )
    return f'<div class="raynb-gpus" style="font-size:12px;margin-top:4px">GPU {"".join(parts)}{idle}</div>'


def _mfu_text(s: dict[str, Any]) -> str | None:
    if s["mfu"] is None:
        return None
    value, name = s["mfu"]
    return f"MFU {value:.1%} of {name} dense bf16"


def _rate_text(s: dict[str, Any]) -> str | None:
    """``12,345 samples/s total (6,172 per rank)``; "–" while there is no time base yet; None without throughput."""
    if not s["unit"]:
        return None
    if s["rate"] is None:
        return f"– {s['unit']}"
    per = f" ({_fmt_num(s['rate'] / s['ranks'])} per rank)" if s["ranks"] > 1 else ""
    mean = ", mean of the run" if s["run_mean"] else ""
    return f"{_fmt_num(s['rate'])} {s['unit']} total{per}{mean}"


def _cost_text(run: ViewedRun) -> str | None:
    """What the cluster's GPU nodes cost over the run's wall time (its price per hour was known at start)."""
    rate = run.spec.usd_per_hour
    if not rate:
        return None
    return f"≈ {usd(rate * run.elapsed / 3600)}{'' if _finished(run) else ' so far'} at {usd(rate)}/h"


def progress_of(run: ViewedRun) -> Progress:
    """How far the run is: its total from ``--steps``, else as it reported it; the time left counts down while it
    runs."""
    return progress(aggregate_of(run), total=run.spec.total_steps, now=None if _finished(run) else time.time())


def stall_of(run: ViewedRun) -> Stall | None:
    """The stall verdict while the run goes on (a finished run, or one between a warm group's cells, is not stuck)."""
    if _finished(run) or run.phase != "running":
        return None
    spec = run.spec
    return stall(aggregate_of(run), time.time(), factor=spec.stall_factor, min_s=spec.stall_min_s)


def _progress_text(run: ViewedRun, p: Progress) -> str | None:
    """``45% of 200 steps, ~1:10 left (≈ $0.12 to finish)``; None without a total."""
    if p.fraction is None or p.total is None:
        return None
    text = f"{p.fraction:.0%} of {p.total:,.0f} steps"
    if p.left_s is not None and p.fraction < 1 and not _finished(run):
        text += f", ~{clock(p.left_s)} left"
        if run.spec.usd_per_hour:
            text += f" (≈ {usd(run.spec.usd_per_hour * p.left_s / 3600)} to finish)"
    return text


def _progress_html(run: ViewedRun, p: Progress) -> str:
    text = _progress_text(run, p)
    if text is None or p.fraction is None:
        return ""
    color = _PHASE_COLORS.get(run.phase, "#0d6efd")
    left = f' data-left-s="{p.left_s:.1f}"' if p.left_s is not None else ""
    return (
        f'<span class="raynb-progress" data-fraction="{p.fraction:.4f}"{left} title="time left: an estimate from the pace of '
        f'the last {PACE_STEPS} steps" style="display:inline-flex;align-items:center;gap:6px">'
        f'<span style="display:inline-block;width:120px;height:8px;background:#e9ecef;border-radius:4px">'
        f'<span style="display:block;width:{p.fraction * 100:.1f}%;height:8px;background:{color};border-radius:4px">'
        f"</span></span>{html.escape(text)}</span>"
    )


def _stall_html(run: ViewedRun, verdict: Stall | None) -> str:
    """The verdict, and what each rank last printed where the run can ask its cluster (``Run.stall``)."""
    if verdict is None:
        return ""
    seen = getattr(run, "stall", None) or {}
    lines = "".join(
        f"<br><code>rank {r}: {html.escape(str(text))}</code>" for r, text in sorted(seen.get("last_lines", {}).items())
    )
    return (
        f'<div class="raynb-stall" data-quiet-s="{verdict.quiet_s:.0f}" style="background:#fff3cd;border-left:4px '
        f'solid #fd7e14;padding:4px 8px;margin-top:4px;font-size:12px"><b>Stalled</b>: {html.escape(verdict.text())}. '
        f"A stuck collective, a data loader, a lost peer? Stop it with the Stop button or <code>%raytrain stop "
        f"{html.escape(run.name)}</code>{lines}</div>"
    )


def _compile_text(run: ViewedRun) -> str | None:
    """``compiled from cache (12 graphs)`` once the ranks have finished: what torch.compile read back from the
    caches (the node's, or the run's storage where the node started empty) and what it compiled from nothing."""
    done = [e for e in run.events if e.get("kind") == "worker_done" and "compiled" in e]
    if not done:
        return None
    fresh, cached = sum(int(e["compiled"]) for e in done), sum(int(e["compiled_from_cache"]) for e in done)
    stored = any(e.get("compile_cache_loaded") for e in done)
    kept = " (kept in the run's storage for new nodes)" if any(e.get("compile_cache_saved") for e in done) else ""
    if not fresh:
        where = ", read from the run's storage" if stored else ""
        return f"compiled from cache ({_graphs(cached)}{where}){kept}"
    return (
        f"compiled {_graphs(fresh)}"
        + (f", {cached} from cache" if cached else "")
        + (kept or " (cached on the node for the next run)")
    )


def _graphs(n: int) -> str:
    return f"{n} graph{'' if n == 1 else 's'}"


def _shape_text(run: ViewedRun) -> str:
    """``4 GPU workers × 15 CPUs``: each worker's CPUs are its threads (Ray sets OMP_NUM_THREADS from them)."""
    n, cpus = run.spec.workers, run.spec.cpus_per_worker
    kind = "GPU" if run.spec.gpu else "CPU"
    return f"{n} {kind} worker{'s' * (n != 1)} × {cpus:g} CPU{'s' * (cpus != 1)}"


def run_text(run: ViewedRun) -> str:
    """``[run] running  step 12  0:34  loss 0.41  1,234 samples/s  2 workers``."""
    s = _summary(run)
    parts = [f"[{run.name}] {_status_text(run)}", f"step {run.step}", clock(run.elapsed)]
    if (done := _progress_text(run, progress_of(run))) is not None:
        parts.append(done)
    if s["key"]:
        parts.append(f"{s['key']} {_fmt_num(s['last'])}")
    if (rate := _rate_text(s)) is not None:
        parts.append(rate)
    if (mfu := _mfu_text(s)) is not None:
        parts.append(mfu)
    if s["agg"].gpu:
        utils = [float(g.get("gpu_util") or 0.0) for g in s["agg"].gpu.values()]
        parts.append(f"GPU {sum(utils) / len(utils):.0f}%")
    parts.append(_shape_text(run))
    if (compiled := _compile_text(run)) is not None:
        parts.append(compiled)
    if (cost := _cost_text(run)) is not None:
        parts.append(cost)
    text = "  ".join(parts)
    if (verdict := stall_of(run)) is not None:
        text += "\nStalled: " + verdict.text()
    if run.error is not None:
        text += "\n" + str(run.error)
    return text


def run_html(run: ViewedRun, *, nccl_html: str = "", show_error: bool = True) -> str:
    """The run as HTML; ``show_error=False`` where the cell raises the same error right below."""
    s = _summary(run)
    finished = _finished(run)
    phase = run.phase
    color = _PHASE_COLORS.get(phase, "#6c757d")
    agg = s["agg"]
    few_ranks = len(agg.metric_ranks) <= RANK_LINES
    vals = agg.metric_series() if few_ranks else {}
    loss_lines = vals if few_ranks and S.differ(vals) else ({"mean over ranks": s["mean"]} if s["mean"] else {})
    raw = agg.tput_series() if len(agg.tput_ranks) <= RANK_LINES else {}
    per_rank = bool(raw) and S.differ(raw, 0.15)
    shown = raw if per_rank else ({"all workers": s["total"]} if s["total"] else {})
    window = S.smoothing_window(max((len(v) for v in shown.values()), default=0))
    tput_lines = {k: S.smooth(v, window) for k, v in shown.items()}
    per_point = agg.steps_per_point
    smoothing = f", rolling mean of {window * per_point} steps" if window * per_point > 1 else ""
    marks = [(x, f"restart {a}") for x, a in agg.restarts]
    charts = ""
    if loss_lines or not finished:  # a finished run shows no "waiting" frames
        charts += line_chart(loss_lines, title=s["key"] or "loss", chart_id="loss", marks=marks)
    if tput_lines or not finished:
        charts += line_chart(
            tput_lines,
            title=("throughput per rank" if per_rank else "throughput, all workers") + smoothing,
            unit=s["unit"],
            chart_id="throughput",
            marks=marks,
            empty_text="report samples= or tokens= to see throughput",
        )
    stats = [
        f"step <b>{run.step}</b>",
        f"elapsed <b>{clock(run.elapsed)}</b>",
        *filter(None, [_progress_html(run, progress_of(run))]),
        f"<b>{run.spec.workers}</b> {_shape_text(run).split(' ', 1)[1]}",
    ]
    if s["key"]:
        stats.append(f"{html.escape(s['key'])} <b>{_fmt_num(s['last'])}</b>")
    if (rate := _rate_text(s)) is not None:
        stats.append(html.escape(rate))
    if (mfu := _mfu_text(s)) is not None:
        stats.append(f'<span class="raynb-mfu">{html.escape(mfu)}</span>')
    if (compiled := _compile_text(run)) is not None:
        stats.append(f'<span class="raynb-compile">{html.escape(compiled)}</span>')
    if (cost := _cost_text(run)) is not None:
        stats.append(
            f'<span class="raynb-cost" title="GPU nodes x wall time, {PRICE_BASIS}">{html.escape(cost)}</span>'
        )
    err = ""
    if run.error is not None and show_error:
        err = (
            f'<pre style="background:#fff5f5;border-left:4px solid #dc3545;padding:6px 8px;margin:6px 0 0;'
            f'white-space:pre-wrap;font-size:12px">{html.escape(str(run.error))}</pre>'
        )
    return (
        f'<div class="raynb-run" data-run="{html.escape(run.name)}" data-status="{run.status}" '
        f'data-phase="{html.escape(phase)}" data-step="{run.step}" data-records="{agg.records}" '
        f'style="font-family:sans-serif;font-size:13px;max-width:900px">'
        f'<div style="display:flex;gap:12px;align-items:center;flex-wrap:wrap;margin-bottom:4px">'
        f'<span class="raynb-phase" style="background:{color};color:white;border-radius:10px;padding:1px 9px">'
        f'{html.escape(_status_text(run))}</span><span style="color:#555">{html.escape(run.name)}</span>'
        + "".join(f"<span>{x}</span>" for x in stats)
        + f"</div>{_stall_html(run, stall_of(run))}"
        f'<div style="display:flex;gap:8px;flex-wrap:wrap">{charts}</div>{_gpu_strip(run, agg)}{nccl_html}'
        f"{err}</div>"
    )


#: One aggregate per run object, dropped with the run (the display keeps a cache, never the run).
_CACHE: weakref.WeakKeyDictionary[Any, Aggregate] = weakref.WeakKeyDictionary()


def aggregate_of(run: ViewedRun) -> Aggregate:
    """The run's picture: the one its sink keeps (``run.picture``), else aggregated here from ``run.records``
    (cached between redraws while the run object lives)."""
    picture = getattr(run, "picture", None)
    if picture is not None:
        return picture
    records = run.records
    try:
        agg = _CACHE.get(run)
    except TypeError:  # not weak-referenceable: aggregate from scratch
        return Aggregate().update(records)
    if agg is None or agg.seen > len(records):
        agg = _CACHE[run] = Aggregate()
    return agg.update(records)
