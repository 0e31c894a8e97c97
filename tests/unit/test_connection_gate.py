"""The gate every Ray call of the kernel's side goes through (``_client/handles.py``): a kernel that is a Ray driver
is ended by Ray when a call is in flight as the connection shuts down, so closing waits for those in flight and
refuses new ones; the next connection opens it again."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from raynb._client import handles
from raynb.errors import NotConnectedError


@pytest.fixture(autouse=True)
def _open_gate() -> Iterator[None]:
    handles.new_connection()
    yield
    handles.new_connection()


@handles.calls_ray
def _call(hold: threading.Event, inside: threading.Event) -> str:
    inside.set()
    hold.wait(10)
    return "answered"


def test_close_waits_for_the_call_in_flight_and_refuses_the_next() -> None:
    hold, inside, got = threading.Event(), threading.Event(), []
    t = threading.Thread(target=lambda: got.append(_call(hold, inside)))
    t.start()
    assert inside.wait(5)
    closing: list[bool] = []
    closer = threading.Thread(target=lambda: closing.append(handles.close(timeout=10)))
    closer.start()
    time.sleep(0.2)
    assert closer.is_alive(), "close must wait while a call is in flight"
    with pytest.raises(NotConnectedError, match="disconnected"):  # a call after close began: refused at once
        _call(threading.Event(), threading.Event())
    hold.set()
    closer.join(5)
    t.join(5)
    assert closing == [True] and got == ["answered"]  # the call in flight finished; then close returned


def test_close_gives_up_after_its_timeout_and_a_new_connection_opens_the_gate() -> None:
    hold, inside = threading.Event(), threading.Event()
    t = threading.Thread(target=_call, args=(hold, inside), daemon=True)
    t.start()
    assert inside.wait(5)
    t0 = time.monotonic()
    assert handles.close(timeout=0.3) is False
    assert 0.25 < time.monotonic() - t0 < 5
    hold.set()
    t.join(5)
    handles.new_connection()
    done = threading.Event()
    done.set()
    assert _call(done, threading.Event()) == "answered"
