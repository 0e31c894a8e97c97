"""The dashboard link where the browser is not on the kernel's machine (JupyterHub, SageMaker Studio)."""

from __future__ import annotations

from raynb._cluster.browser_link import dashboard_link

URL = "http://127.0.0.1:38265"


def test_on_the_kernels_machine_the_link_is_the_address() -> None:
    assert dashboard_link(URL, None, {}, have_proxy=True) == URL
    assert dashboard_link(None, "/x/{port}/", {}, have_proxy=True) is None  # no dashboard: no link


def test_under_jupyterhub_the_link_goes_through_its_proxy_when_jupyter_server_proxy_serves_it() -> None:
    env = {"JUPYTERHUB_SERVICE_PREFIX": "/user/ana/"}
    assert dashboard_link(URL, None, env, have_proxy=True) == "/user/ana/proxy/38265/"
    assert dashboard_link(URL, None, env, have_proxy=False) == URL  # no proxy installed: a proxy path opens nothing


def test_the_setting_gives_the_path_elsewhere() -> None:
    studio = "/jupyterlab/default/proxy/{port}/"
    assert dashboard_link(URL, studio, {}, have_proxy=False) == "/jupyterlab/default/proxy/38265/"
