"""In the kernel: a doctor's checklist as data: each check has a state, what was seen and the fix. Pure."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from .display.tables import STATE_MARK as MARK
from .display.tables import checklist_html

__all__ = ["Check", "Checklist", "CheckState"]

CheckState = Literal["ok", "warn", "fail", "n/a"]


@dataclass
class Check:
    name: str
    state: CheckState
    detail: str
    fix: str = ""


@dataclass
class Checklist:
    checks: list[Check] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c.state != "fail" for c in self.checks)

    def __repr__(self) -> str:
        lines = []
        for c in self.checks:
            lines.append(f"{MARK[c.state]} {c.name}: {c.detail}" + (f"\n    fix: {c.fix}" if c.fix else ""))
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        return checklist_html(self.checks)
