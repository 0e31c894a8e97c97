"""What a cluster costs to keep, from the presets' prices: the values' GPU nodes × hours, in status and in a run's
summary; the embedded cluster and an instance type without a price show none."""

from __future__ import annotations

from types import SimpleNamespace

from raynb._cluster.kube_state import KubeStatus, RayClusterRef
from raynb._cluster.status import ClusterStatus
from raynb._shared.cost import hourly_cost, usd
from raynb.display import render_bundle
from raynb.display.cluster_view import cost_text
from raynb.display.run_view import run_text
from raynb.manifest import load_presets, resolve_values
from tests.unit.fake_run import fake_run


def test_the_sample_cluster_is_two_g6_12xlarge_at_their_list_price() -> None:
    values = resolve_values(overrides={"RAY_CLUSTER_NAME": "c"})  # the sample's values file
    cost = hourly_cost(values, load_presets())
    assert cost is not None and (cost.instance_type, cost.nodes) == ("g6.12xlarge", 2)
    assert cost.usd_per_hour == 2 * 4.6016  # the [price] line of presets.yaml
    assert cost.text() == "2 × g6.12xlarge ≈ $9.20/h (on-demand list price, us-east-1)"
    assert usd(cost.usd_for(24 * 3600)) == "$221"  # a day forgotten
    assert abs(cost.usd_for(90) - 9.2032 * 90 / 3600) < 1e-12


def test_no_price_no_cost() -> None:
    presets = load_presets()
    assert hourly_cost({"GPU_NODE_TYPE": "p5e.48xlarge", "GPU_NODE_COUNT": "2"}, presets) is None  # no price known
    assert hourly_cost({"GPU_NODE_TYPE": "g6.12xlarge", "GPU_NODE_COUNT": "0"}, presets) is None  # scaled to zero
    assert hourly_cost({}, presets) is None  # the embedded cluster's backend has no values
    embedded = ClusterStatus("local", "local", "ray://127.0.0.1:1", None)
    assert cost_text(embedded) is None and "cost" not in embedded.text()


def test_status_says_the_rate_and_what_it_cost_since_the_raycluster_was_made() -> None:
    cost = hourly_cost({"GPU_NODE_TYPE": "g6.12xlarge", "GPU_NODE_COUNT": "2"}, load_presets())
    kube = KubeStatus(RayClusterRef("ray-train", "ray-train-me"), "ready", "img", created_at=1_000_000.0)
    st = ClusterStatus("ray-train-me", "kubernetes", "ray://127.0.0.1:1", None, kube=kube, cost=cost)
    line = cost_text(st, now=1_000_000.0 + 2 * 3600 + 30 * 60)
    assert line == "cost 2 × g6.12xlarge ≈ $9.20/h (on-demand list price, us-east-1) · up 2:30:00 ≈ $23.01 so far"
    assert "cost 2 × g6.12xlarge" in st.text() and "%raycluster down" in st.text()
    assert 'class="raynb-cost"' in st.html()


def _run(status: str, usd_per_hour: float | None) -> SimpleNamespace:
    records = [{"rank": 0, "step": s, "time": 100.0 + s, "loss": 1.0 / s} for s in range(1, 5)]
    return fake_run(records, status=status, workers=8, gpu=True, usd_per_hour=usd_per_hour, elapsed=1800.0)


def test_a_runs_summary_says_its_cost_on_a_priced_cluster_only() -> None:
    assert "≈ $4.60 at $9.20/h" in run_text(_run("succeeded", 9.2032))  # half an hour of two nodes
    assert "≈ $4.60 so far at $9.20/h" in run_text(_run("running", 9.2032))
    assert 'class="raynb-cost"' in render_bundle(_run("succeeded", 9.2032))["text/html"]
    assert "$" not in run_text(_run("succeeded", None))
