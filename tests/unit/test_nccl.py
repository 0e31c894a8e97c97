"""nccl.py: transport verdicts across NCCL/aws-ofi-nccl versions, from real public log lines."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from raynb.nccl import normalize, parse, parse_file

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "nccl" / "corpus"

CASES = {
    # file: (intra_node, inter_node, network, gdr, fallback, severity)
    "p4d-efa-gdr-2.9.log": (None, "efa", "AWS Libfabric", True, False, "ok"),
    "eks-p4d-efa-2.27.log": (None, "efa", "Libfabric", True, False, "ok"),
    "g7e-efa-nogdr-2.29.log": (None, "efa", "Libfabric", False, False, "ok"),
    "g6-efa-derived.log": ("p2p", "efa", "Libfabric", False, False, "ok"),
    "eks-efa-init-failed-socket-2.21.log": (None, None, "Socket", None, True, "error"),
    "roce-ib-gdr-2.19.log": (None, "ib", "IB", True, False, "ok"),
    "shm-intra-2.18.log": ("shm", None, None, None, False, "warn"),
    "cscs-forced-net-missing-2.2x.log": (None, None, None, None, True, "error"),
    "no-net-plugin-2.30.log": (None, None, None, None, False, "error"),
    "cxi-libfabric.log": (None, "other", "AWS Libfabric", False, False, "warn"),
    "ray-prefixed-socket.log": (None, "socket", "Socket", False, False, "warn"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_corpus_verdicts(name: str) -> None:
    s = parse_file(str(CORPUS / name))
    got = (s.intra_node, s.inter_node, s.network, s.gdr, s.fallback, s.severity)
    assert got == CASES[name], (name, got, s.messages)
    assert s.messages, "every verdict explains itself"


def test_versions_and_shape() -> None:
    s = parse_file(str(CORPUS / "g6-efa-derived.log"))
    assert (s.nccl_version, s.ranks, s.nodes, s.local_ranks) == ("2.29.7", 8, 2, 4)
    assert s.provider == "efa" and s.ofi_version == "1.20.0"
    assert parse_file(str(CORPUS / "eks-efa-init-failed-socket-2.21.log")).nccl_version == "2.21.5"


def test_socket_between_nodes_when_efa_was_expected_is_an_error_naming_causes() -> None:
    s = parse_file(str(CORPUS / "ray-prefixed-socket.log"), expect_efa=True)
    assert s.fallback and s.severity == "error"
    text = " ".join(s.messages)
    assert "vpc.amazonaws.com/efa" in text or "EFA resource" in text
    assert "FI_PROVIDER" in text


def test_efa_without_gdr_warns_where_gdr_is_expected() -> None:
    assert parse_file(str(CORPUS / "g7e-efa-nogdr-2.29.log"), gdr_expected=True).severity == "warn"


def test_requested_plugin_missing_on_one_node_is_a_warned_fallback() -> None:
    log = """\
h:1:1 [0] NCCL INFO NCCL version 2.28.9+cuda13.0
h:1:1 [0] NCCL INFO NCCL_NET_PLUGIN set by environment to ofi
h:1:1 [0] NCCL INFO NET/Plugin: Could not find: ofi libnccl-net-ofi.so
h:1:1 [0] NCCL INFO Using network Socket
h:1:1 [0] NCCL INFO comm 0x1 rank 0 nRanks 2 nNodes 1 localRanks 2 localRank 0 MNNVL 0
h:1:2 [0] NCCL INFO Channel 00/1 : 0[0] -> 1[1] via P2P/CUMEM/read
"""
    s = parse(log)
    assert (s.intra_node, s.inter_node, s.network, s.fallback, s.severity) == ("p2p", None, "Socket", True, "warn")
    assert any("libnccl-net-ofi.so" in m for m in s.messages)


def test_two_fake_hosts_over_sockets() -> None:
    log = """\
