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
    storage = by_name["checkpoint storage"]  # one node: its disk is every worker's (S3: test_train's restart test)
    assert storage.state == "ok" and "one node" in storage.detail, storage
    assert "data-state" in checks._repr_html_()


def test_bench_sweeps_allreduce_over_gloo(cluster: raynb.Cluster, ip) -> None:
    result = ip.run_line_magic("raycluster", "bench --workers 2 --sizes 256K,1M")
    assert [int(r["size_bytes"]) for r in result.rows] == [256 << 10, 1 << 20]
    for r in result.rows:  # nccl-tests' definition, from the time each all_reduce took (2 ranks: busbw = algbw)
        size, t = int(r["size_bytes"]), r["time_us"] / 1e6
        assert abs(r["algbw_gbps"] - size / t / 1e9) <= 1e-6 * r["algbw_gbps"], r
        assert abs(r["busbw_gbps"] - r["algbw_gbps"] * 2 * (2 - 1) / 2) <= 1e-9, r
        # gloo over loopback moves these sizes in microseconds to milliseconds: a rate from a real all_reduce
        assert 0.01 < r["busbw_gbps"] < 100, r
    assert result.transport == {}  # gloo: no NCCL, no badge
    assert "gloo (no NCCL)" in repr(result) and "<table" in result._repr_html_()
