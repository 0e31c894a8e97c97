"""In the kernel: an interactive plotly figure of a finished (or running) run, for exploring curves after the fact."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._shared import series as S

if TYPE_CHECKING:
    from .viewed_run import ViewedRun

__all__ = ["run_figure"]


def run_figure(run: ViewedRun) -> Any:
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    recs = run.records
    key = S.primary_metric(recs) or "loss"
    unit, tput = S.throughput_series(recs)
    fig = make_subplots(rows=1, cols=2, subplot_titles=(key, f"throughput ({unit})" if unit else "throughput"))
    for label, pts in S.metric_series(recs, key).items():
        fig.add_trace(
            go.Scatter(x=[p[0] for p in pts], y=[p[1] for p in pts], name=f"{key} {label}", mode="lines"), row=1, col=1
        )
    for label, pts in tput.items():
        fig.add_trace(
            go.Scatter(x=[p[0] for p in pts], y=[p[1] for p in pts], name=f"{unit} {label}", mode="lines"), row=1, col=2
        )
    tot = S.total(tput)
    if len(tput) > 1 and tot:
        fig.add_trace(
            go.Scatter(
                x=[p[0] for p in tot], y=[p[1] for p in tot], name="all workers", mode="lines", line={"width": 3}
            ),
            row=1,
            col=2,
        )
    fig.update_xaxes(title_text="step")
    fig.update_layout(title=f"{run.name} ({run.status})", height=380, template="plotly_white")
    return fig
