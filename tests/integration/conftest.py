"""A real embedded head for this package's tests, reached over Ray Client like any remote cluster (a kernel beside
the head connects to it as a plain driver: the notebook tests' kernels take that way)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import raynb


def alive_train_workers(dashboard_url: str) -> list[object]:
    from ray.util.state import list_actors

    return list_actors(
        address=dashboard_url,
        filters=[("class_name", "=", "RayTrainWorker"), ("state", "=", "ALIVE")],
        raise_on_missing_output=False,
    )


@pytest.fixture(scope="package")
def cluster(session_head: object) -> Iterator[raynb.Cluster]:
    """This process connected to the session's head over Ray Client, as a kernel reaches a cluster elsewhere."""
    c = raynb.up(local=True, via="client", progress=print)
    yield c
    c.disconnect()


@pytest.fixture(scope="package")
def ip(cluster: raynb.Cluster):
    from IPython import get_ipython
    from IPython.testing.globalipapp import start_ipython

    shell = start_ipython() or get_ipython()  # one global test shell per process
    shell.run_line_magic("load_ext", "raynb")
    return shell
