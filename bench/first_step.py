"""A compiled model's first step on one GPU: a bare Python process, a cold raynb run, and a second cold raynb run
of the same function on the same embedded head, in one invocation (issue 39); prints JSON.

  python bench/first_step.py [--layers 8] [--batch 8] [--seq 2048] [--out bench/results/NAME.json]

The model: Qwen2.5-1.5B's architecture (random weights, ``--layers`` of its 28), bf16, ``torch.compile``, AdamW,
batch x seq tokens a step. Each variant is timed from its call -- the bare process's start, ``raynb.train``'s call --
to its first finished step (the loss read back: a real sync), and says where the time went: when the function
started, how long its first step (the compile in it) took, its CPU threads and nice value, where Inductor keeps its
cache and how many FX-graph cache hits and misses the compile had. The bare process gets Inductor and Triton caches of
its own (fresh directories), so it warms nothing for raynb's first run; raynb's two runs use what the workers' own
environment gives, emptied before the first. Targets (issue 39): raynb cold <= bare + 10 s; the second <= 0.6 x the
first.

Records: ``bench/results/first_step-h100-2026-12-06{,b}.json`` (one H100, two invocations; NOTES.md). Run it on the
device as its README says (the Ray wheels, PYTHONPATH with the project root, RAYNB_LOCAL_DASHBOARD=0,
NCCL_NVLS_ENABLE=0, a stale embedded head stopped first).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from machine import emit  # noqa: E402 - bench/machine.py, beside this script


def first_step(config: dict[str, Any]) -> dict[str, Any]:
    """Build the model, compile it, take one step; what it saw (also reported to raynb when inside a run)."""
    import os
    import time

    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    started = time.time()
    cfg = Qwen2Config(
        hidden_size=1536, intermediate_size=8960, num_hidden_layers=config["layers"], num_attention_heads=12,
        num_key_value_heads=2, vocab_size=151936, max_position_embeddings=32768, rope_theta=1e6,
        tie_word_embeddings=True,
    )  # fmt: skip
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(cfg).to("cuda", torch.bfloat16)
    model = torch.compile(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    ids = torch.randint(0, cfg.vocab_size, (config["batch"], config["seq"]), device="cuda")
    t0 = time.time()
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    opt.step()
    value = float(loss.item())
    done = time.time()
    from torch._dynamo.utils import counters
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    out = {
        "fn_started": started,
        "step_done": done,
        "first_step_in_fn_s": done - t0,
        "loss": value,
        "threads": torch.get_num_threads(),
        "nice": os.nice(0),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "inductor_cache_dir": cache_dir(),
        "fxgraph_cache_hit": int(counters["inductor"].get("fxgraph_cache_hit", 0)),
        "fxgraph_cache_miss": int(counters["inductor"].get("fxgraph_cache_miss", 0)),
        "autograd_cache_hit": int(counters["aot_autograd"].get("autograd_cache_hit", 0)),
    }
    try:
        import raynb

        raynb.report(step=1, loss=value, **{k: v for k, v in out.items() if k != "loss"})
    except ImportError:
        pass
    return out


def raynb_fn(config: dict[str, Any]) -> None:
    first_step(config)


def bare(config: dict[str, Any]) -> dict[str, Any]:
    """``first_step`` in a fresh Python with caches of its own; seconds from its start to the step done."""
    caches = Path(tempfile.mkdtemp(prefix="bare-caches-"))
    env = {
        **os.environ,
        "TORCHINDUCTOR_CACHE_DIR": str(caches / "inductor"),
        "TRITON_CACHE_DIR": str(caches / "triton"),
    }
    code = (
        f"import json, sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import first_step as b; "
        f"print('RESULT ' + json.dumps(b.first_step({config!r})))"
    )
    t_call = time.time()
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=900)
    line = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
    assert line, p.stderr[-3000:]
    got = json.loads(line[0][7:])
    shutil.rmtree(caches, ignore_errors=True)
    return {**got, "to_fn_s": got["fn_started"] - t_call, "to_first_step_s": got["step_done"] - t_call}


def with_raynb(config: dict[str, Any], name: str) -> dict[str, Any]:
    import raynb

    t_call = time.time()
    run = raynb.train(raynb_fn, workers=1, gpu=True, config=config, display=False, name=name)
    assert run.status == "succeeded", run.error
    (rec,) = [r for r in run.records if r.get("step") == 1 and r.get("kind") is None]
    got = {k: rec[k] for k in rec if k not in ("rank", "step", "time", "attempt")}
    events = [  # the run's own events, seconds after the call: where the time to the function went
        {"s": round(float(e["time"]) - t_call, 2), **{k: str(v)[:200] for k, v in e.items() if k != "time"}}
        for e in run.events
        if isinstance(e.get("time"), (int, float))
    ]
    return {
        **got,
        "to_fn_s": got["fn_started"] - t_call,
        "to_first_step_s": got["step_done"] - t_call,
        "cpus_per_worker": run.spec.cpus_per_worker,
        "events": events,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--out", help="also write the JSON record to this file (bench/results/...)")
    args = ap.parse_args()
    config = {"layers": args.layers, "batch": args.batch, "seq": args.seq}
    import raynb

    for d in (Path(tempfile.gettempdir()) / f"torchinductor_{os.environ.get('USER', 'root')}", Path.home() / ".triton"):
        shutil.rmtree(d, ignore_errors=True)  # raynb's first run compiles from nothing
    out: dict[str, Any] = {"what": __doc__.split("\n\n")[0].strip() if __doc__ else "", "config": config}
    out["bare"] = bare(config)
    t0 = time.time()
    raynb.up(local=True, progress=lambda m: None)
    out["up_s"] = time.time() - t0
    out["raynb_first"] = with_raynb(config, "first-step-1")
    out["raynb_second"] = with_raynb(config, "first-step-2")
    raynb.down(progress=lambda m: None)
    first, second, b = (out[k]["to_first_step_s"] for k in ("raynb_first", "raynb_second", "bare"))
    out["raynb_minus_bare_s"] = first - b
    out["second_over_first"] = second / first
    out["targets"] = "raynb cold <= bare + 10 s; the second cold run <= 0.6 x the first (issue 39)"
    emit(out, args.out)


if __name__ == "__main__":
    main()