a:1:1 [0] NCCL INFO comm 0x1 rank 0 nRanks 2 nNodes 2 localRanks 1 localRank 0 MNNVL 0
a:1:1 [0] NCCL INFO Using network Socket
a:1:2 [0] NCCL INFO Channel 00/0 : 1[1] -> 0[0] [receive] via NET/Socket/0
"""
    s = parse(log)
    assert (s.nodes, s.intra_node, s.inter_node, s.gdr, s.severity) == (2, None, "socket", False, "warn")


def test_gdrdma_is_a_prefix_not_a_line_end() -> None:
    s = parse(
        "x:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [receive] via NET/Libfabric/0/GDRDMA/flush=None\n"
        "x:1:1 [0] NCCL INFO NET/OFI Selected provider is efa, fabric is efa-direct (found 16 nics)"
    )
    assert s.inter_node == "efa" and s.gdr is True


def test_prefixes_are_stripped() -> None:
    assert normalize("[1,12]<stdout>:host:25:573 [4] NCCL INFO NET/OFI Initializing aws-ofi-nccl 1.9.1-aws") == (
        "INFO",
        "NET/OFI Initializing aws-ofi-nccl 1.9.1-aws",
    )
    assert normalize("[default0]:tp4:78:108 [0] NCCL INFO Using network Libfabric")[1] == "Using network Libfabric"
    assert (
        normalize("[2025-10-16 22:16:08] ip-1:19:37 [0] nccl_net_ofi_rdma_init:7978 NCCL WARN NET/OFI x")[0] == "WARN"
    )


def test_no_channel_lines_yet_says_so() -> None:
    s = parse("h:1:1 [0] NCCL INFO comm 0x1 rank 0 nRanks 2 nNodes 1 localRanks 2 localRank 0 MNNVL 0")
    assert s.intra_node is None and any("first collective" in m for m in s.messages)


def test_cli_json_one_object_and_a_list(tmp_path: Path) -> None:
    one = subprocess.run(
        [sys.executable, "-m", "raynb.nccl", "--json", str(CORPUS / "roce-ib-gdr-2.19.log")],
        capture_output=True,
        text=True,
        check=True,
    )
    obj = json.loads(one.stdout)
    assert (
        set(obj)
        == {
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
        }
        and obj["inter_node"] == "ib"
    )
    files = [str(CORPUS / "shm-intra-2.18.log"), str(CORPUS / "cxi-libfabric.log")]
    many = subprocess.run([sys.executable, "-m", "raynb.nccl", "--json", *files], capture_output=True, text=True)
    assert [o["intra_node"] for o in json.loads(many.stdout)] == ["shm", None]
    human = subprocess.run(
        [sys.executable, "-m", "raynb.nccl", str(CORPUS / "no-net-plugin-2.30.log"), str(tmp_path / "missing.log")],
        capture_output=True,
        text=True,
    )
    assert human.returncode == 1 and "ERROR" in human.stdout and "cannot read" in human.stderr


H200 = Path(__file__).resolve().parents[1] / "fixtures" / "nccl" / "h200"
# Real captures from raynb runs on 2 x H200 (NCCL 2.28.9). socket: with P2P and SHM disabled NCCL itself reports
# nNodes 2 / localRanks 1 on one machine, so the verdict is NCCL's own view: inter-node sockets.
H200_CASES = {
    "p2p": ("p2p", None, "Socket", 1, False, "ok"),
    "magic": ("p2p", None, "Socket", 1, False, "ok"),
    "shm": ("shm", None, "Socket", 1, False, "warn"),
    "socket": (None, "socket", "Socket", 2, False, "warn"),
    "two-hosts": (None, "socket", "Socket", 2, False, "warn"),
    "ofi-missing": ("p2p", None, "Socket", 1, True, "warn"),
}


@pytest.mark.parametrize("case", sorted(H200_CASES))
def test_real_h200_captures(case: str) -> None:
    files = sorted(H200.glob(f"proof-{case}.*.log"))
    assert len(files) == 2, "one log per rank"
    for f in files:
        s = parse_file(str(f))
        got = (s.intra_node, s.inter_node, s.network, s.nodes, s.fallback, s.severity)
        assert got == H200_CASES[case], (f.name, got, s.messages)
        assert s.nccl_version == "2.28.9" and s.ranks == 2


def test_h200_socket_case_explains_why_one_machine_shows_two_nodes() -> None:
    s = parse_file(str(sorted(H200.glob("proof-socket.*.log"))[0]))
    assert any("counts every GPU as a node of its own" in m for m in s.messages)


def test_h200_ofi_missing_names_the_missing_library() -> None:
    s = parse_file(str(sorted(H200.glob("proof-ofi-missing.*.log"))[0]))
    assert any("libnccl-net-ofi.so" in m for m in s.messages)


def test_h200_strict_efa_capture_is_an_error_that_names_nccl_net() -> None:
    """--strict-efa on a machine without EFA (NCCL_NET=Libfabric): NCCL refuses to start, and the verdict says why.

    NCCL 2.28.9 does not echo NCCL_NET in its log; the worker's watcher passes the process environment, as here."""
    files = sorted(H200.glob("proof-strict-efa.*.log"))
    assert len(files) == 2
    for f in files:
        s = parse_file(str(f), env={"NCCL_NET": "Libfabric"})
        assert s.severity == "error" and s.fallback
        assert "could not initialise any network plugin" in s.messages[0]
        assert any("NCCL_NET=Libfabric forbids any other network" in m for m in s.messages)


def test_efa_chosen_but_unreachable_is_the_security_group_hang() -> None:
    """Modelled on libfabric's EFA provider error (errno 113, "Unreachable remote"), not captured from a run here."""
    from raynb.nccl import parse

    s = parse(
        [
            "ip-10-0-1-5:212:250 [0] NCCL INFO NET/OFI Selected Provider is efa (found 1 nics)",
            "ip-10-0-1-5:212:250 [0] NCCL INFO Using network Libfabric",
            "libfabric:212:1764750000::efa:cq:efa_rdm_pke_handle_send_error():560<warn> err: 113, message: "
            "Unreachable remote (113)",
        ]
    )
    assert s.severity == "error" and "security group" in s.messages[0], s.messages
