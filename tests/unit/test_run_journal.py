"""The machine's memory of runs it saw, which tells a run gone with its head from a misspelt name."""

from __future__ import annotations

from pathlib import Path

import pytest

from raynb._runs import journal


def test_the_newest_entry_wins_and_the_file_stays_small(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAYNB_HOME", str(tmp_path))
    assert journal.recall("r") is None  # nothing written yet
    for i in range(2 * journal.KEEP + 1):
        journal.remember(f"run-{i % 7}", started=float(i), storage_path=None)
    journal.remember("r", started=1.0, storage_path="s3://a")
    journal.remember("r", started=2.0, storage_path="s3://b")
    assert journal.recall("r") == {"cluster": "?", "name": "r", "started": 2.0, "storage_path": "s3://b"}
    assert len((tmp_path / "runs-seen.jsonl").read_text().splitlines()) <= 2 * journal.KEEP


def test_an_unwritable_home_is_not_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("RAYNB_HOME", str(tmp_path / "file"))  # a file where the folder should be
    journal.remember("r", started=1.0, storage_path=None)
    assert journal.recall("r") is None
