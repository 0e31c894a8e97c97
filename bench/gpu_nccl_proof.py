"""On a multi-GPU machine: raynb's all_reduce probe and a short %%raytrain over every GPU, under five NCCL settings.

  python bench/gpu_nccl_proof.py OUTDIR

Cases: default (P2P), NCCL_P2P_DISABLE=1 (SHM), P2P+SHM disabled (sockets), two fake hosts via NCCL_HOSTID
(nodes = 2 over sockets), and NCCL_NET_PLUGIN=ofi with no plugin installed (a real silent fallback). Writes
OUTDIR/gpu_nccl_proof.json (busbw per size, the badge each case got, whether it matched) and OUTDIR/nccl-logs/
(every rank's NCCL_DEBUG_FILE).
"""

from __future__ import annotations

import glob
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from machine import machine  # bench/machine.py, beside this script

import raynb
from raynb.display.nccl_badges import badge_label

MiB = 1 << 20
SIZES = [MiB, 16 * MiB, 256 * MiB, 1024 * MiB]
# name, env, fake hosts, what the badge must say (subset of the summary)
CASES: list[tuple[str, dict[str, str], int, dict[str, Any]]] = [
    ("p2p", {}, 0, {"intra_node": "p2p", "inter_node": None, "severity": "ok", "fallback": False}),
    ("shm", {"NCCL_P2P_DISABLE": "1"}, 0, {"intra_node": "shm", "severity": "warn", "fallback": False}),
    # with P2P and SHM off NCCL counts each GPU as its own node (nNodes 2, localRanks 1): seen on 2 x H200, 2.28.9
    (
        "socket",
        {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1"},
        0,
        {"nodes": 2, "inter_node": "socket", "network": "Socket", "severity": "warn", "fallback": False},
    ),
    ("two-hosts", {}, 2, {"nodes": 2, "inter_node": "socket", "severity": "warn", "fallback": False}),
    (
        "ofi-missing",
        {"NCCL_NET_PLUGIN": "ofi"},
        0,
        {"intra_node": "p2p", "network": "Socket", "fallback": True, "severity": "warn"},
    ),
]

MAGIC_CELL = """%%raytrain --workers {workers} --gpu --name proof-magic --out magic_run
import torch, torch.distributed as dist, raynb
from torch.nn.parallel import DistributedDataParallel as DDP
import os
dev = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
model = DDP(torch.nn.Linear(1024, 1024).to(dev), device_ids=[dev.index])
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(256, 1024, device=dev)
for step in range(50):
    loss = model(x).pow(2).mean()
    opt.zero_grad(); loss.backward(); opt.step()
    raynb.report(loss=loss, samples=256)
"""


def main() -> None:
    out = Path(sys.argv[1])
    logs = out / "nccl-logs"
    logs.mkdir(parents=True, exist_ok=True)
    import torch

    gpus = torch.cuda.device_count()
    cluster = raynb.up(local=True, progress=lambda m: print(m, file=sys.stderr))
    result: dict[str, Any] = {"gpus": gpus, "gpu_name": torch.cuda.get_device_name(0), "cases": {}}
    for name, env, fake_hosts, expect in CASES:
        t0 = time.time()
        try:
            probe = raynb.bench(
                workers=gpus,
                gpu=True,
                sizes=SIZES,
                env=env,
                fake_hosts=fake_hosts,
                name=f"proof-{name}",
                display="text",
            )
        except Exception as e:  # noqa: BLE001 - record and go on to the next case
            result["cases"][name] = {"env": env, "error": f"{type(e).__name__}: {e}"[:3000]}
            continue
        t = probe.transport
        got = {k: t.get(k) for k in expect}
        for f in glob.glob(f"/tmp/raynb-nccl-proof-{name}.*.log"):
            shutil.copy(f, logs / Path(f).name.replace("raynb-nccl-", ""))
        result["cases"][name] = {
            "env": env,
            "fake_hosts": fake_hosts,
            "seconds": time.time() - t0,
            "busbw_gbps": {str(int(r["size_bytes"])): r["busbw_gbps"] for r in probe.rows},
            "badge": badge_label(t),
            "summary": {k: v for k, v in t.items() if k != "evidence"},
            "expected": expect,
            "matched": got == expect,
        }
        print(
            f"[proof] {name}: {badge_label(t)} [{t.get('severity')}] matched={got == expect} "
            f"busbw@256MiB={result['cases'][name]['busbw_gbps'].get(str(256 * MiB))}",
            file=sys.stderr,
        )
    # a real %%raytrain cell through IPython's magic
    from IPython.testing.globalipapp import start_ipython

    ip = start_ipython()
    ip.run_line_magic("load_ext", "raynb")
    r = ip.run_cell(MAGIC_CELL.format(workers=gpus))
    run = ip.user_ns.get("magic_run")
    result["magic"] = {
        "error": repr(r.error_in_exec) if r.error_in_exec else None,
        "status": getattr(run, "status", None),
        "steps": getattr(run, "step", None),
        "nccl_rank0": {k: v for k, v in (run.nccl.get(0, {}) if run else {}).items() if k != "evidence"},
    }
    for f in glob.glob("/tmp/raynb-nccl-proof-magic.*.log"):
        shutil.copy(f, logs / Path(f).name.replace("raynb-nccl-", ""))
    result["all_matched"] = all(c.get("matched") for c in result["cases"].values())
    result["machine"] = machine()
    (out / "gpu_nccl_proof.json").write_text(json.dumps(result, indent=1))
    print(json.dumps({k: (v.get("badge"), v.get("matched")) for k, v in result["cases"].items()}))
    cluster.down()


if __name__ == "__main__":
    main()
