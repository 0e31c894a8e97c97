"""The public surface: every name in raynb.__all__ is what the docs say, even after every submodule is imported
(a submodule named like a function would otherwise shadow it: `raynb.train` must stay the function)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import raynb


def test_public_names_are_functions_and_classes_not_modules() -> None:
    for mod in pkgutil.walk_packages(raynb.__path__, "raynb."):
        importlib.import_module(mod.name)
    for name in raynb.__all__:
        obj = getattr(raynb, name)
        assert not inspect.ismodule(obj), f"raynb.{name} is a module"
    for fn in ("up", "down", "current", "train", "report", "doctor", "bench"):
        assert inspect.isfunction(getattr(raynb, fn)), fn
    assert inspect.isclass(raynb.Cluster) and inspect.isclass(raynb.Run)


def test_worker_side_import_is_light() -> None:
    """Workers import raynb for report(): that must not pull in IPython, pandas or plotly."""
    import subprocess
    import sys

    code = (
        "import sys, raynb, raynb._remote.worker, raynb._remote.report, raynb.nccl; "
        "print(sorted(m for m in ('IPython', 'pandas', 'plotly', 'traitlets') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_every_error_a_user_can_hit_is_in_errors_and_exported() -> None:
    """Each RaynbError subclass anywhere in the package lives in raynb.errors and is in raynb.__all__."""
    import raynb.errors

    for mod in pkgutil.walk_packages(raynb.__path__, "raynb."):
        importlib.import_module(mod.name)

    def subclasses(cls: type) -> set[type]:
        return {c for s in cls.__subclasses__() for c in {s, *subclasses(s)}}

    found = {c for c in subclasses(raynb.RaynbError) if c.__module__.startswith("raynb")}
    assert found and all(c.__module__ == "raynb.errors" for c in found), sorted(
        f"{c.__module__}.{c.__name__}" for c in found
    )
    assert {c.__name__ for c in found} | {"RaynbError"} <= set(raynb.__all__) & set(raynb.errors.__all__)
