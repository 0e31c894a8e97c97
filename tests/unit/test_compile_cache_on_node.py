"""The run's compile-cache file and the node's caches (raynb/_remote/compile_cache.py): a node whose caches hold
that version of the file does not read it again, and does not write it back for nothing. Real files through
pyarrow's local filesystem, as Ray Train's storage context hands them; no compile (the device records show the
seconds: first_step-h100-2026-12-06i and l)."""

from __future__ import annotations

import types
from pathlib import Path

import pyarrow.fs
import pytest
import torch  # noqa: F401 - compile_cache acts only in a process that has torch, as a Train worker does

from raynb._remote import compile_cache


@pytest.fixture
def storage(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> types.SimpleNamespace:
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "node-cache"))
    return types.SimpleNamespace(
        storage_filesystem=pyarrow.fs.LocalFileSystem(), storage_fs_path=str(tmp_path / "runs")
    )


def _file(storage: types.SimpleNamespace) -> Path:
    where = compile_cache._where(storage)
    assert where is not None
    return Path(where[2])


def test_a_node_holding_the_files_version_skips_it_and_a_new_version_is_read(storage) -> None:
    assert compile_cache.load(storage) == {"compile_cache_loaded": 0}  # nothing kept yet
    kept = _file(storage)
    kept.parent.mkdir(parents=True)
    kept.write_bytes(b"artifacts of an earlier run")
    fs, path = storage.storage_filesystem, str(kept)
    compile_cache._remember(compile_cache._version(fs, path))  # as after this node loaded or saved it
    assert compile_cache.load(storage) == {"compile_cache_loaded": 0, "compile_cache_on_node": 1}
    assert (Path(storage.storage_fs_path).parent / "node-cache" / compile_cache._ON_NODE).is_file()
    # what the node holds, it does not write back: nothing compiled, all from its own cache
    assert compile_cache.keep(storage, {"compiled": 0, "compiled_from_cache": 2}, {"compile_cache_on_node": 1}) == {}
    kept.write_bytes(b"artifacts of a later run, from another node")  # a new version: read again
    # read (torch finds no artifacts in these bytes, so nothing is loaded, and it compiles), then remembered
    assert compile_cache.load(storage) == {"compile_cache_loaded": 0}
    assert compile_cache.load(storage) == {"compile_cache_loaded": 0, "compile_cache_on_node": 1}
