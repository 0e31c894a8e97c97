"""A spare's time to live (raynb/_remote/detached.py): claimed in time it stays; not, it leaves once, and a claim
that comes after that is refused."""

from __future__ import annotations

import threading

from raynb._remote.detached import SpareClock


def test_a_spare_claimed_in_time_stays() -> None:
    left = threading.Event()
    clock = SpareClock(0.2, on_expiry=left.set)
    assert clock.claim()
    assert not left.wait(0.5)
    assert clock.claim()  # claimed again (the next run's): still its


def test_a_spare_nobody_claims_leaves_and_refuses_a_late_claim() -> None:
    left = threading.Event()
    clock = SpareClock(0.05, on_expiry=left.set)
    assert left.wait(5)
    assert not clock.claim()
