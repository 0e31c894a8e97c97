"""raynb built as a wheel and installed into a fresh venv, used from outside the repository: `%raycluster render`
finds the packaged manifests, `python -m raynb.nccl --help` runs, and the quickstart's first training cell trains on
the embedded cluster.

The fresh venv gets raynb from the wheel alone; its dependencies (Ray, torch, ...) come from this test's venv through
one path line (not its .pth files, so the repository's editable raynb stays out of sight). That keeps the test
minutes, not a multi-gigabyte reinstall, while everything raynb itself needs must be inside the wheel."""

from __future__ import annotations

import json
import os
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> dict:
    d = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(d / "dist"),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    (wheel,) = (d / "dist").glob("raynb-*.whl")
    venv = d / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    purelib = subprocess.run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    with zipfile.ZipFile(wheel) as z:  # what `pip install --no-deps` does for a pure-Python wheel
        z.extractall(purelib)
    deps = [p for p in site.getsitepackages() if p.endswith("site-packages")]
    (Path(purelib) / "_deps_of_the_test_venv.pth").write_text("\n".join(deps) + "\n")
    outside = d / "elsewhere"
    outside.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    env["RAYNB_HOME"] = str(d / "home")
    return {"wheel": wheel, "py": str(py), "cwd": outside, "env": env}


def _run(fresh: dict, args: list[str], timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [fresh["py"], *args], cwd=fresh["cwd"], env=fresh["env"], capture_output=True, text=True, timeout=timeout
    )


def test_the_wheel_ships_the_manifests(fresh: dict) -> None:
    names = zipfile.ZipFile(fresh["wheel"]).namelist()
    for f in ("raycluster.yaml", "values.env", "presets.yaml", "rbac.yaml"):
        assert f"raynb/manifests/{f}" in names, names
    p = _run(fresh, ["-c", "import raynb, json; print(json.dumps(raynb.__file__))"])
    assert p.returncode == 0, p.stderr
    assert "site-packages" in json.loads(p.stdout) and str(ROOT) not in p.stdout  # the wheel's raynb, not the repo's


def test_render_and_nccl_cli_outside_the_repo(fresh: dict) -> None:
    p = _run(
        fresh, ["-m", "IPython", "--colors=NoColor", "-c", "%load_ext raynb\n%raycluster render --set GPU_NODE_COUNT=3"]
    )
    assert p.returncode == 0, p.stderr[-2000:]
    assert "kind: RayCluster" in p.stdout and "replicas: 3" in p.stdout
    p = _run(fresh, ["-m", "raynb.nccl", "--help"])
    assert p.returncode == 0 and "NCCL" in p.stdout, p.stderr


def test_quickstart_first_training_cell_outside_the_repo(fresh: dict) -> None:
    nb = json.loads((ROOT / "notebooks" / "quickstart.ipynb").read_text())
    code = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
    params, up, helpers, train = code[0].replace("STEPS = 150", "STEPS = 20"), code[1], code[2], code[3]
    assert up.strip().endswith("%raycluster up --local") and train.startswith("%%raytrain")
    cells = [params, up, helpers, train, "print('STATUS', run.status, run.step)", "%raycluster down"]
    (fresh["cwd"] / "cells.json").write_text(json.dumps(cells))
    driver = (
        "import json; ip = get_ipython()\n"
        "for cell in json.load(open('cells.json')):\n"
        "    r = ip.run_cell(cell)\n"
        "    if not r.success: raise SystemExit(1)\n"
    )
    p = _run(fresh, ["-m", "IPython", "--colors=NoColor", "-c", driver], timeout=600)
    assert p.returncode == 0, (p.stdout[-2000:], p.stderr[-3000:])
    assert "STATUS succeeded 20" in p.stdout, p.stdout[-3000:]
