"""%%raytrain / raynb.train on a real local head over Ray Client, CPU workers with gloo."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

import raynb
from raynb._run import active_run
from raynb._settings import resolve
from raynb._train import start_run
from raynb.errors import CaptureError, RunAborted, TrainingFailedError
from tests.s3.server import s3_server, weed_binary

from .conftest import alive_train_workers

TRAIN_CELL = """
import time
import torch
import ray.train.torch
import raynb
torch.manual_seed(0)
X = torch.randn(512, 8)
Y = X @ torch.arange(1.0, 9.0).unsqueeze(1)
model = ray.train.torch.prepare_model(torch.nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=config["lr"])
for step in range(config["steps"]):
    loss = torch.nn.functional.mse_loss(model(X), Y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    raynb.report(loss=loss, samples=len(X))
    time.sleep(config.get("sleep", 0.0))
"""


def _nice_by_process(*titles: str) -> dict[str, list[int]]:
    """The nice value of every thread of this machine's processes with these titles (this head's, in the tests)."""
    out: dict[str, list[int]] = {t: [] for t in titles}
    for proc in Path("/proc").iterdir():
        try:
            title = (proc / "cmdline").read_bytes().split(b"\0")[0].decode().strip().split(".")[0]  # ray::Cls.method
            if title in out:
                for task in (proc / "task").iterdir():
                    out[title].append(int((task / "stat").read_text().rsplit(")", 1)[1].split()[16]))
        except (OSError, ValueError):
            pass
    return out


def test_metrics_from_both_ranks_arrive_while_running(cluster: raynb.Cluster) -> None:
    from raynb._cell import compile_cell

    fn = compile_cell(TRAIN_CELL, {"__name__": "__main__"})
    settings = resolve({"workers": 2, "cpus_per_worker": 1})
    run, _ = start_run(fn, settings, config={"lr": 0.02, "steps": 60, "sleep": 0.1}, name="live-test")
    seen_live: set[int] = set()
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and run.status not in ("succeeded", "failed", "aborted"):
        if not run._done.is_set():
            seen_live |= {r["rank"] for r in run.stream.records}
        if seen_live == {0, 1}:
            break
        time.sleep(0.1)
    assert seen_live == {0, 1}, "metrics from both ranks must reach the notebook while the run goes"
    assert not run._done.is_set()
    # the run's sink (where each report is handled) runs in the time training leaves: every thread at nice 19; the
    # launcher and the registry (the control path: starting, stopping, finishing) keep their priority
    nice = _nice_by_process("ray::MetricsSink", "ray::Launcher", "ray::RunRegistry")
    assert nice["ray::MetricsSink"] and set(nice["ray::MetricsSink"]) == {19}, nice
    assert nice["ray::Launcher"] and nice["ray::RunRegistry"], nice  # both found, so the next line checks something
    assert 19 not in nice["ray::Launcher"] + nice["ray::RunRegistry"], nice
    run._wait()
    assert run.status == "succeeded" and run.error is None
    df = run.metrics
    assert list(df.columns[:3]) == ["rank", "step", "time"] and {"loss", "samples"} <= set(df.columns)
    assert sorted(df["rank"].unique()) == [0, 1]
    assert df.groupby("rank")["step"].max().tolist() == [60, 60]
    for _, g in df.groupby("rank"):
        losses = g.sort_values("step")["loss"].tolist()
        assert losses[-1] < losses[0] * 0.2, "loss must fall"
    assert run.result["path"].endswith("live-test")
    assert run.first_step_at is not None and run.elapsed > 0


def test_failing_rank_gives_one_clear_error_with_cell_line_numbers(ip) -> None:
    cell = (
        "import ray.train\n"  # cell line 2
        "rank = ray.train.get_context().get_world_rank()\n"  # line 3
        "if rank == 1:\n"  # line 4
        "    raise ValueError(f'bad shard on rank {rank}')\n"  # line 5
    )
    result = ip.run_cell(f"%%raytrain --workers 2 --name fail-test --out failed_run\n{cell}")
    err = result.error_in_exec
    assert isinstance(err, TrainingFailedError)
    text = err.message
    assert text.startswith("Rank 1 of 2 failed with ValueError: bad shard on rank 1")
    assert "cell line 5, in train_loop_per_worker" in text
    assert "raise ValueError(f'bad shard on rank {rank}')" in text
    assert "_worker.py" not in text  # raynb's wrapper (raynb/_worker.py) is not the user's business
    run = ip.user_ns["failed_run"]
    assert run.status == "failed" and run.error.ranks == [1] and run.error.type == "ValueError"


def test_interrupt_aborts_the_run_and_stops_workers(ip, cluster: raynb.Cluster) -> None:
    ip.user_ns["SLOW"] = 0.25

    seen_alive: list[int] = []

    def interrupt_at_step_3() -> None:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            run = active_run()
            if run is not None and run.step >= 3:
                # the query that later says "no workers" must first see them: a query that always answers [] fails
                seen_alive.append(len(alive_train_workers(cluster.dashboard_url)))
                os.kill(os.getpid(), signal.SIGINT)
                return
            time.sleep(0.05)

    threading.Thread(target=interrupt_at_step_3, daemon=True).start()
    cell = TRAIN_CELL.replace('time.sleep(config.get("sleep", 0.0))', "time.sleep(SLOW)")
    result = ip.run_cell('%%raytrain --workers 2 --config {"lr": 0.01, "steps": 1000} --out aborted_run\n' + cell)
    t_abort = time.monotonic()
    err = result.error_in_exec
    assert isinstance(err, RunAborted), repr(err)
    assert "aborted at step" in err.message
    run = ip.user_ns["aborted_run"]
    assert run.status == "aborted" and run.aborted_at_step >= 3
    assert seen_alive == [2], seen_alive
    while alive_train_workers(cluster.dashboard_url) and time.monotonic() - t_abort < 30:
        time.sleep(0.2)
    assert alive_train_workers(cluster.dashboard_url) == [], "the workers must be stopped, not left running"
    assert ip.run_cell("40 + 2").result == 42  # the kernel stays usable


def test_unpicklable_global_is_named(ip) -> None:
    ip.run_cell("import threading\nshared_lock = threading.Lock()")
    with pytest.raises(CaptureError) as ei:
        ip.run_cell_magic("raytrain", "--workers 2", "with shared_lock:\n    pass")
    assert "`shared_lock`" in ei.value.message


def test_syntax_error_points_at_the_cell_line(ip) -> None:
    result = ip.run_cell("%%raytrain --workers 2\nx = 1\nfor i in range(3)\n    pass")
    assert "line 3" in result.error_in_exec.message


def test_globals_config_local_module_and_plain_ray_train_report(ip, tmp_path: Path) -> None:
    """Notebook globals, --config, a module beside the notebook, and ray.train.report without the ~2 s stall."""
    (tmp_path / "nb_helpers.py").write_text("def scale(x):\n    return 10 * x\n")
    old = os.getcwd()
    os.chdir(tmp_path)
    sys.path.insert(0, str(tmp_path))
    try:
        ip.run_cell("import nb_helpers\nOFFSET = 5")
        cell = (
            "import time, ray.train\n"
            "for i in range(config['n']):\n"
            "    t0 = time.perf_counter()\n"
            "    ray.train.report({'value': nb_helpers.scale(i) + OFFSET, 'cwd_ok': os.path.exists('nb_helpers.py')})\n"
            "    raynb.report(report_ms=(time.perf_counter() - t0) * 1000)\n"
        )
        ip.run_cell("import os, raynb")
        result = ip.run_cell("%%raytrain --workers 2 --config {'n': 20} --out helper_run\n" + cell)
        assert result.error_in_exec is None, result.error_in_exec
        df = ip.user_ns["helper_run"].metrics
        values = df.dropna(subset=["value"])
        assert sorted(values[values["rank"] == 0]["value"].tolist()) == [10 * i + 5 for i in range(20)]
        assert values["cwd_ok"].all()
        # Ray's own path blocks ~2,000 ms per call (health-check interval 2 s); raynb's takes microseconds (the
        # benchmark measures it): 20 ms is far above that on a loaded machine and far below any of Ray's waits
        assert df["report_ms"].dropna().median() < 20, "ray.train.report must take raynb's non-blocking path"
    finally:
        os.chdir(old)
        sys.path.remove(str(tmp_path))
        sys.modules.pop("nb_helpers", None)


def test_terminal_ipython_prints_a_text_progress_line(cluster: raynb.Cluster) -> None:
    """In terminal IPython (no HTML frontend) the same run prints a readable progress line, which ends before a
    worker's print lands (never glued onto it), and none of Ray's start-up chatter."""
    import subprocess

    script = (
        "%load_ext raynb\n%raycluster up --local\n"
        "%%raytrain --workers 2 --name terminal-run\nimport raynb, time\n"
        "for i in range(20):\n    raynb.report(loss=1.0 / (i + 1), samples=10)\n    time.sleep(0.05)\n"
        "    if i == 10:\n        print('hello from a worker', flush=True)\n\n\nexit\n"
    )
    ipy = Path(sys.executable).with_name("ipython")
    p = subprocess.run(
        [str(ipy), "--no-banner", "--colors=NoColor", "--simple-prompt"],
        input=script,
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = p.stdout
    assert "reusing the embedded Ray head" in out
    final = [ln for ln in out.replace("\r", "\n").splitlines() if "[terminal-run] succeeded" in ln]
    assert final and "step 20" in final[-1] and "loss 0.05" in final[-1] and "samples/s" in final[-1], out[-2000:]
    assert "<div" not in out  # no HTML in a terminal
    hello = [ln for ln in out.replace("\r", "\n").splitlines() if "hello from a worker" in ln]
    assert len(hello) == 2 and all("[terminal-run]" not in ln for ln in hello), hello  # one per worker, own lines
    assert "SIGTERM handler" not in out + p.stderr and "Requesting resources" not in out


def test_a_lost_worker_restarts_the_run_from_its_checkpoint_on_s3(
    cluster: raynb.Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``max_failures=1``: rank 1 kills its own process (SIGKILL) at step 5 of the first attempt; Ray Train starts
    the workers again, the function resumes from its latest checkpoint (Ray's ``get_checkpoint`` idiom), the run
    succeeds, and the records and the view say which attempt they belong to. The storage is a real S3 server
    (SeaweedFS, tests/s3): Ray Train writes the checkpoints through pyarrow's S3 filesystem and reads them back for
    the restart, this test reads them there too, and a second run with the same name resumes from the newest one.

    Its checkpoints follow the Ray idiom `report(m, checkpoint=ckpt if rank == 0 else None)`: a call that names
    `checkpoint` must go to Ray on every rank (Ray Train synchronises the ranks on it; a rank taking raynb's fast path
    would leave rank 0 waiting), and the last checkpoint lands in the storage path. (Plain metric reports take the
    fast path: test_globals_config_local_module_and_plain_ray_train_report times them.)"""

    def fn(config: dict) -> None:
        import json
        import tempfile

        import ray.train

        rank = ray.train.get_context().get_world_rank()
        ckpt = ray.train.get_checkpoint()
        start = 1
        if ckpt is not None:
            with ckpt.as_directory() as d:
                start = json.loads(Path(d, "state.json").read_text())["step"] + 1
        for step in range(start, 9):
            if ckpt is None and step == 5 and rank == 1:
                os.kill(os.getpid(), signal.SIGKILL)
            with tempfile.TemporaryDirectory() as d:
                keep = rank == 0 and step % 2 == 0
                if keep:
                    Path(d, "state.json").write_text(json.dumps({"step": step}))
                checkpoint = ray.train.Checkpoint.from_directory(d) if keep else None
                ray.train.report({"loss": 1.0 / step, "step": step}, checkpoint=checkpoint)

    from raynb.display import render_bundle

    weed = s3_server(tmp_path / "s3") if weed_binary() is not None else None
    if weed is None:
        pytest.skip("SeaweedFS is not built: `bash tests/s3/build.sh` (make test builds it)")
    with weed as s3:
        storage = s3.uri("runs")
        settings = resolve({"workers": 2, "storage_path": storage, "max_failures": 1})
        run = raynb.train(fn, settings=settings, display=False, name="restart-test")
        assert run.status == "succeeded", run.error
        ckpt = run.result["checkpoint"]  # rank 0's last, through Ray, in the storage path: on the S3 server
        assert ckpt and ckpt.startswith("raynb/runs/restart-test/checkpoint_"), ckpt
        with s3.filesystem().open_input_stream(f"{ckpt}/state.json") as f:
            assert json.loads(f.read()) == {"step": 8}

        def resumed(config: dict) -> None:
            import json

            import ray.train

            with ray.train.get_checkpoint().as_directory() as d:  # the same name: Ray Train finds the newest
                ray.train.report({"resumed_from": json.loads(Path(d, "state.json").read_text())["step"]})

        again = raynb.train(resumed, settings=resolve({"workers": 1, "storage_path": storage}), display=False,
                            name="restart-test")  # fmt: skip
        assert again.status == "succeeded" and list(again.metrics.resumed_from) == [8], again.error
        # the doctor's round trip through the same storage (a file written and read back by tasks on the cluster)
        monkeypatch.setenv("RAYNB_STORAGE_PATH", storage)
        (check,) = [c for c in raynb.doctor().checks if c.name == "checkpoint storage"]
        assert check.state == "ok" and "written and read back on the only node" in check.detail, check
    df = run.metrics
    assert run.attempt == 2 and set(df.attempt) == {1, 2}, df
    second = df[df.attempt == 2]
    # resumed after a checkpoint (step 2 or 4: Train registers a checkpoint a moment after its report), not from 1
    assert second.step.min() in (3, 5) and second.step.max() == 8, second
    banner = render_bundle(run)["text/plain"].splitlines()[0]
    # which rank died and why (Ray's state API), and where the function resumed
    assert "attempt 2 of 2 (restarted after rank 1 on " in banner and "died: " in banner, banner
    assert f"resumed at step {second.step.min()}" in banner, banner
    assert 'class="raynb-mark"' in render_bundle(run)["text/html"]  # the restart, marked on the charts
