"""A compiled model's first step on one GPU: a bare Python process, a cold raynb run, and a second cold raynb run
of the same function on the same embedded head, in one invocation (issue 39); prints JSON.

  python bench/first_step.py [--layers 8] [--batch 8] [--seq 2048] [--out bench/results/NAME.json] [--cache-keys]
                             [--ab-ahead-imports]

The model: Qwen2.5-1.5B's architecture (random weights, ``--layers`` of its 28), bf16, ``torch.compile``, AdamW,
batch x seq tokens a step. Each variant is timed from its call -- the bare process's start, ``raynb.train``'s call --
to its first finished step (the loss read back: a real sync), and says where the time went: when the function
started, how long its first step (the compile in it) took, its CPU threads and nice value, where Inductor keeps its
cache and how many FX-graph cache hits and misses the compile had. The bare process gets Inductor and Triton caches of
its own (fresh directories), so it warms nothing for raynb's first run; raynb's two runs use what the workers' own
environment gives, emptied before the first. Targets (issue 39): raynb cold <= bare + 10 s; the second <= 0.6 x the
first. A second baseline, plain Ray Train (``TorchTrainer(...).fit()`` from a driver of its own on the same head,
the same GPU and CPUs), runs last, so it meets the node's compile cache as raynb's second run does: the two
differ only in the way to the function (``raynb_second_minus_plain_fit_s``).

Each raynb run and the plain baseline also record ``ray_processes``: Ray's worker processes started during the run,
when each started and first showed each process title (``ray::TrainController.__init__``, ``ray::IDLE``, ...), in
seconds after the call (``bench/ray_processes.py``): which process waited on which.

``--cache-keys`` (a diagnosis, not a record's timings): every variant keeps each compile's FX-graph cache key and the
inputs Inductor hashed into it (``fx_cache_keys``; a compile that hits AOTAutograd's cache computes none), and
``fx_key_differences`` names the inputs whose hashes differ between the keys raynb's first run stored and those plain
``fit()`` (where it missed) or the bare process computed -- why one does not read the other's graphs.

Records: ``bench/results/first_step-h100-2026-12-06*.json`` (one H100 each; NOTES.md has their tables). Run it on the
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
from ray_processes import ProcessTimeline  # noqa: E402 - beside this script


def first_step(config: dict[str, Any]) -> dict[str, Any]:
    """Build the model, compile it, take one step; what it saw (also reported to raynb when inside a run)."""
    import json
    import time
    from pathlib import Path

    entered = time.time()
    import os

    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    started = time.time()
    shape = {"hidden_size": 1536, "intermediate_size": 8960, "num_attention_heads": 12, "vocab_size": 151936}
    if config.get("dry_run"):  # the bench's own check on a CPU: a tiny model of the same architecture
        shape = {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "vocab_size": 1024}
    cfg = Qwen2Config(
        **shape, num_hidden_layers=config["layers"], num_key_value_heads=2, max_position_embeddings=32768,
        rope_theta=1e6, tie_word_embeddings=True,
    )  # fmt: skip
    device = "cpu" if config.get("dry_run") else "cuda"
    keys = _record_cache_keys() if config.get("cache_keys") else None
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(cfg).to(device, torch.bfloat16)
    model = torch.compile(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device == "cuda")
    ids = torch.randint(0, cfg.vocab_size, (config["batch"], config["seq"]), device=device)
    t0 = time.time()
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    opt.step()
    value = float(loss.item())
    done = time.time()
    from torch._dynamo.utils import counters
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    out = {
        "fn_entered": entered,
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
    if keys is not None:  # a file beside the record's other parts: too big for a metrics record
        Path(config["cache_keys"]).write_text(json.dumps(keys))
    try:
        import raynb

        raynb.report(step=1, loss=value, **{k: v for k, v in out.items() if k != "loss"})
    except ImportError:
        pass
    return out


def _record_cache_keys() -> list[dict[str, Any]]:
    """Each FX graph's cache key and what went into it, as Inductor computes them (``compiled_fx_graph_hash``: one
    "[hash] field: value" line per input), appended to the list returned as this process compiles (``--cache-keys``)."""
    import torch._inductor.codecache as codecache

    keys: list[dict[str, Any]] = []
    computed = codecache.compiled_fx_graph_hash

    def recording(*args: Any, **kwargs: Any) -> tuple[str, list[str]]:
        key, lines = computed(*args, **kwargs)
        # the graph's code is long and says little here; an input's metadata whole (its tail named what differed)
        keys.append({"key": key, "components": [ln[:300] if "] gm: " in ln else ln[:1500] for ln in lines]})
        return key, lines

    codecache.compiled_fx_graph_hash = recording
    return keys


def key_differences(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Graph by graph, the inputs of two compiles' keys whose hashes differ (a component is "[hash] field: value")."""

    def fields(graph: dict[str, Any]) -> dict[str, tuple[str, str]]:
        split = (ln[1:].split("] ", 1) for ln in graph["components"] if ln.startswith("[") and "] " in ln)
        return {rest.split(":", 1)[0]: (h, rest) for h, rest in split}

    out = []
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        fx, fy = fields(x), fields(y)
        differ = {f: [fx.get(f, ("", ""))[1], fy.get(f, ("", ""))[1]] for f in sorted(set(fx) | set(fy))
                  if fx.get(f, ("", ""))[0] != fy.get(f, ("", ""))[0]}  # fmt: skip
        out.append({"graph": i, "same_key": x["key"] == y["key"], "differ": differ})
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


