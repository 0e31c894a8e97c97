"""torch.compile's work carried in the run's storage, so a node that starts empty (a new pod, a new cluster) reads
what an earlier run compiled instead of compiling from nothing.

On one node the caches already persist between runs (Inductor's ``/tmp/torchinductor_<user>``, Triton's
``~/.triton``). Across nodes raynb keeps PyTorch's portable cache artifacts (``torch.compiler.save_cache_artifacts``,
everything this process compiled or loaded) in one file per torch version and device, ``.raynb/compile-cache/`` under
the run's storage path: every worker loads it before the function, rank 0 writes it back after a run that compiled
something new. Runs in this process only; nothing here imports torch for the asking.
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["load", "keep", "CACHE_DIR"]

CACHE_DIR = ".raynb/compile-cache"


def _where(storage: Any) -> tuple[Any, Any, str] | None:
    """(torch, filesystem, path) of this torch and device's file in the run's storage; None without either."""
    torch = sys.modules.get("torch")
    if torch is None or storage is None:
        return None
    device = "cpu"
    if torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability()
        device = f"sm{major}{minor}"
    name = f"torch-{torch.__version__}-{device}.bin".replace("+", "_")
    return torch, storage.storage_filesystem, f"{storage.storage_fs_path.rstrip('/')}/{CACHE_DIR}/{name}"


def load(storage: Any) -> dict[str, Any]:
    """Before the function: load the artifacts an earlier run kept in the storage into this node's caches. Returns
    what the rank's ``worker_done`` event says of it: ``compile_cache_loaded`` (how many; 0: none there), or
    ``compile_cache_error`` (a cache is never worth a run: it compiles from nothing)."""
    try:
        import pyarrow.fs

        where = _where(storage)
        if where is None:
            return {"compile_cache_loaded": 0}
        torch, fs, path = where
        if fs.get_file_info(path).type != pyarrow.fs.FileType.File:
            return {"compile_cache_loaded": 0}
        with fs.open_input_stream(path) as f:
            info = torch.compiler.load_cache_artifacts(f.read())
        return {"compile_cache_loaded": sum(len(v) for v in info.artifacts.values()) if info is not None else 0}
    except Exception as e:  # noqa: BLE001
        return {"compile_cache_error": f"{type(e).__name__}: {e}"[:300]}


def keep(storage: Any, counts: dict[str, int], loaded: dict[str, Any]) -> dict[str, Any]:
    """After a run that compiled something new, or found the storage without its graphs (``counts``: the process's
    compile counts; ``loaded``: what :func:`load` said), write everything this process compiled or loaded to the
    storage -- a whole file, moved into place. Returns ``compile_cache_saved`` (how many artifacts), or
    ``compile_cache_error`` (the run succeeded; the next one compiles again), or nothing where nothing was owed."""
    if not (counts.get("compiled") or (counts and not loaded.get("compile_cache_loaded"))):
        return {}
    try:
        where = _where(storage)
        if where is None:
            return {}
        torch, fs, path = where
        got = torch.compiler.save_cache_artifacts()
        if not got:
            return {}
        data, info = got
        fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
        with fs.open_output_stream(f"{path}.part") as f:
            f.write(data)
        fs.move(f"{path}.part", path)
        return {"compile_cache_saved": sum(len(v) for v in info.artifacts.values())}
    except Exception as e:  # noqa: BLE001
        return {"compile_cache_error": f"{type(e).__name__}: {e}"[:300]}
