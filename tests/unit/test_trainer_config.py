"""Ray Train's own objects merged with raynb's defaults: what a run gets, and what is refused as given twice."""

from __future__ import annotations

import pytest
from ray.train import CheckpointConfig, FailureConfig, LoggingConfig, RunConfig, ScalingConfig

from raynb._runs.trainer_config import shape_of, trainer_kwargs
from raynb.errors import UsageError

BASE = {"name": "r", "workers": 2, "gpu": False, "cpus_per_worker": 1.0, "worker_env": {"A": "1"}, "storage_path": None}


def test_defaults_and_max_failures() -> None:
    kw = trainer_kwargs(**BASE)
    rc = kw["run_config"]
    assert rc.name == "r" and rc.failure_config.max_failures == 0  # one lost worker ends the run, as before
    assert rc.worker_runtime_env["env_vars"] == {"A": "1"} and kw["scaling_config"].num_workers == 2
    assert trainer_kwargs(**BASE, max_failures=2)["run_config"].failure_config.max_failures == 2


def test_the_users_objects_win_where_raynb_was_not_told_otherwise() -> None:
    theirs = RunConfig(failure_config=FailureConfig(max_failures=3), worker_runtime_env={"env_vars": {"A": "mine"}})
    rc = trainer_kwargs(**BASE, run_config=theirs)["run_config"]
    assert rc.failure_config.max_failures == 3 and rc.worker_runtime_env["env_vars"] == {"A": "mine"}
    with pytest.raises(UsageError, match=r"max_failures .* given twice: 1 and 3"):
        trainer_kwargs(**BASE, run_config=theirs, max_failures=1)
    ck = CheckpointConfig(num_to_keep=2)
    assert trainer_kwargs(**BASE, checkpoint_config=ck)["run_config"].checkpoint_config == ck


def test_a_shape_given_twice_is_refused_naming_both() -> None:
    sc = ScalingConfig(num_workers=4, use_gpu=False)
    assert shape_of(sc, workers=None, gpu=None, cpus_per_worker=None) == {"workers": 4, "gpu": False}
    with pytest.raises(UsageError, match=r"workers \(raynb\) and ScalingConfig.num_workers is given twice: 2 and 4"):
        shape_of(sc, workers=2, gpu=None, cpus_per_worker=None)


def test_train_logs_at_warning_unless_the_user_chose_a_level() -> None:
    """RunConfig fills in LoggingConfig() (INFO) by itself, so "not given" is that default as much as None: Train's
    INFO narration would otherwise reach the cell (raynb/_cluster/log_filter.py no longer chases its strings)."""
    assert RunConfig().logging_config == LoggingConfig()  # Ray's default, never None
    assert trainer_kwargs(**BASE)["run_config"].logging_config.log_level == "WARNING"
    assert trainer_kwargs(**BASE, run_config=RunConfig())["run_config"].logging_config.log_level == "WARNING"
    mine = RunConfig(logging_config=LoggingConfig(log_level="DEBUG"))
    assert trainer_kwargs(**BASE, run_config=mine)["run_config"].logging_config.log_level == "DEBUG"