def plain_fit(config: dict[str, Any], cpus: float, timeline: ProcessTimeline) -> dict[str, Any]:
    """``first_step`` as plain Ray Train runs it on the same head: a fresh driver that has imported Ray Train and
    connected (as a notebook's earlier cells would), then ``TorchTrainer(...).fit()`` timed from its call; one GPU
    worker with the CPUs raynb gives it, so only the way there differs."""
    from raynb._cluster.embedded_head import HOST, find_head, state_dir

    head = find_head()
    assert head is not None, "raynb's embedded head is not up"
    address = f"{HOST}:{head.ports['gcs_port']}"
    env = dict(os.environ)
    if head.auth_mode == "token":  # the head asks every driver for its token
        env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(state_dir() / "auth_token"))
    gpu = not config.get("dry_run")
    resources = {"CPU": cpus, **({"GPU": 1} if gpu else {})}
    out = Path(tempfile.mkdtemp(prefix="plain-fit-")) / "result.json"
    code = f"""
import json, sys, time
sys.path.insert(0, {str(Path(__file__).parent)!r})
import ray
import ray._private.services
import ray.cloudpickle
from ray.train import RunConfig, ScalingConfig
from ray.train.torch import TorchTrainer
import first_step as b
ray.cloudpickle.register_pickle_by_value(b)  # the worker has no bench/ on its path
first_step = b.first_step  # the function travels by value, not the module (which holds what it imported)
# raynb's embedded head listens on the loopback only, and Ray would turn 127.0.0.1 into the node's own IP
ray._private.services.resolve_ip_for_localhost = lambda host: host
ray.init(address={address!r}, _node_ip_address="127.0.0.1", logging_level="ERROR")

def fn(cfg):  # one worker
    import json
    open({str(out)!r}, "w").write(json.dumps(first_step(cfg)))

t_call = time.time()
TorchTrainer(fn, train_loop_config={config!r},
             scaling_config=ScalingConfig(num_workers=1, use_gpu={gpu!r}, resources_per_worker={resources!r}),
             run_config=RunConfig(name="first-step-plain-" + str(int(t_call)))).fit()
print("CALLED " + json.dumps(t_call), flush=True)
"""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=900, env=env)
    line = [ln for ln in p.stdout.splitlines() if ln.startswith("CALLED ")]
    assert line and out.exists(), p.stderr[-3000:]
    t_call = float(line[0][7:])
    got = json.loads(out.read_text())
    return {
        **got,
        "to_fn_s": got["fn_started"] - t_call,
        "to_first_step_s": got["step_done"] - t_call,
        "ray_processes": timeline.since(t_call),
    }


