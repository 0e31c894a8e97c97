"""raynb built as a wheel and installed into a fresh venv, used from outside the repository: `%raycluster render`
finds the packaged manifests, `python -m raynb.nccl --help` runs, and the quickstart notebook runs top to bottom on
the embedded cluster (the README's main job).

The fresh venv gets raynb from the wheel alone; its dependencies (Ray, torch, ...) come from this test's venv through
one path line (not its .pth files, so the repository's editable raynb stays out of sight). That keeps the test
minutes, not a multi-gigabyte reinstall, while everything raynb itself needs must be inside the wheel."""

from __future__ import annotations

import json
import os
import re
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import nbformat
import pytest

from raynb.notebook import summarise

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


def test_quickstart_notebook_top_to_bottom_outside_the_repo(fresh: dict, artifacts: Path) -> None:
    """The README's main job (`python -m raynb.notebook run` on the quickstart) from the wheel, in a directory that is
    not the repository, as `make quickstart` runs it (its own 150 steps, 2 workers): as a newcomer's first run, the
    notebook starts a head of its own and its last cell stops it; the saved notebook keeps the final curves and stays
    under 1 MB. (A long run's picture stays bounded: tests/unit/test_picture.py, test_display.py.)"""
    nb_path = fresh["cwd"] / "quickstart.ipynb"
    nb_path.write_text((ROOT / "notebooks" / "quickstart.ipynb").read_text())
    out = artifacts / "quickstart.ipynb"
    try:  # under pytest's own 600 s, so that a run that hangs says where (run 31: once, in the suite only)
        p = _run(fresh, ["-m", "raynb.notebook", "run", nb_path.name, "-o", str(out)], timeout=480)
    except subprocess.TimeoutExpired as e:
        pytest.fail(
            f"the quickstart did not end in 480 s; its output:\n{str(e.stdout)[-3000:]}\n{str(e.stderr)[-6000:]}"
        )
    assert p.returncode == 0, (p.stdout[-2000:], p.stderr[-3000:])
    assert "executed quickstart.ipynb" in p.stdout and "open it in JupyterLab" in p.stdout, p.stdout
    assert out.stat().st_size < 1_000_000, out.stat().st_size
    nb = nbformat.read(out, as_version=4)
    runs, errs = summarise(nb)
    assert [(r["name"].startswith("raytrain-"), r["status"], r["step"]) for r in runs[:1]] == [(True, "succeeded", 150)]
    assert runs[0]["records"] == 300  # both ranks, every step
    assert runs[1]["name"] == "broken-run" and runs[1]["status"] == "failed"
    assert len(errs) == 1 and errs[0].startswith("TrainingFailedError: Rank 1 of 2 failed"), errs
    outputs = "\n".join(json.dumps(c.get("outputs", [])) for c in nb.cells)
    assert "cell line 5, in train_loop_per_worker" in outputs
    # what a newcomer sees of the broken run: one error (above), its line, no wrapper frames, no copies of it in the
    # streams (Ray's stay in Ray's logs), a view that says failed and shows no waiting frames
    code = [c for c in nb.cells if c.cell_type == "code"]
    broken = next(c for c in code if "--name broken-run" in c.source)
    (err,) = [o for o in broken.outputs if o["output_type"] == "error"]
    assert "raise ValueError" in "\n".join(err["traceback"]) and "_worker.py" not in "\n".join(err["traceback"])
    streams = "".join(o.get("text", "") for o in broken.outputs if o["output_type"] == "stream")
    assert "Traceback" not in streams and "has no labels" not in streams, streams
    (view,) = [o["data"] for o in broken.outputs if "raynb-run" in o.get("data", {}).get("text/html", "")]
    html = view.get("text/html", "")
    assert 'data-status="failed"' in html and "has no labels" not in html + view.get("text/plain", "")
    assert "waiting for the first report" not in html and "<svg" not in html
    # the main run's throughput: total and per rank in its text, the chart saying how it smooths
    main = next(c for c in code if "--out run" in c.source)
    (main_view,) = [o["data"] for o in main.outputs if "raynb-run" in o.get("data", {}).get("text/html", "")]
    m = re.search(r"([\d,]+) samples/s total \(([\d,]+) per rank\)", main_view["text/plain"])
    assert m, main_view["text/plain"]
    total, per = (int(g.replace(",", "")) for g in m.groups())
    assert total > 0 and abs(total / 2 - per) <= 1
    assert re.search(r"throughput[^<]*rolling mean of \d+ steps", main_view["text/html"]), (
        "the chart says how it smooths"
    )
    m = re.search(r"loss (\d+\.\d+) -> (\d+\.\d+), final accuracy (\d+\.\d+)%", outputs)
    assert m and float(m[2]) < float(m[1]) * 0.5 and float(m[3]) > 80, m and m.group(0)
    # the final picture is a static SVG chart holding every step's point
    assert re.search(r'data-chart=\\"loss\\" data-points=\\"300\\"', outputs)
    assert not (Path(fresh["env"]["RAYNB_HOME"]) / "local" / "head.json").exists()  # the last cell stopped the head


def test_installing_raynb_leaves_a_kernels_ray_alone(fresh: dict, tmp_path: Path) -> None:
    """pip's own resolver, asked to install this wheel into a Python that has SageMaker Distribution's Ray 2.55.1
    (`--dry-run`: what it would do), installs raynb's other dependencies and keeps that Ray."""
    from tests.other_ray import OTHER_RAY, other_ray_python

    report = tmp_path / "report.json"
    p = subprocess.run(
        [str(other_ray_python()), "-m", "pip", "install", "--dry-run", "-q", "--disable-pip-version-check",
         "--report", str(report), fresh["wheel"]],
        capture_output=True,
        text=True,
        timeout=600,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr[-2000:]
    installs = {
        i["metadata"]["name"].lower(): i["metadata"]["version"] for i in json.loads(report.read_text())["install"]
    }
    assert "raynb" in installs and "ray" not in installs, f"pip would replace Ray {OTHER_RAY}: {installs.get('ray')}"
