"""The suite's areas: `make test-area A=<area>` runs one (a few minutes at work); `make test` runs them all."""

from __future__ import annotations

#: each area's modules, by path under tests/ (the unit tests are `make test-fast`'s)
AREAS = {
    "train": ("integration/test_train.py",),
    "cluster": (
        "integration/test_cluster.py",
        "integration/test_probe_doctor.py",
        "integration/test_auth.py",
        "integration/test_nodes.py",
    ),
    "jobs": ("integration/test_jobs_path.py",),
    "compat": ("compat/",),
    "warm": ("notebook/test_warm_workers.py",),
    "outlive": (
        "notebook/test_runs_outlive_the_kernel.py",
        "notebook/test_notebooks.py",
        "notebook/test_cli_and_local_options.py",
    ),
    "newcomer": ("notebook/test_newcomer.py", "notebook/test_qwen_notebook.py", "packaging/"),
    "browser": ("browser/",),
    "k8s": (
        "k8s/test_lifecycle.py",
        "k8s/test_errors.py",
        "k8s/test_in_cluster.py",
        "k8s/test_node_pools.py",
        "k8s/test_auth_on_kubernetes.py",
    ),
    "k8s-runs": (
        "k8s/test_qwen_notebook_on_kubernetes.py",
        "k8s/test_through_kubernetes.py",
        "k8s/test_jobs_on_kubernetes.py",
    ),
}


def area_of(relpath: str) -> str | None:
    """The area of a test module, by its path under tests/ (None: unit tests, which `make test-fast` runs)."""
    return next((a for a, prefixes in AREAS.items() if relpath.startswith(prefixes)), None)
