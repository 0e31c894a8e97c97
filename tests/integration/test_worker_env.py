"""What reaches the workers of a real run: raynb's defaults, the NCCL variables of summary mode, --env (which wins);
and the live NCCL watcher on a worker, fed a growing real NCCL log (an H200 capture) in a CPU run, turning into the
run's NCCL summary as the file grows. The other --nccl modes and --strict-efa change only which variables the same
path sets: tests/unit/test_nccl_env_badges.py follows them from the magic's line to the worker env."""

from __future__ import annotations

from pathlib import Path

import raynb

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "nccl" / "h200" / "proof-p2p.vm.3441.log"
KEYS = (
    "NCCL_DEBUG",
    "NCCL_DEBUG_SUBSYS",
    "NCCL_DEBUG_FILE",
    "NCCL_NET",
    "NCCL_NVLS_ENABLE",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST",
    "PYTHONUNBUFFERED",
    "RAY_TRAIN_ENABLE_PRINT_PATCH",
    "FOO",
)
ENV_CELL = "import os, raynb\nraynb.report(step=1, **{k: os.environ.get(k, '<unset>') for k in KEYS})\n"
FEED_CELL = """
import time
from raynb._worker_env import expand_debug_file
if ray.train.get_context().get_world_rank() == 0:
    path = expand_debug_file(os.environ["NCCL_DEBUG_FILE"])
    lines = open(FIXTURE).read().splitlines(keepends=True)
    cut = next(i for i, line in enumerate(lines) if " via P2P" in line)
    with open(path, "a") as f:  # what NCCL writes at init: no channel yet
        f.writelines(lines[:cut])
    time.sleep(3)  # the watcher reads every second
    with open(path, "a") as f:  # the first collective connects the channels
        f.writelines(lines[cut:])
    time.sleep(3)
raynb.report(step=2, loss=0.5)
"""


def _env_of(run: raynb.Run, rank: int = 0) -> dict[str, str]:
    df = run.metrics
    row = df[(df["rank"] == rank) & (df["step"] == 1)].iloc[0]
    return {k: row[k] for k in KEYS}


def test_summary_mode_env_and_the_live_nccl_watcher(ip, cluster: raynb.Cluster) -> None:
    ip.user_ns.update(KEYS=KEYS, FIXTURE=str(FIXTURE))
    cell = ENV_CELL + "import ray.train\n" + FEED_CELL
    result = ip.run_cell(
        "%%raytrain --workers 2 --name env-summary --env FOO=bar --env NCCL_DEBUG_SUBSYS=ALL --out r\n" + cell
    )
    assert result.error_in_exec is None, result.error_in_exec
    run = ip.user_ns["r"]
    for rank in (0, 1):
        env = _env_of(run, rank)
        assert env["NCCL_DEBUG"] == "INFO" and env["NCCL_DEBUG_SUBSYS"] == "ALL"  # --env wins over raynb's INIT,NET,ENV
        assert env["NCCL_DEBUG_FILE"] == "/tmp/raynb-nccl-env-summary.%h.%p.log"  # absolute, per host and process
        assert (env["NCCL_NVLS_ENABLE"], env["TORCH_SYMM_MEM_DISABLE_MULTICAST"]) == ("0", "1")  # multicast off
        assert (env["PYTHONUNBUFFERED"], env["RAY_TRAIN_ENABLE_PRINT_PATCH"], env["FOO"]) == ("1", "0", "bar")
        assert env["NCCL_NET"] == "<unset>"
    summaries = [e["summary"] for e in run.events if e.get("kind") == "nccl" and e["rank"] == 0]
    assert len(summaries) >= 2, summaries  # sent again as the log grew
    assert summaries[0]["intra_node"] is None and summaries[0]["nccl_version"] == "2.28.9"  # init lines only
    assert summaries[-1]["intra_node"] == "p2p" and summaries[-1]["severity"] == "ok"
    assert run.nccl[0]["intra_node"] == "p2p" and 1 not in run.nccl  # rank 1 wrote no log
    assert "P2P" in run._repr_mimebundle_()["text/html"]  # the badge in the cell
