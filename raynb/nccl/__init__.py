"""In any process: which transport did NCCL really choose? A pure parser of one process's ``NCCL_DEBUG=INFO`` output.

``python -m raynb.nccl [--json] [--expect-efa] LOGFILE...`` prints a verdict per file (``--json``: one object, or a
list for several files). Reads NCCL 2.4-2.29 formats with or without launcher prefixes (Ray, torchrun, mpirun,
CloudWatch) and both aws-ofi-nccl network names ("AWS Libfabric" <= 1.11, "Libfabric" >= 1.12). No Ray here.

Rules (real lines in tests/fixtures/nccl): the transport comes from channel lines (``via P2P|SHM|NET/<name>``),
connected lazily since NCCL 2.22 -- so parse after the first collective; ``Using network X`` names the network
NCCL picked. A faster network counts as requested when the log shows ``NCCL_NET_PLUGIN``/``NCCL_NET`` set by the
environment, aws-ofi-nccl trying to start, or the caller says EFA was expected. Then ending on sockets, or failing
to initialise it, is a fallback.

Reading the lines is ``lines.py`` (a new format is one edit there), what they mean ``verdict.py``, the summary's
fields ``summary.py``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Mapping

from .lines import normalize, read
from .summary import NcclSummary
from .verdict import judge, transport

__all__ = ["NcclSummary", "parse", "parse_file", "main", "normalize"]


def parse(
    lines: Iterable[str] | str,
    *,
    expect_efa: bool = False,
    gdr_expected: bool | None = None,
    env: Mapping[str, str] | None = None,
) -> NcclSummary:
    """Summarise one process's NCCL log. ``env``: the variables the process ran with, when the log lacks them."""
    if isinstance(lines, str):
        lines = lines.splitlines()
    s = NcclSummary()
    seen = read(lines, s, env)
    net_name = transport(s, seen)
    judge(s, seen, net_name, expect_efa=expect_efa, gdr_expected=gdr_expected)
    return s


def parse_file(path: str, **kw: object) -> NcclSummary:
    with open(path, errors="replace") as f:
        return parse(f, **kw)  # type: ignore[arg-type]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m raynb.nccl", description="Which transport did NCCL choose?")
    ap.add_argument("logs", nargs="+", metavar="LOGFILE")
    ap.add_argument("--json", action="store_true", help="JSON: one object, or a list for several files")
    ap.add_argument("--expect-efa", action="store_true", help="EFA was expected: sockets count as a fallback")
    ap.add_argument("--evidence", action="store_true", help="include the lines the verdict rests on")
    args = ap.parse_args(argv)
    results, status = [], 0
    for path in args.logs:
        try:
            results.append((path, parse_file(path, expect_efa=args.expect_efa)))
        except OSError as e:
            print(f"{path}: cannot read: {e.strerror}", file=sys.stderr)
            status = 1
    if args.json:
        objs = [r.to_json(evidence=args.evidence) for _, r in results]
        print(json.dumps(objs[0] if len(args.logs) == 1 and objs else objs, indent=1))
    else:
        for path, r in results:
            print(f"{path}: {r.verdict()}")
    return status
