"""Break each house rule of tests/unit/test_house.py once, run it, put the file back: each rule's own test must fail
(issue 36: "each able to fail"). `python tests/house_guard_demo.py` from the project root; it restores every file it
touches, also when a run fails."""

import subprocess
import sys
from pathlib import Path

BREAKS = [
    (
        "no circle, type-only imports counted",
        "raynb/_shared/series.py",
        lambda s: (
            s + "\nfrom typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from . import picture  # noqa: F401\n"
        ),
        "test_no_import_circles_counting_type_only_imports",
    ),
    (
        "imports only go down the layer map",
        "raynb/_cluster/session.py",
        lambda s: s + "\n\ndef _up() -> None:\n    from .._runs import journal  # noqa: F401\n",
        "test_imports_only_go_down_the_layer_map",
    ),
    (
        "only the seam calls actors",
        "raynb/_runs/catalog.py",
        lambda s: s + "\n\ndef _peek(ref: object) -> object:\n    import ray\n\n    return ray.get(ref)\n",
        "test_only_the_seam_calls_raynbs_actors",
    ),
    (
        "cluster processes load only cluster code",
        "raynb/_remote/tasks.py",
        lambda s: s + "\nimport IPython  # noqa: E402,F401\n",
        "test_cluster_processes_load_only_cluster_code",
    ),
    (
        "no module over 400 lines",
        "raynb/_shared/cost.py",
        lambda s: s + "".join(f"# line {i}\n" for i in range(400)),
        "test_no_module_over_400_lines",
    ),
]
for what, path, brk, test in BREAKS:
    p = Path(path)
    original = p.read_text()
    p.write_text(brk(original))
    try:
        r = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/unit/test_house.py"],
            capture_output=True,
            text=True,
        )
    finally:
        p.write_text(original)
    failed = sorted({line.split("::")[1].split(" ")[0] for line in r.stdout.splitlines() if line.startswith("FAILED")})
    print(
        f"broke '{what}' in {path}: failed {failed}; the rule's own test {'FAILED' if test in failed else 'did NOT fail'}"
    )
    assert test in failed
r = subprocess.run(
    [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/unit/test_house.py"],
    capture_output=True,
    text=True,
)
print("all put back:", r.stdout.strip().splitlines()[-1])
