"""A cluster raynb did not start, reached by address: what an address may be, the backend's promises (down leaves the
cluster running, no logs of processes raynb did not start), and the Ray versions raynb installs beside."""

from __future__ import annotations

from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement

from raynb._cluster.address import AddressBackend, parse_address
from raynb._cluster.address import up as address_up
from raynb._cluster.connection import _choose
from raynb._settings import Settings
from raynb.errors import UsageError, VersionMismatchError

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("address", "parsed"),
    [
        ("ray://10.0.1.7:10001", ("ray", "10.0.1.7", 10001)),
        ("ray://head.ray-train.svc:10001/", ("ray", "head.ray-train.svc", 10001)),
        ("http://127.0.0.1:8265", ("http", "127.0.0.1", 8265)),
        ("https://ray.example.com:443", ("https", "ray.example.com", 443)),
    ],
)
def test_the_two_forms_of_an_address(address: str, parsed: tuple[str, str, int]) -> None:
    assert parse_address(address) == parsed


@pytest.mark.parametrize(
    "address", ["10.0.1.7:10001", "ray://10.0.1.7", "grpc://h:1", "ray://:10001", "ray://h:port", "http://h:8265/api"]
)
def test_anything_else_is_refused_with_the_two_forms(address: str) -> None:
    with pytest.raises(UsageError) as e:
        parse_address(address)
    assert "ray://HOST:10001" in (e.value.fix or "") and "http://HOST:8265" in (e.value.fix or "")


def test_a_dashboard_address_is_the_dashboard_and_is_reached_through_ray_jobs() -> None:
    b = address_up("http://10.0.1.7:8265/", token_file=None, dashboard=None, say=print)
    assert b.address == b.dashboard_url == "http://10.0.1.7:8265"
    assert _choose(Settings(), b.address, b.dashboard_url) == ("jobs", "a dashboard's address was given")
    with pytest.raises(UsageError, match="another"):
        address_up("http://10.0.1.7:8265", token_file=None, dashboard="http://10.0.1.8:8265", say=print)
    with pytest.raises(UsageError, match="Ray Client needs the cluster's ray:// address"):
        _choose(Settings(connect_via="client"), b.address, b.dashboard_url)


def test_connect_via_jobs_is_taken_as_asked_and_auto_without_a_dashboard_is_ray_client() -> None:
    assert _choose(Settings(connect_via="jobs"), "ray://10.0.1.7:10001", None) == ("jobs", "connect_via is 'jobs'")
    assert _choose(Settings(), "ray://10.0.1.7:10001", None)[0] == "client"


def test_a_values_file_that_names_another_python_takes_ray_jobs_and_client_is_refused_at_once() -> None:
    """A RayCluster's values file says its image's Python (the DLC: 3.13): a kernel of another minor goes through Ray
    Jobs under auto, and is refused before any connect attempt when it asks for Ray Client. (No dashboard answers
    here: the image's Ray stands in for the dashboard's.)"""
    import platform

    import ray

    here = platform.python_version()
    other = "3.13.5" if not here.startswith("3.13.") else "3.12.15"
    image = (ray.__version__, other)
    assert _choose(Settings(), "ray://127.0.0.1:1", None, image=image) == (
        "jobs",
        f"kernel Python {here}, cluster Python {other}",
    )
    with pytest.raises(VersionMismatchError) as e:
        _choose(Settings(connect_via="client"), "ray://127.0.0.1:1", None, image=image)
    assert f"vs {other} on the cluster at ray://127.0.0.1:1" in (e.value.saw or "")
    assert _choose(Settings(), "ray://127.0.0.1:1", None, image=(ray.__version__, here))[0] == "client"
    assert _choose(Settings(), "ray://127.0.0.1:1", None, image=("2.55.1", here)) == (
        "jobs",
        f"kernel Ray {ray.__version__}, cluster Ray 2.55.1",
    )


def test_the_agent_is_reached_beside_the_dashboard_or_through_a_port_forward() -> None:
    from raynb._cluster.backend import agent_beside_dashboard

    assert agent_beside_dashboard(8266, "http://10.0.1.7:8265") == "http://10.0.1.7:8266"
    assert AddressBackend("http://10.0.1.7:8265").agent_url(9000, "http://10.0.1.7:8265") == "http://10.0.1.7:9000"
    assert AddressBackend("http://10.0.1.7:8265").agent_host is None  # the head node's address, as Ray's servers


def test_a_missing_token_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="No token file"):
        address_up("ray://10.0.1.7:10001", token_file=str(tmp_path / "nope"), dashboard=None, say=print)


def test_down_leaves_a_cluster_raynb_did_not_start_running() -> None:
    said: list[str] = []
    b = AddressBackend("ray://10.0.1.7:10001")
    b.down(said.append)
    assert said == ["disconnected from ray://10.0.1.7:10001; raynb did not start that cluster, so it keeps running"]
    assert b.name == "10.0.1.7:10001" and b.run_leases_dir() is None and b.hourly_cost() is None
    with pytest.raises(UsageError, match="did not start"):
        b.logs("head", 10)


def test_raynb_installs_beside_the_ray_a_kernel_has() -> None:
    """SageMaker Distribution 4.x kernels have Ray 2.55.1, the DLC 2.58.0: installing raynb changes neither. The test
    environment itself pins the DLC's Ray (the dev extra)."""
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    (ray,) = [Requirement(r) for r in meta["dependencies"] if Requirement(r).name == "ray"]
    for version in ("2.55.1", "2.56.0", "2.58.0", "2.59.2"):
        assert ray.specifier.contains(version), f"{ray} must accept Ray {version}"
    assert not ray.specifier.contains("2.54.0")  # older than any image raynb is tested against
    (pinned,) = [Requirement(r) for r in meta["optional-dependencies"]["dev"] if Requirement(r).name == "ray"]
    assert str(pinned.specifier) == "==2.58.0"


def test_ray_clients_version_refusal_becomes_what_to_install() -> None:
    """Ray's own check (the one Ray Client runs when it connects) makes the refusal; raynb reads the cluster's
    versions from it and says what kernel to make."""
    import ray
    from ray._private.utils import check_version_info

    from raynb._cluster.session import check_versions, cluster_versions
    from raynb.errors import ConnectError

    with pytest.raises(RuntimeError) as refused:
        check_version_info({"ray_version": "2.58.0", "python_version": "3.13.5"}, "this kernel", True, "minor")
    assert cluster_versions(str(refused.value)) == ("2.58.0", "3.13.5")
    assert cluster_versions("Connection refused") is None
    with pytest.raises(ConnectError) as e:
        check_versions("2.58.0", "3.13.5", where="the cluster at ray://10.0.1.7:10001")
    assert "3.13.5 on the cluster at ray://10.0.1.7:10001" in (e.value.saw or "")
    if ray.__version__ != "2.58.0":
        assert f"Ray {ray.__version__} here vs 2.58.0" in (e.value.saw or "")
