"""raynb.notebook's closing hint: how to open the executed notebook, for the Python that ran it."""

from __future__ import annotations

import subprocess
import sys

from raynb.notebook import open_hint


def test_the_hint_names_jupyterlab_only_where_it_is_installed() -> None:
    """A plain `pip install raynb` has no JupyterLab: the hint says what to install rather than a command that fails.
    The Python without it is this one with jupyterlab made unimportable, as an install without it is."""
    assert open_hint("out/q.ipynb").startswith("open it in JupyterLab: ")  # the dev install has it
    hide = "import sys; sys.modules['jupyterlab'] = None; from raynb.notebook import open_hint; print(open_hint('o.ipynb'))"
    p = subprocess.run([sys.executable, "-c", hide], capture_output=True, text=True, timeout=60, check=True)
    said = p.stdout.strip()
    assert said.startswith("to open it, install JupyterLab into this Python (") and "-m pip install jupyterlab" in said
    assert said.endswith("lab o.ipynb") and "open it in JupyterLab:" not in said, said
