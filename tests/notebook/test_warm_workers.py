"""A warm worker group in real kernels on the embedded cluster, as one journey (two kernels, two groups): state that
stays on each rank across cells, results and pulls, an interrupt and a failing cell that keep the group, another
kernel told who holds the resources, a rank stuck in a collective that loses the group with no worker left behind, a
new group's fresh namespace, and a killed kernel whose group ends by itself. `%raytrain warm stop` as a user ends a
group: the Qwen notebook's warm section (tests/k8s/test_qwen_notebook_on_kubernetes.py)."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest

from raynb._remote.warm_worker import POLL_S
from tests.notebook.kernels import errors, kernel, run, text

GRACE_S = float(os.environ.get("RAYNB_CLIENT_RECONNECT_GRACE_S", "30"))


def _result(msgs: list[dict]) -> str:
    return "".join(m["content"]["data"]["text/plain"] for m in msgs if m["msg_type"] == "execute_result")


def _printed(msgs: list[dict]) -> str:
    """What the cell printed. Not the lines Ray forwards from the workers' own stderr (`(RayTrainWorker pid=N) ...`):
    they reach the kernel when Ray's log monitor sends them, and a warm cell now answers within milliseconds, so a
    warning an earlier cell raised on the workers may print during this one."""
    out = "".join(m["content"]["text"] for m in msgs if m["msg_type"] == "stream")
    return "".join(ln for ln in out.splitlines(keepends=True) if "(RayTrainWorker pid=" not in ln)


pytestmark = pytest.mark.journey


@pytest.fixture(scope="module")
def kernels(session_head: object, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Any, Any]]:
    """(the kernel manager and client of the kernel whose groups the stages use, and a watcher: a second kernel on
    the same cluster) -- both on the session's head (its RAYNB_HOME, inherited), no Kubernetes."""
    env = {"KUBECONFIG": str(tmp_path_factory.mktemp("warm-home") / "no-kubeconfig")}
    with kernel(env=env) as (_wkm, watcher), kernel(env=env) as (km, kc):
        for c in (watcher, kc):
            up = run(c, "%load_ext raynb\nimport raynb, time\n%raycluster up --local", timeout=300)
            assert not errors(up), text(up)
        yield km, kc, watcher


BUILD = """%%raytrain --warm --workers 2
import torch, ray.train
rank = ray.train.get_context().get_world_rank()
torch.manual_seed(0)
model = ray.train.torch.prepare_model(torch.nn.Linear(4, 1))
steps = 0
(rank, ray.train.get_context().get_world_size())
"""

TRAIN = """%%raytrain --warm
import raynb
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for i in range(20):
    loss = model(torch.ones(8, 4) * (rank + 1)).pow(2).mean()
    opt.zero_grad(); loss.backward(); opt.step(); steps += 1
    raynb.report(loss=loss.item())
(steps, rank)
"""


def test_a_warm_group_keeps_each_ranks_state_across_cells(kernels: tuple[Any, Any, Any]) -> None:
    _km, kc, _ = kernels
    out = run(kc, BUILD, timeout=300)
    assert not errors(out), text(out)
    assert _result(out) == "(0, 2)", text(out)  # rank 0's last expression is the cell's result
    assert "2 CPU workers (1 CPUs each); it holds 0 GPUs until `%raytrain warm stop`, 30:00 idle" in text(out)
    out = run(kc, TRAIN, timeout=120)
    assert not errors(out), text(out)
    assert _result(out) == "(20, 0)", text(out)  # the model and `steps` cell 1 left on the rank
    assert "raynb-run" in "".join(m["content"]["data"].get("text/html", "") for m in out if "data" in m["content"])
    # ranks differ where they should: each keeps its own `rank`; DDP kept the weights equal
    out = run(kc, "g = raynb.warm()\nprint(g.pull('rank', rank=1), g.pull('steps', rank=1))")
    assert _printed(out).split() == ["1", "20"], text(out)
    out = run(kc, "%%raytrain --warm\nw = float(sum(p.sum() for p in model.parameters()))\nw")
    assert not errors(out), text(out)
    out1 = run(kc, "print(repr(g.pull('w', rank=1)))")
    assert _printed(out1).strip() == _result(out), (text(out), text(out1))  # DDP's all-reduce kept them equal
    out = run(kc, "print(g.run(lambda cfg: cfg['x'] + 1, {'x': 1}))")
    assert _printed(out).strip() == "2", text(out)
    # a DDP model pickles, but only its workers can rebuild it: its repr comes back, said so
    out = run(kc, "print(g.pull('model', rank=1))")
    assert "cannot be rebuilt in the notebook" in _printed(out) and "DistributedDataParallel" in _printed(out)


