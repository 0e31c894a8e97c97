"""NCCL settings for workers, NCCL_DEBUG_FILE expansion, and the badges a run shows."""

from __future__ import annotations

from types import SimpleNamespace

from raynb._doctor.bench import parse_sizes
from raynb._shared.worker_env import STRICT_EFA_NET, expand_debug_file, nccl_worker_env
from raynb.display.nccl_badges import badge_label, badges_html
from raynb.nccl import parse


def test_summary_mode_logs_to_an_absolute_per_process_file() -> None:
    env = nccl_worker_env("summary", "my run/1")
    assert env["NCCL_DEBUG"] == "INFO" and env["NCCL_DEBUG_SUBSYS"] == "INIT,NET,ENV"
    assert env["NCCL_DEBUG_FILE"] == "/tmp/raynb-nccl-my-run-1.%h.%p.log"


def test_full_and_off_modes_and_user_values_win() -> None:
    assert "NCCL_DEBUG_FILE" not in nccl_worker_env("full", "r") and nccl_worker_env("full", "r")["NCCL_DEBUG"]
    assert nccl_worker_env("off", "r") == {}
    env = nccl_worker_env("summary", "r", strict_efa=True, user_env={"NCCL_DEBUG": "WARN", "X": "1"})
    assert env["NCCL_DEBUG"] == "WARN" and env["X"] == "1" and env["NCCL_NET"] == STRICT_EFA_NET


def test_a_raytrain_lines_nccl_flags_reach_the_worker_env() -> None:
    """The `%%raytrain` line's --nccl / --strict-efa through parsing, Settings and the worker env, as the magic does
    it (the env reaching a real worker is the integration test's summary-mode run: tests/integration/
    test_worker_env.py)."""
    from raynb._magic_args import parse_train_line, setting_flags
    from raynb._settings import resolve
    from raynb._shared.worker_env import worker_env

    def env_of(line: str) -> dict[str, str]:
        s = resolve(setting_flags(parse_train_line(line)[0]), env={})
        return worker_env(s.nccl, "r", strict_efa=s.strict_efa)

    full = env_of("--workers 2 --nccl full --strict-efa")
    assert full["NCCL_DEBUG"] == "INFO" and "NCCL_DEBUG_FILE" not in full  # raw lines go to the cell
    assert full["NCCL_NET"] == "Libfabric"  # aws-ofi-nccl or fail: no silent socket fallback
    off = env_of("--workers 2 --nccl off")
    assert not {"NCCL_DEBUG", "NCCL_DEBUG_FILE", "NCCL_NET"} & set(off)
    for env in (full, off, env_of("--workers 2")):  # raynb's defaults stay whatever the mode
        assert (env["NCCL_NVLS_ENABLE"], env["TORCH_SYMM_MEM_DISABLE_MULTICAST"], env["PYTHONUNBUFFERED"]) == (
            "0",
            "1",
            "1",
        )


def test_debug_file_expansion_matches_nccl() -> None:
    assert (
        expand_debug_file("/tmp/n.%h.%p.log", hostname="ip-10-0-1-2.ec2.internal", pid=42)
        == "/tmp/n.ip-10-0-1-2.42.log"
    )
    assert expand_debug_file("/x/%%h-%q", hostname="h", pid=1) == "/x/%h-%q"


def _run_with(summaries: dict[int, tuple[str, str]]) -> SimpleNamespace:
    nccl = {r: {**parse(log).to_json(evidence=True), "node": node} for r, (node, log) in summaries.items()}
    return SimpleNamespace(nccl=nccl)


P2P = """h:1:1 [0] NCCL INFO comm 0x1 rank 0 nRanks 2 nNodes 1 localRanks 2 localRank 0 MNNVL 0
h:1:1 [0] NCCL INFO Channel 00/1 : 0[0] -> 1[1] via P2P/CUMEM/read"""
SOCKET_AFTER_EFA = """h:1:1 [0] NCCL INFO NCCL_NET_PLUGIN set by environment to ofi
h:1:1 [0] NCCL INFO comm 0x1 rank 0 nRanks 2 nNodes 2 localRanks 1 localRank 0 MNNVL 0
h:1:1 [0] NCCL INFO Using network Socket
h:1:1 [0] NCCL INFO Channel 00/0 : 1[1] -> 0[0] [receive] via NET/Socket/0"""


def test_badges_group_by_node_and_go_green() -> None:
    out = badges_html(_run_with({0: ("gpu-a", P2P), 1: ("gpu-a", P2P)}))
    assert out.count('class="raynb-nccl"') == 1 and 'data-severity="ok"' in out and "ranks 0-1" in out
    assert "intra-node P2P" in out and "raynb-nccl-banner" not in out
    assert "via P2P/CUMEM/read" in out  # evidence is there when expanded


def test_socket_fallback_gets_a_red_banner() -> None:
    out = badges_html(_run_with({0: ("a", SOCKET_AFTER_EFA), 1: ("b", SOCKET_AFTER_EFA)}))
    assert 'data-severity="error"' in out and "raynb-nccl-banner" in out and "NCCL fell back" in out
    assert badge_label(parse(SOCKET_AFTER_EFA).to_json()) == "inter-node SOCKET"


def test_no_nccl_no_badges() -> None:
    assert badges_html(SimpleNamespace(nccl={})) == ""


def test_parse_sizes() -> None:
    assert parse_sizes("1M, 64MiB,1G,512K,4096") == [1 << 20, 64 << 20, 1 << 30, 512 << 10, 4096]
