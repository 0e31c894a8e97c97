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
