"""raynb's ray.train.report takes exactly what Ray's takes: a Ray upgrade that changes the signature fails here."""

from __future__ import annotations

import inspect

import pytest
import ray.train

from raynb._remote.report import Reporter
from raynb._remote.worker import _patch_train_report


@pytest.fixture
def patched():
    rep = Reporter(sink=None, rank=0, flush_interval=3600)  # its flusher never fires here
    original = ray.train.report
    restore = _patch_train_report(rep)
    try:
        yield rep, original
    finally:
        restore()
        rep._stop.set()
    assert ray.train.report is original


def test_signature_is_rays(patched) -> None:
    _rep, original = patched
    assert inspect.signature(ray.train.report) == inspect.signature(original)
    assert ray.train.report.__name__ == "report" and ray.train.report.__doc__ == original.__doc__
    assert list(inspect.signature(original).parameters)[:3] == ["metrics", "checkpoint", "checkpoint_dir_name"]


def test_metrics_by_position_or_keyword_take_the_fast_path(patched) -> None:
    rep, _ = patched
    ray.train.report({"loss": 1.0})
    ray.train.report(metrics={"loss": 0.5})  # how Ray's own callbacks call it
    assert [r["loss"] for r in rep._take()] == [1.0, 0.5]


def test_calls_ray_would_refuse_are_refused(patched) -> None:
    rep, _ = patched
    with pytest.raises(TypeError):
        ray.train.report()  # no metrics
    with pytest.raises(TypeError):
        ray.train.report({"loss": 1.0}, no_such_parameter=1)
    assert rep._take() == []
