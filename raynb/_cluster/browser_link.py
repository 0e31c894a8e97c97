"""In the kernel: the dashboard's address as the user's browser can open it. Pure.

raynb reaches the dashboard at ``127.0.0.1:PORT`` on the kernel's machine (the embedded head, or the port-forward to
a RayCluster's head). Where the browser is not on that machine -- JupyterHub, SageMaker Studio -- that link opens
nothing; jupyter-server-proxy serves the kernel machine's ports under the Jupyter server's own path instead
(``<base_url>proxy/PORT/``). Under JupyterHub the base path is in ``JUPYTERHUB_SERVICE_PREFIX``; elsewhere the
``dashboard_proxy`` setting gives it (SageMaker Studio's JupyterLab: ``/jupyterlab/default/proxy/{port}/``).
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import urlsplit

__all__ = ["dashboard_link"]


def dashboard_link(url: str | None, template: str | None, environ: Mapping[str, str], have_proxy: bool) -> str | None:
    """What to show for the dashboard at ``url``: ``template`` filled with its port when set, JupyterHub's proxy path
    when the kernel runs under JupyterHub with jupyter-server-proxy installed, else ``url`` itself."""
    if not url:
        return url
    port = urlsplit(url).port
    if port is None:
        return url
    if template:
        return template.format(port=port)
    prefix = environ.get("JUPYTERHUB_SERVICE_PREFIX")
    if prefix and have_proxy:
        return f"{prefix.rstrip('/')}/proxy/{port}/"
    return url