def test_an_interrupt_stops_the_cell_on_every_rank_and_keeps_the_group(kernels: tuple[Any, Any, Any]) -> None:
    km, kc, _ = kernels
    loop = kc.execute("%%raytrain --warm\nimport time\nwhile True:\n    time.sleep(0.05)\n")
    time.sleep(4)
    km.interrupt_kernel()
    seen = _until_idle(kc, loop, timeout=60)
    assert any(m["msg_type"] == "error" and m["content"]["ename"] == "KeyboardInterrupt" for m in seen), seen
    assert "state are kept" in _printed(seen), seen
    time.sleep(1)  # ipykernel drops requests that arrive right after an error (stop_on_error)
    out = run(kc, TRAIN, timeout=120)
    assert _result(out) == "(40, 0)", text(out)  # training goes on from where it was


def test_a_failing_cell_or_a_value_that_cannot_travel_is_said_and_the_group_stays(
    kernels: tuple[Any, Any, Any],
) -> None:
    _km, kc, _ = kernels
    # a failing cell shows its error with the cell's line, and the group stays usable
    bad = errors(run(kc, "%%raytrain --warm\nx = 1\nundefined_thing + x\n", timeout=60))
    assert bad and bad[0]["ename"] == "WarmCellError" and "NameError" in bad[0]["evalue"], bad
    assert "cell line 3" in bad[0]["evalue"] and "undefined_thing + x" in bad[0]["evalue"], bad
    out = run(kc, "%%raytrain --warm\nsteps + x")
    assert _result(out) == "41", text(out)
    # a value that cannot travel: its repr, said so; a name that is not there: close names
    out = run(kc, "%%raytrain --warm\nimport threading\nthreading.Lock()")
    assert "cannot travel back" in _printed(out) and "unlocked" in _result(out), text(out)
    out = run(kc, "%%raytrain --warm\nif rank == 1:\n    only_on_1 = 'one'")
    assert not errors(out), text(out)
    assert _printed(run(kc, "print(g.pull('only_on_1', rank=1))")).strip() == "one"
    run(kc, "import threading\nlock = threading.Lock()")
    bad = errors(run(kc, "%%raytrain --warm\nlock"))  # a notebook global that cannot travel: named
    assert bad and bad[0]["ename"] == "CaptureError" and "`lock`" in bad[0]["evalue"], bad
    bad = errors(run(kc, "g.pull('modle')"))
    assert bad and "no 'modle' on rank 0" in bad[0]["evalue"] and "model" in bad[0]["evalue"], bad
    # a different shape is refused with the way to restart
    bad = errors(run(kc, "%%raytrain --warm --workers 1\n1"))
    assert bad and "warm group has 2 CPU" in bad[0]["evalue"] and "warm stop" in bad[0]["evalue"], bad


def test_the_group_is_shown_and_another_kernel_is_told_who_holds_the_resources(
    kernels: tuple[Any, Any, Any],
) -> None:
    _km, kc, watcher = kernels
    shown = _printed(run(kc, "%raytrain warm"))
    assert "2 CPU workers (1 CPUs each)" in shown and "holds 0 GPUs" in shown, shown
    assert re.search(r"rank 1 [\d,]+ MB RAM", shown), shown  # no CUDA on this machine: RAM only
    status = text(run(kc, "%raycluster status"))
    assert "warm group warm-" in status and "holds 0 GPUs" in status, status
    # another kernel wanting a group the cluster cannot also hold is told who holds the resources
    bad = errors(run(watcher, "raynb.warm(workers=2)", timeout=120))
    assert bad and bad[0]["ename"] == "InsufficientResourcesError", bad
    assert "held by: warm-" in bad[0]["evalue"] and "started by" in bad[0]["evalue"], bad


