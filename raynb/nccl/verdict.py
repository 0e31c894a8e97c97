"""In any process: what a process's NCCL log means: which transport carried the traffic inside a node and between nodes,
whether a faster network was asked for and not had (a fallback), and the verdict -- a severity and messages a person
can act on. Pure: it reads what ``lines.read`` kept."""

from __future__ import annotations

from collections.abc import Mapping

from .lines import Seen
from .summary import NcclSummary

__all__ = ["transport", "judge"]

_EFA_NAMES = {"libfabric", "aws libfabric", "ofi"}


def transport(s: NcclSummary, seen: Seen) -> str:
    """Fill in the transports (intra-node, inter-node), the network and GPUDirect RDMA; the network's name back."""
    kinds = seen.kinds
    if s.network is None and seen.net_names:
        s.network = seen.net_names[0]
    net_name = (seen.net_names[0] if seen.net_names else s.network or "").strip()
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
        s.gdr = bool(seen.gdr_channel) or bool(seen.rings_gdr)
    elif seen.rings_gdr is not None and s.inter_node:
        s.gdr = seen.rings_gdr
    return net_name


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


def judge(s: NcclSummary, seen: Seen, net_name: str, *, expect_efa: bool, gdr_expected: bool | None) -> None:
    """Was something faster asked for, and was it had? ``s.fallback``, ``s.severity`` and ``s.messages``."""
    requested = _requested_faster(seen.env)
    if expect_efa and not requested:
        requested = "EFA was expected (the pods request vpc.amazonaws.com/efa)"
    plugin_missing = seen.plugin_missing
    if not requested and (seen.ofi_seen or (plugin_missing and any("ofi" in p for p in plugin_missing))):
        requested = "aws-ofi-nccl was loaded" if seen.ofi_seen else "NCCL looked for the aws-ofi-nccl plugin"
    requested_missing = [p for p in plugin_missing if p and p != "libnccl-net.so"]
    ended_on_socket = (s.network or "").lower() == "socket" or s.inter_node == "socket"
    s.fallback = bool(requested) and (
        ended_on_socket or bool(seen.fatal) or bool(seen.ofi_fail) or bool(requested_missing)
    )
    said = [
        *_failures(seen, requested_missing),
        *_between_nodes(s, requested, ended_on_socket, net_name, gdr_expected),
        *_within_node(s, seen),
    ]
    s.messages += [msg for _, msg in said]
    s.severity = max((level for level, _ in said), key=_ORDER.__getitem__, default="ok")


#: a verdict's levels, in order; each message below comes with the level it raises the verdict to
_ORDER = {"ok": 0, "warn": 1, "error": 2}


def _failures(seen: Seen, requested_missing: list[str]) -> list[tuple[str, str]]:
    """NCCL could not start, or the plugin asked for did not load."""
    out = []
    if seen.fatal:
        out.append(
            ("error", f"{seen.fatal[0]}. NCCL cannot start its communicator; the job fails instead of running slowly.")
        )
        if (seen.env.get("NCCL_NET") or "").strip():
            out.append(
                (
                    "ok",
                    f"NCCL_NET={seen.env['NCCL_NET']} forbids any other network: install/enable that network's "
                    "plugin (for EFA: the aws-ofi-nccl library and a vpc.amazonaws.com/efa resource), or unset "
                    "NCCL_NET to allow a (slower) fallback.",
                )
            )
    if seen.unreachable:
        out.append(
            (
                "error",
                "EFA was chosen but the other nodes are unreachable ('Unreachable remote'): NCCL hangs at the first "
                "collective. EFA needs the nodes' security group to allow all traffic to and from itself, inbound "
                "and outbound (aws ec2 describe-security-groups --group-ids <the GPU nodes' group>).",
            )
        )
    if seen.ofi_fail:
        out.append(
            (
                "error",
                f"aws-ofi-nccl failed to start: {seen.ofi_fail[0]}. Check that the pod requests "
                "vpc.amazonaws.com/efa, the EFA device plugin runs on the node (it exposes /dev/infiniband), "
                "and FI_PROVIDER=efa.",
            )
        )
    if requested_missing and not seen.ofi_fail:
        out.append(
            (
                "ok",
                f"The network plugin that was asked for did not load ({', '.join(requested_missing)}): "
                "the library is not on the image or not on LD_LIBRARY_PATH.",
            )
        )
    return out


