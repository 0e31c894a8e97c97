"""config.py: one place, one order: flag > %config > RAYNB_* env > values file > default."""

from __future__ import annotations

import pytest

from raynb._settings import Settings, resolve
from raynb.errors import UsageError


def test_defaults() -> None:
    s = resolve(env={})
    assert s == Settings()
    assert s.workers == 2 and s.gpu is False and s.nccl == "summary"


def test_precedence_flag_config_env_values() -> None:
    env = {"RAYNB_WORKERS": "5", "RAYNB_CPUS_PER_WORKER": "0.5", "RAYNB_GPU": "yes"}
    s = resolve({"workers": 8}, {"workers": 6, "refresh_hz": 2}, env, {"workers": 4, "storage_path": "s3://b/x"})
    assert s.workers == 8  # flag
    assert s.refresh_hz == 2.0  # %config
    assert s.cpus_per_worker == 0.5 and s.gpu is True  # environment
    assert s.storage_path == "s3://b/x"  # values file


def test_none_means_not_set_here() -> None:
    assert resolve({"workers": None}, {"workers": 3}, {}).workers == 3


def test_bad_values_say_where_they_came_from() -> None:
    with pytest.raises(UsageError, match="environment"):
        resolve(env={"RAYNB_WORKERS": "many"})
    with pytest.raises(UsageError, match="gpu"):
        resolve({"gpu": "perhaps"}, env={})
    with pytest.raises(UsageError, match="nccl"):
        resolve({"nccl": "loud"}, env={})


def test_parse_assignments_for_env_and_set_flags() -> None:
    from raynb._settings import parse_assignments

    assert parse_assignments(["A=1", "B=x=y", "C="], "--env") == {"A": "1", "B": "x=y", "C": ""}
    with pytest.raises(UsageError, match="--set takes KEY=VALUE, not 'oops'"):
        parse_assignments(["oops"], "--set")
    with pytest.raises(UsageError):
        parse_assignments(["=v"], "--env")
