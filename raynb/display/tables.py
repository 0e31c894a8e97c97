"""In the kernel: HTML tables: one builder, used by the cluster status and the doctor's checklist."""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence
from typing import Protocol

__all__ = ["table", "checklist_html", "Cell", "STATE_MARK", "ViewedCheck"]


class ViewedCheck(Protocol):
    """What the doctor's table reads of a check (``_checks.Check``), so ``display/`` never imports the checklist."""

    @property
    def name(self) -> str: ...

    @property
    def state(self) -> str: ...

    @property
    def detail(self) -> str: ...

    @property
    def fix(self) -> str: ...


#: A cell is text (escaped here) or ``(markup, True)`` for HTML built by the caller.
Cell = str | tuple[str, bool]
STATE_MARK = {"ok": "✓", "warn": "!", "fail": "✗", "n/a": "–"}
_STATE_COLOR = {"ok": "#198754", "warn": "#b86e00", "fail": "#dc3545", "n/a": "#888"}


def _cell(c: Cell, tag: str) -> str:
    text = c[0] if isinstance(c, tuple) else html.escape(c)
    return f"<{tag}>{text}</{tag}>"


def table(
    header: Sequence[str],
    rows: Iterable[Sequence[Cell]],
    *,
    cls: str = "",
    row_attrs: Sequence[str] | None = None,
    style: str = "font-size:12px",
) -> str:
    """A small table; ``row_attrs`` adds attributes to each ``<tr>`` (e.g. ``data-state="ok"``)."""
    rows = list(rows)
    attrs = list(row_attrs or [""] * len(rows))
    head = "".join(_cell(h, "th") for h in header)
    body = "".join(
        f"<tr{(' ' + a) if a else ''}>{''.join(_cell(c, 'td') for c in r)}</tr>"
        for r, a in zip(rows, attrs, strict=True)
    )
    klass = f' class="{cls}"' if cls else ""
    return f'<table{klass} style="{style}"><tr>{head}</tr>{body}</table>'


def checklist_html(checks: Sequence[ViewedCheck]) -> str:
    rows = [
        (
            (f'<span style="color:{_STATE_COLOR[c.state]};font-weight:bold">{STATE_MARK[c.state]}</span>', True),
            c.name,
            c.detail,
            c.fix,
        )
        for c in checks
    ]
    return table(
        ["", "check", "seen", "fix"],
        rows,
        cls="raynb-doctor",
        row_attrs=[f'data-state="{c.state}"' for c in checks],
    )
