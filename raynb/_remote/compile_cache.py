"""In each Train worker: torch.compile's work carried in the run's storage, so a node that starts empty (a new pod, a
new cluster) reads what an earlier run compiled instead of compiling from nothing.

On one node the caches already persist between runs (Inductor's ``/tmp/torchinductor_<user>``, Triton's
``~/.triton``). Across nodes raynb keeps PyTorch's portable cache artifacts (``torch.compiler.save_cache_artifacts``,
everything this process compiled or loaded) in one file per torch version and device, ``.raynb/compile-cache/`` under
the run's storage path: every worker loads it before the function, rank 0 writes it back after a run that compiled
something new. A node remembers which version of that file its caches already hold (a line in Inductor's cache
directory, which goes with the caches): loading it again cost the next run on the same node 5.2 s before its
function on an H100 node (issue 39), for nothing. Runs in this process only; nothing here imports torch for the
asking.
"""

from __future__ import annotations

import getpass
import os
import re
import sys
import tempfile
from typing import Any

__all__ = ["load", "keep", "CACHE_DIR"]

CACHE_DIR = ".raynb/compile-cache"
#: in Inductor's cache directory: "<storage file> <size>:<mtime>" for each version of a file this node's caches hold
_ON_NODE = "raynb-compile-cache-on-node.txt"


def _on_node_file() -> str:
    """In Inductor's cache directory (Triton's is inside it unless TRITON_CACHE_DIR says otherwise), found as torch
    finds it (``torch/_inductor/runtime/cache_dir_utils.py``) but without importing ``torch._inductor``: that import
    brings ``torch._dynamo`` with it, 5-8 s before the function on an H100 node where the compile would have paid
    only part of it (first_step-h100-2026-12-06j/k)."""
    where = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if where is None:
        try:
            user = getpass.getuser()
        except (KeyError, ModuleNotFoundError, OSError):
            user = f"uid_{os.getuid()}" if hasattr(os, "getuid") else "unknown_user"
        where = os.path.join(tempfile.gettempdir(), "torchinductor_" + re.sub(r'[\\/:*?"<>|]', "_", user))
    return os.path.join(os.path.abspath(where), _ON_NODE)


def _version(fs: Any, path: str) -> str | None:
    """The storage file's version as this node remembers it (None: no such file)."""
    import pyarrow.fs

    info = fs.get_file_info(path)
    return f"{path} {info.size}:{info.mtime_ns}" if info.type == pyarrow.fs.FileType.File else None


def _node_holds(version: str) -> bool:
    try:
        with open(_on_node_file()) as f:
            return version in f.read().splitlines()
    except OSError:
        return False


def _remember(version: str | None) -> None:
    if version is None:
        return
    try:
        marker = _on_node_file()
        os.makedirs(os.path.dirname(marker), exist_ok=True)
        with open(marker, "a") as f:
            f.write(version + "\n")
    except OSError:
        pass  # the next run on this node loads the file again: seconds, never a wrong result


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
    """Before the function: load the artifacts an earlier run kept in the storage into this node's caches, unless
    they hold that version of the file already. Returns what the rank's ``worker_done`` event says of it:
    ``compile_cache_loaded`` (how many; 0: none there), ``compile_cache_on_node`` (1: this node's caches hold it), or
    ``compile_cache_error`` (a cache is never worth a run: it compiles from nothing)."""
    try:
        where = _where(storage)
        if where is None:
            return {"compile_cache_loaded": 0}
        torch, fs, path = where
        version = _version(fs, path)
        if version is None:
            return {"compile_cache_loaded": 0}
        if _node_holds(version):
            return {"compile_cache_loaded": 0, "compile_cache_on_node": 1}
        with fs.open_input_stream(path) as f:
            info = torch.compiler.load_cache_artifacts(f.read())
        _remember(version)
        return {"compile_cache_loaded": sum(len(v) for v in info.artifacts.values()) if info is not None else 0}
    except Exception as e:  # noqa: BLE001
        return {"compile_cache_error": f"{type(e).__name__}: {e}"[:300]}


def keep(storage: Any, counts: dict[str, int], loaded: dict[str, Any]) -> dict[str, Any]:
    """After a run that compiled something new, or found the storage without its graphs (``counts``: the process's
    compile counts; ``loaded``: what :func:`load` said), write everything this process compiled or loaded to the
    storage -- a whole file, moved into place. Returns ``compile_cache_saved`` (how many artifacts), or
    ``compile_cache_error`` (the run succeeded; the next one compiles again), or nothing where nothing was owed."""
    held = loaded.get("compile_cache_loaded") or loaded.get("compile_cache_on_node")
    if not (counts.get("compiled") or (counts and not held)):
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
        _remember(_version(fs, path))  # what it holds: everything this process compiled or loaded
        return {"compile_cache_saved": sum(len(v) for v in info.artifacts.values())}
    except Exception as e:  # noqa: BLE001
        return {"compile_cache_error": f"{type(e).__name__}: {e}"[:300]}
