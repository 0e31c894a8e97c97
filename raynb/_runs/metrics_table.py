"""In the kernel: a run's records as the table ``run.metrics`` returns (pandas, in the kernel)."""

from __future__ import annotations

from typing import Any

FIRST = ["rank", "step", "time", "seconds"]


def metrics_table(records: list[dict[str, Any]], started_at: float | None) -> Any:
    """``records`` as a DataFrame ordered by report time: ``rank``, ``step``, ``time`` (UTC), ``seconds`` since
    ``started_at`` (else the first record), then each reported key. Each step once: the steps a later attempt did
    again from its checkpoint are that attempt's, not the one that did them first."""
    import pandas as pd

    df = pd.DataFrame.from_records(records)
    if "kind" in df:  # a framework's progress samples: in run.progress, not rows of their own
        df = df[df["kind"] != "progress"]
    if df.empty:
        return pd.DataFrame(columns=FIRST)
    if "attempt" in df and df["attempt"].nunique() > 1:
        resumed_at = df.groupby("attempt")["step"].min()  # where each attempt began
        redone_from = {a: resumed_at[resumed_at.index > a].min() for a in resumed_at.index}
        df = df[~(df["step"] >= df["attempt"].map(redone_from))]  # NaN (the last attempt): kept
    df = df.sort_values(["time", "rank"], kind="stable").reset_index(drop=True)
    t0 = started_at if started_at is not None else float(df["time"].min())
    df["seconds"] = df["time"] - t0
    df["time"] = pd.to_datetime(df["time"], unit="s", utc=True)
    return df[FIRST + [c for c in df.columns if c not in FIRST]]
