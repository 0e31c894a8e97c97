"""_shared/outcome.py: how a run ended, declared once; what crosses the seam is its wire form, read back as the type."""

from __future__ import annotations

import inspect
import json
from typing import get_type_hints

import pytest

from raynb._shared import seam
from raynb._shared.outcome import Outcome, RunStatus


def test_an_outcome_crosses_as_plain_data_and_comes_back_the_same() -> None:
    ended = Outcome(RunStatus.FAILED, seconds=3.5, error_type="WorkerGroupError", message="m", failures={1: "E: x"})
    wire = ended.to_wire()
    assert json.loads(json.dumps(wire)) == {**wire, "failures": {"1": "E: x"}}  # JSON's keys are strings ...
    assert Outcome.from_wire(json.loads(json.dumps(wire))) == ended  # ... and come back as ranks
    assert wire == {"status": "failed", "seconds": 3.5, "error_type": "WorkerGroupError", "message": "m",
                    "failures": {1: "E: x"}}  # fmt: skip
    stopped = Outcome(RunStatus.ABORTED, step=0, reason="stalled")
    assert stopped.to_wire() == {"status": "aborted", "step": 0, "reason": "stalled"}  # step 0 is a step


def test_an_older_or_newer_raynbs_outcome_still_reads() -> None:
    """An older registry's entry lacks fields; a newer one may add some: neither breaks the kernel."""
    old = Outcome.from_wire({"status": "succeeded", "seconds": 1.0, "metrics": {"loss": 0.1}, "from_the_future": 1})
    assert old.status is RunStatus.SUCCEEDED and old.metrics == {"loss": 0.1} and old.checkpoint is None
    assert Outcome.from_wire({}).status is RunStatus.FAILED  # no status at all: not a success
    with pytest.raises(ValueError):
        Outcome.from_wire({"status": "exploded"})
    assert [s.is_terminal for s in RunStatus] == [False, True, True, True]


def test_the_seam_carries_the_outcome_as_its_type_not_a_dict() -> None:
    """The Protocol every transport implements (mypy holds both to it) says Outcome where a dict stood."""
    hints = get_type_hints(seam.RunChannel.outcome)
    assert hints["return"] == tuple[Outcome, float | None]
    assert get_type_hints(seam.RunChannel.failed)["outcome"] is Outcome
    assert "dict" not in str(inspect.signature(seam.RunChannel.failed))


def test_the_workers_info_is_one_type_from_kernel_to_worker() -> None:
    """The kernel fills it, the launcher adds the env it started processes ahead for, the worker reads fields, not
    keys with defaults; a newer kernel's extra field does not break an older launcher's read."""
    from dataclasses import replace

    from raynb._shared.worker_info import WorkerInfo

    sent = WorkerInfo(cwd="/nb", expect_efa=True, gdr_expected=None, fast_train_report=False, gpu_sampling=True)
    got = WorkerInfo.from_wire(json.loads(json.dumps({**sent.to_wire(), "from_the_future": 1})))
    assert got == sent and replace(got, started_ahead_env="{}").started_ahead_env == "{}"
    assert WorkerInfo.from_wire({}) == WorkerInfo()  # an older kernel's launch: the defaults
    assert "flush_interval" not in sent.to_wire()  # read by the worker once, sent by nobody: gone
