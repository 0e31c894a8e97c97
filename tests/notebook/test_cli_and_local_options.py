"""The command lines (`python -m raynb.notebook run -p`, `python -m raynb.manifest`) and the embedded head's options
in real kernels: `up --local --num-gpus N --no-dashboard`, doctor's warning for a head without a dashboard,
`Cluster.from_name("local")` connecting a second kernel, and the head stopping after every kernel closed normally."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import yaml

from raynb._cluster import embedded_head as local
from tests.notebook.kernels import errors, kernel, run, text

ROOT = Path(__file__).resolve().parents[2]


def test_notebook_cli_injects_parameters_after_the_parameters_cell(tmp_path: Path) -> None:
    nb = nbformat.v4.new_notebook()
    params = nbformat.v4.new_code_cell("STEPS = 1\nNAME = 'default'", metadata={"tags": ["parameters"]})
    nb.cells = [params, nbformat.v4.new_code_cell("print(f'{NAME}:{STEPS * 2}')")]
    src = tmp_path / "p.ipynb"
    nbformat.write(nb, src)
    out = tmp_path / "out" / "p.ipynb"
    p = subprocess.run(
        [sys.executable, "-m", "raynb.notebook", "run", str(src), "-o", str(out), "-p", "STEPS=21", "-p", "NAME=x y"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    assert f"-> {out}" in p.stdout
    executed = nbformat.read(out, as_version=4)
    assert "injected-parameters" in executed.cells[1].metadata["tags"]
    assert executed.cells[2].outputs[0]["text"] == "x y:42\n"
    bad = subprocess.run(
        [sys.executable, "-m", "raynb.notebook", "run", str(src), "-p", "oops"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and "-p takes KEY=VALUE" in bad.stderr


def test_manifest_cli_renders_what_render_gives(tmp_path: Path) -> None:
    p = subprocess.run(
        [sys.executable, "-m", "raynb.manifest", "--set", "GPU_NODE_TYPE=p5.48xlarge", "--set", "NAMESPACE=team-a"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert p.returncode == 0, p.stderr
    obj = yaml.safe_load(p.stdout)
    assert obj["metadata"]["namespace"] == "team-a"
    limits = obj["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert (limits["nvidia.com/gpu"], limits["vpc.amazonaws.com/efa"]) == ("8", "32")
    bad = subprocess.run(
        [sys.executable, "-m", "raynb.manifest", "--set", "GPU_NODE_TYPE=z9.huge"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and "z9.huge" in bad.stderr and "Traceback" not in bad.stderr


def test_local_options_doctor_from_name_and_normal_close(tmp_path: Path) -> None:
    """A head of its own: `list` before it with nothing running, a quiet first `up`, its options, doctor,
    `Cluster.from_name` from a second kernel, and the head stopping by itself once one kernel was killed (SIGKILL)
    and the other closed."""
    home = tmp_path / "home"
    env = {"RAYNB_HOME": str(home), "KUBECONFIG": str(tmp_path / "no-kubeconfig")}
    with kernel(env=env) as (km1, kc1):
        out = run(kc1, "%load_ext raynb\n%raycluster list")
        assert not errors(out), text(out)
        listing = text(out)
        assert listing.startswith("no clusters: `%raycluster up --local` starts the embedded one"), listing
        assert "Kubernetes not asked: No Kubernetes configuration found." in listing
        out = run(kc1, "c = %raycluster up --local --num-gpus 1 --no-dashboard", timeout=240)
        assert not errors(out), text(out)
        up = text(out)
        assert "embedded Ray head ready" in up and re.search(r"connected to 127\.0\.0\.1:\d+ as a Ray driver", up), up
        assert "SIGTERM handler" not in up  # none of Ray's start-up chatter
        out = run(kc1, "import json; st = c.status(); print(json.dumps({'gpus': st.gpus, 'dash': c.dashboard_url}))")
        assert json.loads(text(out).strip().splitlines()[-1]) == {"gpus": 1.0, "dash": None}
        out = run(kc1, "d = %raycluster doctor\nprint({x.name: x.state for x in d.checks})")
        states = eval(text(out).strip().splitlines()[-1])
        assert states["Ray dashboard"] == "warn" and states["Ray and Python versions"] == "ok", text(out)
        with kernel(env=env) as (km2, kc2):
            out = run(
                kc2,
                "import raynb, ray\nc2 = raynb.Cluster.from_name('local')\n"
                "print('connected', ray.is_initialized(), ray.cluster_resources().get('GPU'))",
                timeout=240,
            )
            assert not errors(out), text(out)
            assert "connected True 1.0" in text(out)
            km2.shutdown_kernel(now=True)  # SIGKILL: no atexit, no goodbye
        head = local.LocalHead.from_json((home / "local" / "head.json").read_text())
        assert local.processes_of(head), "the first kernel still uses the head"
        km1.shutdown_kernel(now=False)  # a normal close: the kernel exits, atexit runs
    deadline = time.monotonic() + 60
    while local.processes_of(head) and time.monotonic() < deadline:
        time.sleep(0.5)
    # neither the killed kernel nor the closed one keeps it: the head goes, with every process it started
    assert local.processes_of(head) == [], "the head must stop once its last kernel closed, a killed one too"
