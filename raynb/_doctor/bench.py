"""In the kernel: the all-reduce probe: bus bandwidth per message size across the cluster's workers, next to NCCL's
transport.

Runs as an ordinary raynb training run (live chart, NCCL badges) with NCCL on GPUs and gloo on CPUs.
``compare_tcp=True`` runs it again with sockets forced (the sample's EFA-vs-TCP check) and gives the ratio.
busbw = algbw x 2(n-1)/n, as nccl-tests reports it for all_reduce.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Any

from .._remote.tasks import sweep
from .._settings import Settings
from .._shared.worker_env import TCP_ENV
from ..errors import UsageError

__all__ = ["ProbeResult", "bench", "parse_sizes", "GPU_SIZES", "CPU_SIZES"]

MiB = 1 << 20
GPU_SIZES = [MiB, 4 * MiB, 16 * MiB, 64 * MiB, 256 * MiB, 1024 * MiB]
CPU_SIZES = [MiB // 4, MiB, 4 * MiB, 16 * MiB]


@dataclass
class ProbeResult:
    """busbw per size (rank 0), the NCCL transport summary, and the same with sockets forced when compared."""

    workers: int
    gpu: bool
    rows: list[dict[str, float]]
    transport: dict[str, Any] = field(default_factory=dict)
    tcp_rows: list[dict[str, float]] = field(default_factory=list)
    tcp_transport: dict[str, Any] = field(default_factory=dict)

    def ratio(self) -> dict[int, float]:
        """busbw / busbw-over-TCP per size."""
        tcp = {int(r["size_bytes"]): r["busbw_gbps"] for r in self.tcp_rows}
        return {
            int(r["size_bytes"]): r["busbw_gbps"] / tcp[int(r["size_bytes"])]
            for r in self.rows
            if tcp.get(int(r["size_bytes"]))
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "workers": self.workers,
            "gpu": self.gpu,
            "rows": self.rows,
            "transport": self.transport,
            "tcp_rows": self.tcp_rows,
            "tcp_transport": self.tcp_transport,
            "ratio": {str(k): v for k, v in self.ratio().items()},
        }

    def _label(self, t: dict[str, Any]) -> str:
        from ..display.nccl_badges import badge_label

        return f"{badge_label(t)} [{t.get('severity', '?')}]" if t else ("gloo (no NCCL)" if not self.gpu else "?")

    def __repr__(self) -> str:
        lines = [
            f"all_reduce busbw, {self.workers} {'GPU' if self.gpu else 'CPU'} workers, {self._label(self.transport)}"
        ]
        ratio = self.ratio()
        for r in self.rows:
            s = int(r["size_bytes"])
            extra = f"   x{ratio[s]:.1f} vs TCP" if s in ratio else ""
            lines.append(f"  {s / MiB:>8.2f} MiB  {r['busbw_gbps']:9.2f} GB/s{extra}")
        if self.tcp_rows:
            lines.append(f"  TCP run: {self._label(self.tcp_transport)}")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        ratio, tcp = self.ratio(), {int(r["size_bytes"]): r["busbw_gbps"] for r in self.tcp_rows}
        head = "<tr><th>size</th><th>busbw GB/s</th>" + ("<th>TCP GB/s</th><th>ratio</th>" if tcp else "") + "</tr>"
        body = ""
        for r in self.rows:
            s = int(r["size_bytes"])
            body += f"<tr><td>{s / MiB:g} MiB</td><td>{r['busbw_gbps']:.2f}</td>"
            if tcp:
                body += f"<td>{tcp.get(s, float('nan')):.2f}</td><td>x{ratio.get(s, float('nan')):.1f}</td>"
            body += "</tr>"
        return (
            f'<div class="raynb-probe"><b>all_reduce</b> over {self.workers} '
            f'{"GPU" if self.gpu else "CPU"} workers · transport: {html.escape(self._label(self.transport))}'
            f'<div style="display:flex;gap:12px;align-items:flex-start">'
            f'<table style="font-size:12px">{head}{body}</table>{self.chart()}</div></div>'
        )

    def chart(self) -> str:
        """busbw against message size (log2 MiB on x), default transport and, when measured, sockets forced."""
        import math

        from ..display.svg import line_chart

        def pts(rows: list[dict[str, float]]) -> list[tuple[float, float]]:
            return [(math.log2(r["size_bytes"] / MiB), r["busbw_gbps"]) for r in rows if r["size_bytes"] > 0]

        series = {"default": pts(self.rows)}
        if self.tcp_rows:
            series["TCP forced"] = pts(self.tcp_rows)
        return line_chart(
            series, title="busbw vs log2(size / MiB)", unit="GB/s", chart_id="probe", width=360, height=180
        )


def _one(
    settings: Settings,
    sizes: list[int],
    env: dict[str, str] | None,
    name: str,
    display: bool | str | None,
    fake_hosts: int = 0,
) -> tuple[list[dict[str, float]], dict[str, Any]]:
    from .._runs.train import train

    run = train(
        sweep,
        config={"sizes": sizes, "gpu": settings.gpu, "fake_hosts": fake_hosts},
        settings=settings,
        env=env,
        name=name,
        display=display,
    ).raise_for_status()
    df = run.metrics
    rows = df[df["rank"] == 0].sort_values("step")[["size_bytes", "busbw_gbps", "algbw_gbps", "time_us"]]
    nccl = run.nccl
    return rows.to_dict("records"), (nccl.get(0) or next(iter(nccl.values()), {}))


def parse_sizes(text: str) -> list[int]:
    """``1M,64M,1G`` -> bytes (K/M/G are powers of 1024)."""
    out = []
    for part in text.split(","):
        part = part.strip().upper().removesuffix("B").removesuffix("I")
        mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(part[-1:], 1)
        try:
            out.append(int(float(part[:-1] if mult > 1 else part) * mult))
        except ValueError:
            raise UsageError(f"%raycluster bench: cannot read size {part!r}", fix="use sizes like 1M,64M,1G") from None
    return out


def bench(
    *,
    workers: int | None = None,
    gpu: bool | None = None,
    sizes: list[int] | str | None = None,
    compare_tcp: bool = False,
    env: dict[str, str] | None = None,
    settings: Settings | None = None,
    display: bool | str | None = None,
    fake_hosts: int = 0,
    name: str = "raynb-bench",
) -> ProbeResult:
    """Sweep all_reduce sizes across ``workers`` workers (default: every GPU, else 2 CPU workers)."""
    if isinstance(sizes, str):  # "1M,64M,1G", as `%raycluster bench --sizes` takes them
        sizes = parse_sizes(sizes)
    import ray

    from .._current import resolve_settings

    settings = settings or resolve_settings({"workers": workers, "gpu": gpu})
    if gpu is None and settings.gpu is False and ray.is_initialized() and ray.cluster_resources().get("GPU", 0) >= 2:
        settings = resolve_settings({"workers": workers or int(ray.cluster_resources()["GPU"]), "gpu": True})
    sizes = sizes or (GPU_SIZES if settings.gpu else CPU_SIZES)
    rows, transport = _one(settings, sizes, env, name, display, fake_hosts)
    result = ProbeResult(settings.workers, settings.gpu, rows, transport)
    if compare_tcp:
        result.tcp_rows, result.tcp_transport = _one(
            settings, sizes, {**(env or {}), **TCP_ENV}, f"{name}-tcp", display, fake_hosts
        )
    return result
