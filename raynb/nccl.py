"""Which transport did NCCL really choose? A pure parser of one process's ``NCCL_DEBUG=INFO`` output.

``python -m raynb.nccl [--json] [--expect-efa] LOGFILE...`` prints a verdict per file (``--json``: one object, or a
list for several files). Reads NCCL 2.4-2.29 formats with or without launcher prefixes (Ray, torchrun, mpirun,
CloudWatch) and both aws-ofi-nccl network names ("AWS Libfabric" <= 1.11, "Libfabric" >= 1.12). No Ray here.

Rules (real lines in tests/fixtures/nccl): the transport comes from channel lines (``via P2P|SHM|NET/<name>``),
connected lazily since NCCL 2.22 -- so parse after the first collective; ``Using network X`` names the network
NCCL picked. A faster network counts as requested when the log shows ``NCCL_NET_PLUGIN``/``NCCL_NET`` set by the
environment, aws-ofi-nccl trying to start, or the caller says EFA was expected. Then ending on sockets, or failing
to initialise it, is a fallback.

Why this module is long: NCCL's log lines differ across versions (2.4 to 2.29, with and without aws-ofi-nccl);
the patterns, the verdict they lead to and the command line sit together so a new format is one edit.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field

__all__ = ["NcclSummary", "parse", "parse_file", "main", "normalize"]

# --- line normalisation ---------------------------------------------------------------------------------------------
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_PREFIXES = [
    re.compile(r"^\[\d+,\d+\]<std(?:out|err)>:"),  # mpirun
    re.compile(r"^\[default\d+\]:"),  # torchrun
    re.compile(r"^\((?:[\w.:<>-]+) pid=\d+(?:, ip=[\d.:a-fA-F]+)?\)\s*"),  # Ray log forwarding
    re.compile(r"^\s*\|\s*[\d:.TZ-]+\s*\|\s*"),  # CloudWatch columns
    re.compile(r"^\[\d+\]\s+"),  # node index
    re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)?\]\s*"),  # WARN timestamps (2.26+)
]
_RAY_DEDUP = re.compile(r"\s*\[repeated \d+x across cluster\]\s*$")
_HEADER = re.compile(
    r"^(?:(?P<host>[\w.\-<>]+):(?P<pid>\d+):(?P<tid>\d+)\s+\[(?P<dev>[^\]]*)\]\s+)?"
    r"(?:(?P<src>[\w./-]+:\d+)\s+)?NCCL (?P<level>INFO|WARN|TRACE)\s+(?P<msg>.*)$"
)
_PDSH = re.compile(r"^[\w.\-]+:\s+(?=[\w.\-]+:\d+:\d+ \[)")


def normalize(line: str) -> tuple[str | None, str]:
    """``(level, message)`` of one NCCL line, launcher prefixes removed; level None for non-NCCL lines."""
    s = _ANSI.sub("", line.rstrip("\r\n"))
    s = _RAY_DEDUP.sub("", s)
    for _ in range(3):
        before = s
        for p in _PREFIXES:
            s = p.sub("", s)
        s = _PDSH.sub("", s)
        if s == before:
            break
    m = _HEADER.search(s)
    if m:
        return m["level"], m["msg"].strip()
    return None, s.strip()


# --- signals --------------------------------------------------------------------------------------------------------
_VERSION = re.compile(r"NCCL version (\d+\.\d+\.\d+)")
_COMM = re.compile(r"comm 0x[0-9a-f]+ rank (\d+) nRanks (\d+) nNodes (\d+) localRanks (\d+) localRank (\d+)")
_INIT = re.compile(r"rank (\d+) nranks (\d+) cudaDev")
_USING_NET = re.compile(r"^Using network (.+?)\s*$")
_CHANNEL = re.compile(r"(?:Channel|Ring) \d+(?:/\d+)? : .*? via (P2P|SHM|NET|COLLNET)/([^\s]*(?: [^\s/]+)?)(.*)$")
_NET_CH = re.compile(r"via NET/(?P<name>[A-Za-z][\w ]*?)/\d+(?:\(\d+\))?(?P<rest>\S*)")
_RINGS_GDR = re.compile(r"Connected all rings, use ring PXN \d+ GDR (\d)")
_PROVIDER = re.compile(r"NET/OFI Selected [Pp]rovider is (\w[\w-]*)")
_OFI_VER = re.compile(r"NET/OFI (?:Initializing|Using) aws-ofi-nccl (\S+)")
_ENV_SET = re.compile(
    r"^(NCCL_NET_PLUGIN|NCCL_NET|FI_PROVIDER|NCCL_IB_DISABLE|NCCL_P2P_DISABLE|NCCL_SHM_DISABLE"
    r"|NCCL_SOCKET_IFNAME) set by environment to (.*?)\.?\s*$"
)
_NVLS_OFF = re.compile(r"NVLS multicast support is not available")
#: EFA chosen, the peer never answers: libfabric's EFA provider reports the send error (errno 113) and NCCL hangs at
#: the first collective. The usual cause is a security group without its self-referencing rule.
_UNREACHABLE = re.compile(r"Unreachable remote|EFA_IO_COMP_STATUS_REMOTE_ERROR_UNREACH|\(No route to host\)")

_FATAL = [
    (re.compile(r"Failed to initialize any NET plugin"), "NCCL could not initialise any network plugin"),
    (re.compile(r"Error: network (.+?) not found"), "NCCL_NET names a network that is not there"),
]
_OFI_FAIL = [
    re.compile(r"aws-ofi-nccl initialization failed"),
    re.compile(r"NET/OFI Initializing plugin failed"),
    re.compile(r"No eligible providers"),
    re.compile(r"fi_getinfo\(\) call failed"),
    re.compile(r"provider efa output empty list"),
    re.compile(r"Only EFA provider is supported"),
    re.compile(r"Failed to initialize NET plugin (?:AWS )?Libfabric"),
    re.compile(r"Could not find any optimal provider"),
    re.compile(r"GDR disabled on GDR-supported instance type"),
]
_PLUGIN_MISSING = re.compile(
    r"NET/Plugin ?: ?(?:Could not find: (?P<names>.+?)(?:\.? Using internal.*|\.\s*)?$"
    r"|Plugin load \((?P<lib>[^)]+)\) returned|dlerror=.*?(?P<lib2>libnccl-net[\w-]*\.so))"
)
_HARMLESS = [
    re.compile(r"Failed to find ncclCollNetPlugin"),
    re.compile(r"NET/IB ?: No device found"),
    re.compile(r"(?:ENV|PROFILER|TUNER)/Plugin: Could not find"),
    re.compile(r"Plugin name set by env to libnccl-net\.so"),
]

_EFA_NAMES = {"libfabric", "aws libfabric", "ofi"}


@dataclass
class NcclSummary:
    """What one NCCL process saw. ``to_json()`` gives the documented fields; ``evidence`` holds the lines used."""

    nccl_version: str | None = None
    ranks: int | None = None
    nodes: int | None = None
    intra_node: str | None = None
    inter_node: str | None = None
    network: str | None = None
    gdr: bool | None = None
    fallback: bool = False
    severity: str = "ok"
    messages: list[str] = field(default_factory=list)
    evidence: list[str] = field(default_factory=list)
    provider: str | None = None
    ofi_version: str | None = None
    local_ranks: int | None = None
    rank: int | None = None

    def to_json(self, evidence: bool = False) -> dict[str, object]:
        keys = [
            "nccl_version",
            "ranks",
            "nodes",
            "intra_node",
            "inter_node",
            "network",
            "gdr",
            "fallback",
            "severity",
            "messages",
        ]
        d = asdict(self)
        out = {k: d[k] for k in keys}
        if evidence:
            out["evidence"] = d["evidence"]
        return out

    def verdict(self) -> str:
        """One line for a person."""
        parts = []
        if self.intra_node:
            parts.append(f"intra-node {self.intra_node.upper()}")
        if self.inter_node:
            parts.append(f"inter-node {self.inter_node.upper()}" + (" +GDR" if self.gdr else ""))
        if not parts:
            parts.append("no transport seen yet" if self.ranks is None else "single rank")
        where = f"{self.ranks} ranks" if self.ranks else "ranks ?"
        if self.nodes:
            where += f" on {self.nodes} node{'s' if self.nodes > 1 else ''}"
        head = f"{self.severity.upper()}: {', '.join(parts)} ({where}; NCCL {self.nccl_version or '?'})"
        if self.fallback:
            head += " -- FALLBACK"
        return head + (f" -- {self.messages[0]}" if self.messages and self.severity != "ok" else "")


def _requested_faster(env: Mapping[str, str]) -> str | None:
    """Why a network faster than sockets was asked for, or None."""
    plugin = env.get("NCCL_NET_PLUGIN", "")
    if plugin and plugin.lower() not in {"none", ""}:
        return f"NCCL_NET_PLUGIN={plugin}"
    net = env.get("NCCL_NET", "")
    if net and net.lower() != "socket":
        return f"NCCL_NET={net}"
    if env.get("FI_PROVIDER", "").lower() == "efa":
        return "FI_PROVIDER=efa"
    return None


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
    seen_env: dict[str, str] = dict(env or {})
    net_names: list[str] = []
    gdr_channel: bool | None = None
    rings_gdr: bool | None = None
    kinds: set[str] = set()
    fatal: list[str] = []
    unreachable: list[str] = []
    ofi_fail: list[str] = []
    plugin_missing: list[str] = []
    ofi_seen = False
    max_nodes = None

    def keep(msg: str) -> None:
        if msg not in s.evidence and len(s.evidence) < 40:
            s.evidence.append(msg)

    for raw in lines:
        level, msg = normalize(raw)
        if not msg:
            continue
        if any(p.search(msg) for p in _HARMLESS):
            continue
        if _UNREACHABLE.search(msg):
            unreachable.append(msg)
            keep(msg)
            continue
        if (m := _VERSION.search(msg)) and s.nccl_version is None:
            s.nccl_version = m[1]
            continue
        if (
            level is None
            and not msg.startswith(("NET/", "Channel", "Ring", "Using network", "libfabric"))
            and "fi_getinfo" not in msg
        ):
            continue
        if m := _COMM.search(msg):
            nodes = int(m[3])
            if max_nodes is None or nodes >= max_nodes:
                max_nodes = nodes
                s.rank, s.ranks, s.local_ranks = int(m[1]), int(m[2]), int(m[4])
            keep(msg)
            continue
        if (m := _INIT.search(msg)) and s.ranks is None:
            s.rank, s.ranks = int(m[1]), int(m[2])
        if m := _ENV_SET.search(msg):
            seen_env[m[1]] = m[2]
            keep(msg)
            continue
        if m := _USING_NET.search(msg):
            s.network = m[1]
            keep(msg)
            continue
        if m := _PROVIDER.search(msg):
            s.provider = m[1].lower()
            ofi_seen = True
            keep(msg)
            continue
        if m := _OFI_VER.search(msg):
            s.ofi_version = m[1]
            ofi_seen = True
            keep(msg)
            continue
        if m := _CHANNEL.search(msg):
            kind = m[1]
            kinds.add(kind)
            if kind == "NET" and (n := _NET_CH.search(msg)):
                net_names.append(n["name"].strip())
                has_gdr = "/GDRDMA" in n["rest"]
                gdr_channel = has_gdr if gdr_channel is None else (gdr_channel or has_gdr)
            if len([e for e in s.evidence if " via " in e]) < 6:
                keep(msg)
            continue
        if m := _RINGS_GDR.search(msg):
            rings_gdr = m[1] == "1"
            keep(msg)
            continue
        for pat, why in _FATAL:
            if pat.search(msg):
                fatal.append(f"{why}: {msg}")
                keep(msg)
        if any(p.search(msg) for p in _OFI_FAIL):
            ofi_fail.append(msg)
            ofi_seen = True
            keep(msg)
        if m := _PLUGIN_MISSING.search(msg):
            names = m["names"] or m["lib"] or m["lib2"] or ""
            plugin_missing.append(names.strip())
            keep(msg)

    s.nodes = max_nodes
    # --- what carried the traffic ---
    if s.network is None and net_names:
        s.network = net_names[0]
    net_name = (net_names[0] if net_names else s.network or "").strip()
    single_node = s.nodes == 1
    if "P2P" in kinds:
        s.intra_node = "p2p"
    elif "SHM" in kinds:
        s.intra_node = "shm"
    elif "NET" in kinds and single_node:
        s.intra_node = "net"
    if s.local_ranks == 1 or s.ranks == 1:
        s.intra_node = None
    if (s.nodes is not None and s.nodes > 1) or (s.nodes is None and "NET" in kinds):
        name = net_name.lower()
        if name in _EFA_NAMES:
            s.inter_node = "efa" if (s.provider in (None, "efa")) else "other"
        elif name in {"ib", "ibext"}:
            s.inter_node = "ib"
        elif name == "socket":
            s.inter_node = "socket"
        elif name:
            s.inter_node = "other"
    if "NET" in kinds:
        s.gdr = bool(gdr_channel) or bool(rings_gdr)
    elif rings_gdr is not None and s.inter_node:
        s.gdr = rings_gdr

    # --- was something faster asked for, and did we get it? ---
    requested = _requested_faster(seen_env)
    if expect_efa and not requested:
        requested = "EFA was expected (the pods request vpc.amazonaws.com/efa)"
    if not requested and (ofi_seen or (plugin_missing and any("ofi" in p for p in plugin_missing))):
        requested = "aws-ofi-nccl was loaded" if ofi_seen else "NCCL looked for the aws-ofi-nccl plugin"
    requested_missing = [p for p in plugin_missing if p and p != "libnccl-net.so"]
    ended_on_socket = (s.network or "").lower() == "socket" or s.inter_node == "socket"
    s.fallback = bool(requested) and (ended_on_socket or bool(fatal) or bool(ofi_fail) or bool(requested_missing))

    # --- verdict ---
    msgs = s.messages
    severity = "ok"

    def at_least(level: str) -> None:
        nonlocal severity
        order = {"ok": 0, "warn": 1, "error": 2}
        if order[level] > order[severity]:
            severity = level

    if fatal:
        at_least("error")
        msgs.append(f"{fatal[0]}. NCCL cannot start its communicator; the job fails instead of running slowly.")
        if (seen_env.get("NCCL_NET") or "").strip():
            msgs.append(
                f"NCCL_NET={seen_env['NCCL_NET']} forbids any other network: install/enable that network's "
                "plugin (for EFA: the aws-ofi-nccl library and a vpc.amazonaws.com/efa resource), or unset "
                "NCCL_NET to allow a (slower) fallback."
            )
    if unreachable:
        at_least("error")
        msgs.append(
            "EFA was chosen but the other nodes are unreachable ('Unreachable remote'): NCCL hangs at the first "
            "collective. EFA needs the nodes' security group to allow all traffic to and from itself, inbound and "
            "outbound (aws ec2 describe-security-groups --group-ids <the GPU nodes' group>)."
        )
    if ofi_fail:
        at_least("error")
        msgs.append(
            f"aws-ofi-nccl failed to start: {ofi_fail[0]}. Check that the pod requests "
            "vpc.amazonaws.com/efa, the EFA device plugin runs on the node (it exposes /dev/infiniband), "
            "and FI_PROVIDER=efa."
        )
    if requested_missing and not ofi_fail:
        msgs.append(
            f"The network plugin that was asked for did not load ({', '.join(requested_missing)}): "
            "the library is not on the image or not on LD_LIBRARY_PATH."
        )
    if s.inter_node == "socket":
        if requested:
            at_least("error")
            msgs.append(
                f"Traffic between nodes goes over TCP sockets although a faster network was asked for "
                f"({requested}): a silent fallback, typically at half the speed or worse. Likely causes: "
                "the EFA resource is not requested, the EFA device plugin is missing, the aws-ofi-nccl "
                "library was not found, or FI_PROVIDER is not efa."
            )
        else:
            at_least("warn")
            msgs.append(
                "Traffic between nodes goes over TCP sockets, the slowest transport. On EFA instances set "
                "FI_PROVIDER=efa and NCCL_NET_PLUGIN=ofi and request vpc.amazonaws.com/efa."
            )
    elif s.fallback and ended_on_socket:
        at_least("warn")
        msgs.append(
            f"A faster network was asked for ({requested}) but NCCL settled on sockets. This run's ranks "
            "share a node, so traffic did not cross it; across nodes it would go over TCP."
        )
    if s.inter_node == "efa":
        if s.gdr:
            msgs.append("Traffic between nodes goes over EFA with GPUDirect RDMA.")
        elif gdr_expected:
            at_least("warn")
            msgs.append(
                "Traffic between nodes goes over EFA but without GPUDirect RDMA, which this instance type "
                "supports: set FI_EFA_USE_DEVICE_RDMA=1 and check the aws-ofi-nccl platform log lines."
            )
        else:
            msgs.append(
                "Traffic between nodes goes over EFA without GPUDirect RDMA (host-staged), as expected on "
                "instances such as g6 that have no GPUDirect RDMA."
            )
    elif s.inter_node == "ib":
        msgs.append(
            "Traffic between nodes goes over InfiniBand/RoCE"
            + (" with GPUDirect RDMA." if s.gdr else " without GPUDirect RDMA.")
        )
        if not s.gdr:
            at_least("warn")
    elif s.inter_node == "other":
        at_least("warn")
        msgs.append(
            f"Traffic between nodes goes over NCCL network '{net_name}'"
            + (f" (libfabric provider {s.provider}, not EFA)" if s.provider else "")
            + "."
        )
    if (
        (s.nodes or 0) > 1
        and s.local_ranks == 1
        and seen_env.get("NCCL_P2P_DISABLE") == "1"
        and seen_env.get("NCCL_SHM_DISABLE") == "1"
    ):
        msgs.append(
            "NCCL_P2P_DISABLE and NCCL_SHM_DISABLE are set: NCCL then counts every GPU as a node of its own, "
            "so GPUs in one machine also talk over the network."
        )
    if s.intra_node == "shm":
        at_least("warn")
        msgs.append(
            "GPUs on the same node talk through host shared memory, not P2P/NVLink: about 10x slower on "
            "NVLink machines (NCCL_P2P_DISABLE set, or P2P unavailable, e.g. some VMs)."
        )
    elif s.intra_node == "net":
        at_least("warn")
        msgs.append(
            "GPUs on the same node talk through the network stack (P2P and SHM disabled or unavailable): "
            "the slowest intra-node path."
        )
    elif s.intra_node == "p2p":
        msgs.append("GPUs on the same node talk peer-to-peer (NVLink/PCIe).")
    if not kinds and not fatal and s.ranks not in (None, 1):
        msgs.append("No channel lines yet: since NCCL 2.22 connections are made at the first collective.")
    s.severity = severity
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


if __name__ == "__main__":
    sys.exit(main())