def test_a_rank_stuck_in_a_collective_loses_the_group_and_no_worker_stays_behind(
    kernels: tuple[Any, Any, Any],
) -> None:
    """A rank blocked inside a collective cannot take the interrupt: after 10 s the group is stopped (Ray Train's
    stop, as `%raytrain warm stop` ends in when the workers do not finish), said plainly, and every CPU is free."""
    km, kc, _ = kernels
    stuck = kc.execute(
        "%%raytrain --warm\nimport time, torch.distributed as dist\nif dist.get_rank() == 0:\n"
        "    dist.all_reduce(torch.ones(1))  # rank 1 never joins\nelse:\n    while True:\n        time.sleep(0.05)\n"
    )
    time.sleep(4)
    km.interrupt_kernel()
    seen = _until_idle(kc, stuck, timeout=90)
    lost = [m["content"] for m in seen if m["msg_type"] == "error"]
    assert lost and lost[0]["ename"] == "WarmGroupLost", seen
    assert "Rank(s) 0 did not stop within 10 s" in lost[0]["evalue"] and "state is lost" in lost[0]["evalue"], lost
    time.sleep(1)  # stop_on_error, as above
    out = run(kc, WAIT_ALL_CPUS_FREE, timeout=90)  # the stuck group's workers are gone
    free, total = _cpus_free(out)
    assert free == total, text(out)


def test_a_new_group_has_a_fresh_namespace_where_raynb_needs_no_import(kernels: tuple[Any, Any, Any]) -> None:
    """A function the cell defines calls raynb.report, as the same code does in a cold cell, without this cell (or
    an earlier one on the rank) importing raynb."""
    _km, kc, _ = kernels
    out = run(
        kc,
        "%%raytrain --warm --workers 2\nimport torch, torch.distributed as dist\n"
        "def note(v):\n    raynb.report(note=v)\n    return v\n(dist.get_backend(), note(7))",
        300,
    )
    assert _result(out) == "('gloo', 7)", text(out)


def test_a_killed_kernels_warm_group_ends_within_a_minute(kernels: tuple[Any, Any, Any]) -> None:
    km, _kc, watcher = kernels
    km.shutdown_kernel(now=True)  # SIGKILL, with the second group running
    killed = time.monotonic()
    out = run(
        watcher,
        "def warm_running():\n    return [r['name'] for r in raynb.runs().rows if r['name'].startswith('warm-') "
        "and r['status'] == 'running']\nt = time.time()\nwhile warm_running() and time.time() - t < 90:\n"
        "    time.sleep(1)\nprint('still running:', warm_running())",
        timeout=120,
    )
    assert "still running: []" in _printed(out), text(out)
    took = time.monotonic() - killed
    # Ray Client keeps a dropped session for the reconnect grace; the workers notice its mailbox gone within a poll
    bound = GRACE_S + POLL_S + 10
    assert took < bound, f"the group must end within {bound:.0f} s of its kernel dying, not {took:.0f} s"
    out = run(watcher, WAIT_ALL_CPUS_FREE, timeout=90)  # and its workers gave their CPUs back
    free, total = _cpus_free(out)
    assert free == total, text(out)


WAIT_ALL_CPUS_FREE = (
    "import ray, time\nt = time.time()\n"
    "while ray.available_resources().get('CPU', 0) < ray.cluster_resources()['CPU'] and time.time() - t < 60:\n"
    "    time.sleep(0.5)\nprint('CPUS-FREE', ray.available_resources().get('CPU'), ray.cluster_resources()['CPU'])"
)


def _cpus_free(msgs: list[dict]) -> tuple[str, str]:
    """(free, total) as WAIT_ALL_CPUS_FREE printed them (a worker's last words may land in the same cell's output)."""
    found = re.findall(r"^CPUS-FREE (\S+) (\S+)$", _printed(msgs), re.M)
    assert found, _printed(msgs)
    return found[-1]


def _until_idle(kc, msg_id: str, timeout: float) -> list[dict]:
    """The iopub messages of one execute request, up to its kernel going idle."""
    deadline = time.monotonic() + timeout
    seen: list[dict] = []
    while time.monotonic() < deadline:
        try:
            m = kc.get_iopub_msg(timeout=1)
        except Exception:  # noqa: BLE001 - queue.Empty
            continue
        if m["parent_header"].get("msg_id") == msg_id:
            seen.append(m)
            if m["msg_type"] == "status" and m["content"]["execution_state"] == "idle":
                break
    return seen
