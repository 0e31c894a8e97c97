"""%raycluster doctor and %raycluster bench on the embedded cluster (gloo on CPU workers)."""

from __future__ import annotations

import raynb


def test_doctor_checks_what_applies_here(cluster: raynb.Cluster, ip) -> None:
    checks = ip.run_line_magic("raycluster", "doctor")
    by_name = {c.name: c for c in checks.checks}
    assert checks.ok
    assert by_name["Ray and Python versions"].state == "ok"
    assert by_name["Ray dashboard"].state == "ok"
    assert by_name["EFA requested by worker pods"].state == "n/a"
    assert "data-state" in checks._repr_html_()


def test_bench_sweeps_allreduce_over_gloo(cluster: raynb.Cluster, ip) -> None:
    """With --compare-tcp, as the Qwen notebook's COMPARE_TCP section calls it (moved here from that notebook's test:
    the same two runs, on the session head instead of a head of the notebook's own)."""
    result = ip.run_line_magic("raycluster", "bench --workers 2 --sizes 256K,1M --compare-tcp")
    assert [int(r["size_bytes"]) for r in result.rows] == [256 << 10, 1 << 20]
    for r in result.rows:  # nccl-tests' definition, from the time each all_reduce took (2 ranks: busbw = algbw)
        size, t = int(r["size_bytes"]), r["time_us"] / 1e6
        assert abs(r["algbw_gbps"] - size / t / 1e9) <= 1e-6 * r["algbw_gbps"], r
        assert abs(r["busbw_gbps"] - r["algbw_gbps"] * 2 * (2 - 1) / 2) <= 1e-9, r
        # gloo over loopback moves these sizes in microseconds to milliseconds: a rate from a real all_reduce
        assert 0.01 < r["busbw_gbps"] < 100, r
    assert result.transport == {}  # gloo: no NCCL, no badge
    assert "gloo (no NCCL)" in repr(result) and "<table" in result._repr_html_()
    # the same sweep with sockets forced: a second run, its own rows, and the ratio per size
    assert [int(r["size_bytes"]) for r in result.tcp_rows] == [256 << 10, 1 << 20]
    assert set(result.ratio()) == {256 << 10, 1 << 20} and all(v > 0 for v in result.ratio().values())
    assert "TCP GB/s" in result._repr_html_() and "vs TCP" in repr(result)


def test_rerun_with_sockets_forced_reaches_the_workers(cluster: raynb.Cluster, ip) -> None:
    """`run.rerun(env=TCP_ENV, name=...)`, as the Qwen notebook compares EFA with TCP (moved from its test)."""
    ip.run_cell_magic(
        "raytrain",
        "--workers 2 --out first --name env-first",
        "import os, raynb\nfor i in range(4):\n    raynb.report(samples=8, net=os.environ.get('NCCL_NET', '-'))\n",
    )
    first = ip.user_ns["first"]
    again = first.rerun(env=raynb.TCP_ENV, name="env-tcp", display=False)
    assert first.status == again.status == "succeeded" and again.name == "env-tcp"
    assert {r["net"] for r in first.records if "net" in r} == {"-"}
    assert {r["net"] for r in again.records if "net" in r} == {"Socket"}  # TCP_ENV reached every rank
    assert again.rate("samples", skip_steps=1) > 0
