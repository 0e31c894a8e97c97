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

__all__ = ["load", "save", "CACHE_DIR"]

CACHE_DIR = ".raynb/compile-cache"


def _torch() -> Any | None:
    return sys.modules.get("torch")


def _where(storage: Any) -> tuple[Any, str] | None:
    """(filesystem, path) of this torch and device's file in the run's storage; None without torch or storage."""
    torch = _torch()
    if torch is None or storage is None:
        return None
    device = "cpu"
    if torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability()
        device = f"sm{major}{minor}"
    name = f"torch-{torch.__version__}-{device}.bin".replace("+", "_")
    return storage.storage_filesystem, f"{storage.storage_fs_path.rstrip('/')}/{CACHE_DIR}/{name}"


def load(storage: Any) -> int:
    """Load the artifacts an earlier run kept in the storage into this node's caches; how many (0: none there)."""
    import pyarrow.fs

    where = _where(storage)
    if where is None:
        return 0
    fs, path = where
    if fs.get_file_info(path).type != pyarrow.fs.FileType.File:
        return 0
    with fs.open_input_stream(path) as f:
        data = f.read()
    info = sys.modules["torch"].compiler.load_cache_artifacts(data)
    return sum(len(v) for v in info.artifacts.values()) if info is not None else 0


def save(storage: Any) -> int:
    """Write what this process compiled or loaded to the storage (a whole file, moved into place); how many
    artifacts (0: nothing compiled, nothing written)."""
    torch = _torch()
    where = _where(storage)
    if torch is None or where is None:
        return 0
    got = torch.compiler.save_cache_artifacts()
    if not got:
        return 0
    data, info = got
    fs, path = where
    fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
    part = f"{path}.part"
    with fs.open_output_stream(part) as f:
        f.write(data)
    fs.move(part, path)
    return sum(len(v) for v in info.artifacts.values())