def _between_nodes(
    s: NcclSummary, requested: str | None, ended_on_socket: bool, net_name: str, gdr_expected: bool | None
) -> list[tuple[str, str]]:
    """What crosses between nodes: sockets (a fallback where something faster was asked for), EFA, IB, other."""
    if s.inter_node == "socket" and requested:
        return [
            (
                "error",
                f"Traffic between nodes goes over TCP sockets although a faster network was asked for "
                f"({requested}): a silent fallback, typically at half the speed or worse. Likely causes: "
                "the EFA resource is not requested, the EFA device plugin is missing, the aws-ofi-nccl "
                "library was not found, or FI_PROVIDER is not efa.",
            )
        ]
    if s.inter_node == "socket":
        return [
            (
                "warn",
                "Traffic between nodes goes over TCP sockets, the slowest transport. On EFA instances set "
                "FI_PROVIDER=efa and NCCL_NET_PLUGIN=ofi and request vpc.amazonaws.com/efa.",
            )
        ]
    out = []
    if s.fallback and ended_on_socket:
        out.append(
            (
                "warn",
                f"A faster network was asked for ({requested}) but NCCL settled on sockets. This run's ranks "
                "share a node, so traffic did not cross it; across nodes it would go over TCP.",
            )
        )
    if s.inter_node == "efa" and s.gdr:
        out.append(("ok", "Traffic between nodes goes over EFA with GPUDirect RDMA."))
    elif s.inter_node == "efa" and gdr_expected:
        out.append(
            (
                "warn",
                "Traffic between nodes goes over EFA but without GPUDirect RDMA, which this instance type "
                "supports: set FI_EFA_USE_DEVICE_RDMA=1 and check the aws-ofi-nccl platform log lines.",
            )
        )
    elif s.inter_node == "efa":
        out.append(
            (
                "ok",
                "Traffic between nodes goes over EFA without GPUDirect RDMA (host-staged), as expected on "
                "instances such as g6 that have no GPUDirect RDMA.",
            )
        )
    elif s.inter_node == "ib":
        how = " with GPUDirect RDMA." if s.gdr else " without GPUDirect RDMA."
        out.append(("ok" if s.gdr else "warn", "Traffic between nodes goes over InfiniBand/RoCE" + how))
    elif s.inter_node == "other":
        provider = f" (libfabric provider {s.provider}, not EFA)" if s.provider else ""
        out.append(("warn", f"Traffic between nodes goes over NCCL network '{net_name}'{provider}."))
    return out


def _within_node(s: NcclSummary, seen: Seen) -> list[tuple[str, str]]:
    """What GPUs of one node use between them (P2P/NVLink, shared memory, the network), and what is not seen yet."""
    out = []
    if (
        (s.nodes or 0) > 1
        and s.local_ranks == 1
        and seen.env.get("NCCL_P2P_DISABLE") == "1"
        and seen.env.get("NCCL_SHM_DISABLE") == "1"
    ):
        out.append(
            (
                "ok",
                "NCCL_P2P_DISABLE and NCCL_SHM_DISABLE are set: NCCL then counts every GPU as a node of its own, "
                "so GPUs in one machine also talk over the network.",
            )
        )
    if s.intra_node == "shm":
        out.append(
            (
                "warn",
                "GPUs on the same node talk through host shared memory, not P2P/NVLink: about 10x slower on "
                "NVLink machines (NCCL_P2P_DISABLE set, or P2P unavailable, e.g. some VMs).",
            )
        )
    elif s.intra_node == "net":
        out.append(
            (
                "warn",
                "GPUs on the same node talk through the network stack (P2P and SHM disabled or unavailable): "
                "the slowest intra-node path.",
            )
        )
    elif s.intra_node == "p2p":
        out.append(("ok", "GPUs on the same node talk peer-to-peer (NVLink/PCIe)."))
    if not seen.kinds and not seen.fatal and s.ranks not in (None, 1):
        out.append(("ok", "No channel lines yet: since NCCL 2.22 connections are made at the first collective."))
    return out
