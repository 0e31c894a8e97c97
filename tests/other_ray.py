"""A Python with another Ray, as the kernels raynb's users have: SageMaker Distribution 4.x (and codeflare-sdk) ship
Ray 2.55.1, the DLC 2.58.0. A venv with ``ray[client,default]`` at that version from pip and what a Jupyter kernel
there has beside it (ipykernel, ipywidgets, plotly, pandas, PyYAML, and kubernetes for a RayCluster; no torch: the cells
run on the cluster) -- raynb comes from the project on ``PYTHONPATH`` -- built once per machine in
``~/.cache/raynb-other-ray/`` and reused (a minute or two the first time, for Ray's 74 MB wheel and the rest)."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

#: SageMaker Distribution 4.5.3's Ray (and codeflare-sdk's)
OTHER_RAY = "2.55.1"
#: the rest of the kernel's environment (a change here builds a new venv beside the old one)
KERNEL_PACKAGES = ("ipykernel", "ipywidgets", "plotly", "pandas", "pyyaml", "kubernetes")


#: runs a script from a file, as a kernel's code is (a function's source is read from its file)
RUN_FILE = "import runpy, sys; sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"


def other_ray_env(**extra: str) -> dict[str, str]:
    """The environment of a process of the other Ray: none of this venv's Ray settings, raynb from the project."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "VIRTUAL_ENV"))}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1])
    return {**env, **extra}


def run_in_other_ray(file: Path, args: list[str], env: dict[str, str], timeout: float) -> dict:
    """Run the script ``file`` with ``args`` in the other Ray's Python; what its ``RESULT`` line says."""
    from tests.integration.fresh_python import script_result

    return script_result(RUN_FILE, [str(file), *args], env, timeout=timeout, python=str(other_ray_python()))


def other_ray_python(version: str = OTHER_RAY) -> Path:
    """The interpreter of a venv with Ray ``version`` (built on first use; several test processes wait for one)."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "raynb-other-ray"
    root = cache / f"ray-{version}-kernel{len(KERNEL_PACKAGES)}"
    python = root / "bin" / "python"
    done = root / ".complete"
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / f"ray-{version}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            subprocess.run([sys.executable, "-m", "venv", "--clear", str(root)], check=True, timeout=300)
            subprocess.run(
                [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                 f"ray[client,default]=={version}", *KERNEL_PACKAGES],
                check=True,
                timeout=900,
            )  # fmt: skip
            done.touch()
    return python