def with_raynb(
    config: dict[str, Any], name: str, timeline: ProcessTimeline, env: dict[str, str] | None = None
) -> dict[str, Any]:
    import raynb

    t_call = time.time()
    gpu = not config.get("dry_run")
    run = raynb.train(raynb_fn, workers=1, gpu=gpu, config=config, display=False, name=name, env=env)
    assert run.status == "succeeded", run.error
    (rec,) = [r for r in run.records if r.get("step") == 1 and r.get("kind") is None]
    got = {k: rec[k] for k in rec if k not in ("rank", "step", "time", "attempt")}
    events = [  # the run's own events, seconds after the call: where the time to the function went
        {"s": round(float(e["time"]) - t_call, 2), **{k: str(v)[:200] for k, v in e.items() if k != "time"}}
        for e in run.events
        if isinstance(e.get("time"), (int, float))
    ]
    done = next((e for e in run.events if e.get("kind") == "worker_done"), {})
    marks = {**(done.get("setup_at") or {}), "fn_entered": got.get("fn_entered"), "fn_started": got["fn_started"]}
    return {
        **got,
        "to_fn_s": got["fn_started"] - t_call,
        "to_first_step_s": got["step_done"] - t_call,
        # seconds after the call: the worker process started, raynb's set-up on it (each step's end), the function
        # entered, its imports done (fn_started)
        "way_to_fn_s": {k: round(v - t_call, 2) for k, v in marks.items() if isinstance(v, (int, float))},
        "cpus_per_worker": run.spec.cpus_per_worker,
        # what the worker's process imported for the function before it asked (_remote/ahead_imports.py)
        "ahead_imports": done.get("ahead_imports"),
        "events": events,
        # Ray's worker processes started during the run: when each started and took each title (seconds after the
        # call) -- the controller, its helpers, the Train workers: which waited on which
        "ray_processes": timeline.since(t_call),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--out", help="also write the JSON record to this file (bench/results/...)")
    ap.add_argument("--no-plain", action="store_true", help="leave out the plain TorchTrainer.fit() baseline")
    ap.add_argument("--dry-run", action="store_true", help="the bench's own check on a CPU: a tiny model, no GPU")
    ap.add_argument(
        "--cache-keys",
        action="store_true",
        help="record each compile's FX-graph cache key and its inputs, and where raynb's second run's and plain "
        "fit()'s differ (a diagnosis: the wrapping costs a moment, so its timings are not a record's)",
    )
    ap.add_argument(
        "--ab-ahead-imports",
        action="store_true",
        help="a third cold raynb run right after the second, its workers importing nothing ahead (RAYNB_PRELOAD "
        "emptied): what importing the function's modules while the worker waits saves, in one invocation",
    )
    args = ap.parse_args()
    config: dict[str, Any] = {"layers": args.layers, "batch": args.batch, "seq": args.seq}
    if args.dry_run:
        config = {"layers": 1, "batch": 2, "seq": 32, "dry_run": True}
    keys_dir = Path(tempfile.mkdtemp(prefix="fx-keys-")) if args.cache_keys else None

    def variant(name: str) -> dict[str, Any]:  # the config one variant runs with (where its compile keys go)
        return {**config, "cache_keys": str(keys_dir / f"{name}.json")} if keys_dir else config

    import raynb

    storage_cache = Path.home() / "ray_results" / ".raynb" / "compile-cache"  # the runs' storage (the default)
    for d in (Path(tempfile.gettempdir()) / f"torchinductor_{os.environ.get('USER', 'root')}", Path.home() / ".triton"):
        shutil.rmtree(d, ignore_errors=True)  # raynb's first run compiles from nothing
    shutil.rmtree(storage_cache, ignore_errors=True)  # ... with no compile cache kept in its storage either
    out: dict[str, Any] = {"what": __doc__.split("\n\n")[0].strip() if __doc__ else "", "config": config}
    out["bare"] = bare(variant("bare"))
    timeline = ProcessTimeline().start()
    t0 = time.time()
    raynb.up(local=True, progress=lambda m: None)
    out["up_s"] = time.time() - t0
    out["raynb_first"] = with_raynb(variant("raynb_first"), "first-step-1", timeline)
    out["up_processes"] = [p for p in timeline.since(t0) if p["started_s"] < out["up_s"]]
    out["raynb_second"] = with_raynb(variant("raynb_second"), "first-step-2", timeline)
    if args.ab_ahead_imports:  # the same warm compile cache as the second; later, so no colder a disk either
        out["raynb_third_no_ahead_imports"] = with_raynb(
            variant("raynb_third"), "first-step-3", timeline, env={"RAYNB_PRELOAD": ""}
        )
        third = out["raynb_third_no_ahead_imports"]
        out["ahead_imports_saved_s"] = {k: third[k] - out["raynb_second"][k] for k in ("to_fn_s", "to_first_step_s")}
    if not args.no_plain:  # after raynb's runs: it finds the node's compile cache warm, as raynb's second run does
        out["plain_fit_warm_cache"] = plain_fit(
            variant("plain_fit_warm_cache"), out["raynb_first"]["cpus_per_worker"], timeline
        )
    timeline.stop()
    raynb.down(progress=lambda m: None)
    first, second, b = (out[k]["to_first_step_s"] for k in ("raynb_first", "raynb_second", "bare"))
    out["raynb_minus_bare_s"] = first - b
    out["second_over_first"] = second / first
    if "plain_fit_warm_cache" in out:
        out["raynb_second_minus_plain_fit_s"] = second - out["plain_fit_warm_cache"]["to_first_step_s"]
    if keys_dir is not None:  # a compile that hits AOTAutograd's cache computes no FX key: those that missed
        keys = {f.stem: json.loads(f.read_text()) for f in keys_dir.glob("*.json")}
        out["fx_cache_keys"] = keys
        out["fx_key_differences"] = {
            f"raynb_first_vs_{other}": key_differences(keys["raynb_first"], keys[other])
            for other in ("plain_fit_warm_cache", "bare")
            if keys.get("raynb_first") and keys.get(other)
        }
    out["targets"] = "raynb cold <= bare + 10 s; the second cold run <= 0.6 x the first (issue 39)"
    emit(out, args.out)


if __name__ == "__main__":
    main()
