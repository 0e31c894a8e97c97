"""In any process: NCCL's log lines, read: each line without its launcher's prefix (Ray, torchrun, mpirun, CloudWatch),
the patterns of the lines that matter (NCCL 2.4-2.29, with and without aws-ofi-nccl), and one pass over a process's
log that keeps what they showed (:class:`Seen`). What that means is ``verdict.py``'s."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from .summary import NcclSummary

__all__ = ["normalize", "Seen", "read"]

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


@dataclass
class Seen:
    """What one process's log showed, besides what goes straight into its :class:`NcclSummary`."""

    env: dict[str, str] = field(default_factory=dict)
    net_names: list[str] = field(default_factory=list)
    gdr_channel: bool | None = None
    rings_gdr: bool | None = None
    kinds: set[str] = field(default_factory=set)
    fatal: list[str] = field(default_factory=list)
    unreachable: list[str] = field(default_factory=list)
    ofi_fail: list[str] = field(default_factory=list)
    plugin_missing: list[str] = field(default_factory=list)
    ofi_seen: bool = False


def read(lines: Iterable[str], s: NcclSummary, env: Mapping[str, str] | None = None) -> Seen:
    """One pass over the log: version, ranks, network and provider go into ``s`` (with the lines they rest on, as
    evidence); the rest is returned. ``env``: the variables the process ran with, when the log lacks them."""
    seen = Seen(env=dict(env or {}))
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
            seen.unreachable.append(msg)
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
            seen.env[m[1]] = m[2]
            keep(msg)
            continue
        if m := _USING_NET.search(msg):
            s.network = m[1]
            keep(msg)
            continue
        if m := _PROVIDER.search(msg):
            s.provider = m[1].lower()
            seen.ofi_seen = True
            keep(msg)
            continue
        if m := _OFI_VER.search(msg):
            s.ofi_version = m[1]
            seen.ofi_seen = True
            keep(msg)
            continue
        if m := _CHANNEL.search(msg):
            kind = m[1]
            seen.kinds.add(kind)
            if kind == "NET" and (n := _NET_CH.search(msg)):
                seen.net_names.append(n["name"].strip())
                has_gdr = "/GDRDMA" in n["rest"]
                seen.gdr_channel = has_gdr if seen.gdr_channel is None else (seen.gdr_channel or has_gdr)
            if len([e for e in s.evidence if " via " in e]) < 6:
                keep(msg)
            continue
        if m := _RINGS_GDR.search(msg):
            seen.rings_gdr = m[1] == "1"
            keep(msg)
            continue
        _problems(msg, seen, keep)
    s.nodes = max_nodes
    return seen


def _problems(msg: str, seen: Seen, keep: Callable[[str], None]) -> None:
    """A line that says something failed: NCCL's fatal errors, the OFI plugin's failures, a plugin not found."""
    for pat, why in _FATAL:
        if pat.search(msg):
            seen.fatal.append(f"{why}: {msg}")
            keep(msg)
    if any(p.search(msg) for p in _OFI_FAIL):
        seen.ofi_fail.append(msg)
        seen.ofi_seen = True
        keep(msg)
    if m := _PLUGIN_MISSING.search(msg):
        names = m["names"] or m["lib"] or m["lib2"] or ""
        seen.plugin_missing.append(names.strip())
        keep(msg)
