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
    result = ip.run_line_magic("raycluster", "bench --workers 2 --sizes 256K,1M")
    assert [int(r["size_bytes"]) for r in result.rows] == [256 << 10, 1 << 20]
    assert all(r["busbw_gbps"] > 0 for r in result.rows)
    assert result.transport == {}  # gloo: no NCCL, no badge
    assert "gloo (no NCCL)" in repr(result) and "<table" in result._repr_html_()
