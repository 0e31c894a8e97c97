"""Units that had no test of their own: Ray Client's auth/version preflight (against a real HTTP server on
127.0.0.1 answering as Ray's dashboard does), the metrics sink's cursor and batching, the worker-side buffer, and the
resource check that refuses runs a cluster can never place."""

from __future__ import annotations

import http.server
import json
import os
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest

from raynb._cluster import session
from raynb._remote.report import Reporter
from raynb._remote.sink import MetricsSink
from raynb._runs.resources import check_resources, gpu_worker_cpus
from raynb._runs.stream import MetricStream
from raynb.display import LiveView
from raynb.errors import ConnectError, InsufficientResourcesError
from tests.unit.fake_run import fake_run


@pytest.fixture
def dashboard() -> Iterator[dict]:
    """A real HTTP server that answers like Ray's dashboard; ``state`` sets its answers."""
    state = {"/api/authentication_mode": {"authentication_mode": "token"}, "/api/version": {"ray_version": "2.58.0"}}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = state.get(self.path)
            raw = body if isinstance(body, bytes) else json.dumps(body).encode()
            self.send_response(200 if body is not None else 404)
            self.end_headers()
            self.wfile.write(raw)

        def log_message(self, *a: object) -> None:
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    state["url"] = f"http://127.0.0.1:{srv.server_address[1]}"
    yield state
    srv.shutdown()


def test_dashboard_get_reads_json_and_says_none_otherwise(dashboard: dict) -> None:
    assert session.dashboard_get(dashboard["url"], "/api/version") == {"ray_version": "2.58.0"}
    assert session.dashboard_get(dashboard["url"], "/missing") is None
    dashboard["/api/version"] = b"<html>not json</html>"
    assert session.dashboard_get(dashboard["url"], "/api/version") is None
    assert session.dashboard_get(None, "/api/version") is None


def test_token_head_without_a_token_is_refused_before_connecting(dashboard: dict, monkeypatch, tmp_path) -> None:
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(tmp_path / "none"))
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    with pytest.raises(ConnectError, match="has no Ray token") as e:
        session.auth_preflight(dashboard["url"])
    assert "~/.ray/auth_token" in (e.value.fix or "")


def test_token_head_switches_a_fresh_kernel_to_token_mode(dashboard: dict, tmp_path) -> None:
    """Before Ray is imported the kernel can still switch: preflight sets RAY_AUTH_MODE=token (a fresh process)."""
    token = tmp_path / "token"
    token.write_text("secret")
    code = (
        "import os, sys; from raynb._cluster import session; "
        f"print(session.auth_preflight({dashboard['url']!r}), os.environ.get('RAY_AUTH_MODE'), "
        "'ray._raylet' in sys.modules)"
    )
    env = {"PATH": "/usr/bin:/bin", "RAY_AUTH_TOKEN_PATH": str(token), "HOME": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
    assert out.split() == ["token", "token", "False"]


def test_disabled_head_changes_nothing(dashboard: dict, monkeypatch) -> None:
    dashboard["/api/authentication_mode"] = {"authentication_mode": "disabled"}
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    assert session.auth_preflight(dashboard["url"]) == "disabled"
    assert session.auth_preflight(None) is None  # no dashboard: nothing to ask


def test_version_mismatch_names_what_to_install() -> None:
    import ray

    here = ".".join(map(str, sys.version_info[:2]))
    session.check_versions(ray.__version__, here)  # the same: no error
    with pytest.raises(ConnectError) as e:
        session.check_versions("9.9.9", "3.99", where="the image X")
    assert "Ray 9.9.9" not in e.value.what and "Ray " + ray.__version__ + " here vs 9.9.9 on the image X" in e.value.saw
    assert "Python 3.99" in (e.value.fix or "") and "ray[client,train,default]==9.9.9" in (e.value.fix or "")


def test_sink_keeps_the_whole_history_with_bounded_memory(tmp_path, monkeypatch) -> None:
    """A kernel that attaches late reads from record 0; old records leave memory for a spill file, none is lost."""
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))

    nice = os.nice(0)
    sink = MetricsSink(mem_records=1000)
    assert os.nice(0) == nice  # a plain object in this process: only a Ray actor lowers its own priority
    sink.event({"kind": "worker_started", "rank": 0})
    for start in range(0, 5000, 250):
        sink.push([{"rank": i % 2, "step": i // 2, "loss": 1 / (i + 1)} for i in range(start, start + 250)])
        with sink._changed:  # pushes a moment apart, as workers' are: each spill (a thread of its own) has ended
            assert sink._changed.wait_for(lambda: not sink._spilling, timeout=10)
    assert len(sink._records) <= 1000  # memory bounded ...
    spills = list((tmp_path / "raynb-runs").glob("*.jsonl"))
    assert len(spills) == 1 and len(spills[0].read_text().splitlines()) == sink._base  # ... the rest on disk
    assert sink.summary() == {"step": 2499, "last_report": None, "records": 5000, "ranks": 2, "attempt": 1}
    got, cursor = [], 0
    while cursor < 5000:  # a late kernel, in pages that cross the file/memory boundary
        cursor, recs, evs = sink.read(cursor, 1, limit=777)
        got += recs
    assert [r["step"] for r in got] == [i // 2 for i in range(5000)] and got[4999]["loss"] == 1 / 5000
    cursor, recs, evs = sink.read(1234, 0, limit=3)  # any cursor, also mid-file
    assert [r["step"] for r in recs] == [617, 617, 618] and [e["kind"] for e in evs] == ["worker_started"]
    t0 = time.monotonic()
    assert sink.read(5000, 1, timeout=0.2) == (5000, [], [])  # nothing new: waits, then empty
    assert time.monotonic() - t0 >= 0.15
    sink.discard()
    assert not spills[0].exists()


def test_records_are_written_aside_without_holding_up_pushes_or_reads(tmp_path, monkeypatch) -> None:
    """The oldest records go to the spill file from a thread of their own, the sink's lock not held while they are
    written (100,000 records took 0.45 s on the 2-core host, every push and poll waiting): a push and a read meanwhile
    answer at once, the records being written read from memory; once written, from the file."""
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    writing, release = threading.Event(), threading.Event()

    class Slow:  # a value the spill's JSON writes through repr(): it holds the write until released
        def __repr__(self) -> str:
            writing.set()
            release.wait(10)
            return "slow"

    sink = MetricsSink(mem_records=100)
    sink.push([{"rank": 0, "step": i, "v": Slow() if i == 0 else i} for i in range(101)])  # past 100: a spill starts
    assert writing.wait(5) and sink._spilling
    t0 = time.monotonic()
    sink.push([{"rank": 0, "step": 101, "v": 101}])
    cursor, recs, _ = sink.read(0, 0, limit=5)
    assert time.monotonic() - t0 < 1.0  # neither waited for the write
    assert [r["step"] for r in recs] == [0, 1, 2, 3, 4] and sink._base == 0  # from memory, still
    release.set()
    with sink._changed:
        assert sink._changed.wait_for(lambda: not sink._spilling, timeout=10)
    assert sink._base == 51 and len(sink._records) == 51  # written: the bound's half, and what came meanwhile
    cursor, recs, _ = sink.read(0, 0, limit=102)
    assert cursor == 102 and [r["step"] for r in recs] == list(range(102)) and recs[0]["v"] == "slow"
    sink.discard()


def test_a_full_disk_keeps_the_records_in_memory_and_the_sink_tries_again_later(tmp_path, monkeypatch, capsys) -> None:
    """Writing aside onto a full disk (Linux's /dev/full answers every write with ENOSPC) keeps every record in memory
    and says what to do, once; the next try waits for another half of the bound (it started a thread and printed at
    every push); once the disk has room, the records go aside and read back whole, in order."""
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    sink = MetricsSink(mem_records=100)

    def push(steps: range) -> None:
        sink.push([{"rank": 0, "step": i} for i in steps])
        with sink._changed:
            assert sink._changed.wait_for(lambda: not sink._spilling, timeout=10)

    sink._spill = "/dev/full"
    push(range(101))  # past the bound: a write, which fails
    assert sink._base == 0 and len(sink._records) == 101
    said = capsys.readouterr().out
    assert "51 records stay in its sink's memory" in said and "No space left on device" in said
    assert "Free space on that disk" in said
    for i in range(101, 151):  # 50 more, one push each: no try
        push(range(i, i + 1))
    assert capsys.readouterr().out == "" and sink._base == 0
    sink._spill = str(tmp_path / "records.jsonl")  # room again
    push(range(151, 152))  # past 101 + 50: tried again, and written
    assert sink._base == 102 and len(sink._records) == 50 and capsys.readouterr().out == ""
    cursor, recs, _ = sink.read(0, 0, limit=200)
    assert cursor == 152 and [r["step"] for r in recs] == list(range(152))
    sink.discard()


def test_a_waiting_picture_call_answers_as_a_push_arrives() -> None:
    """Ray runs the sink's calls on a pool of threads: a kernel's long poll waits on one while a worker's push
    lands on another, and the push ends the wait at once (not at the poll's timeout)."""
    sink = MetricsSink()
    version, pic, _, _ = sink.picture(0, 0, timeout=0.0)
    assert (version, pic) == (0, None)
    answered: list[tuple[float, int, bytes | None]] = []
    poll = threading.Thread(target=lambda: answered.append((time.monotonic(), *sink.picture(0, 0, timeout=10)[:2])))
    poll.start()
    time.sleep(0.3)
    pushed = time.monotonic()
    sink.push([{"rank": 0, "step": 1, "loss": 2.0, "time": time.time()}])
    poll.join(timeout=5)
    ((at, version, pic),) = answered
    assert version == 1 and pic is not None and at - pushed < 2.0


def test_a_worker_on_the_sinks_node_hands_its_batches_over_the_nodes_socket(tmp_path, monkeypatch) -> None:
    """A worker on the sink's node writes its flushes to the sink's socket instead of Ray's calls (``sink=None``: a
    Ray call here would fail): its event reaches the sink ahead of its records, its printed lines come too, and
    ``close()`` returns only once the sink has taken the last batch."""
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    sink = MetricsSink()
    path = sink._channel_path()
    assert stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o700  # only the cluster's user gets in
    rep = Reporter(sink=None, rank=1, flush_interval=0.05, find_channel=lambda: path)
    rep.event({"kind": "worker_started", "rank": 1})
    for _ in range(100):
        rep.add({"loss": 0.5})
    rep.add_log("stdout", "epoch 1")
    time.sleep(0.3)  # flushes meanwhile
    assert sink.summary()["records"] == 100
    for _ in range(20_000):  # one large last batch: the sink is still reading it unless close() waits
        rep.add({"loss": 0.25})
    rep.close()
    assert rep.over == "node socket"
    _, records, events = sink.read(0, 0, limit=10**6)
    assert [r["step"] for r in records] == list(range(1, 20_101)) and {r["attempt"] for r in records} == {1}
    assert [(e["kind"], e["rank"], e["attempt"]) for e in events] == [("worker_started", 1, 1)]
    assert [x["text"] for x in sink.read_logs()[1]] == ["epoch 1"]
    sink.discard()
    assert not os.path.exists(path)


def test_a_retired_sinks_history_answers_every_read_as_the_sink_did(tmp_path, monkeypatch) -> None:
    """An ended run's sink hands its history to a file and exits; read back (by the cluster's registry), it answers
    the picture, records across the spill file, events, lines, the summary and the stall check as the sink did."""
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    sink = MetricsSink(mem_records=1000)
    sink.event({"kind": "worker_started", "rank": 0})
    for start in range(0, 2500, 250):
        sink.push(
            [{"rank": 0, "step": i + 1, "loss": 1 / (i + 1), "time": 100.0 + i} for i in range(start, start + 250)]
        )
    sink.log(0, [(1.0, "stdout", "epoch 1"), (2.0, "stderr", "warning")])
    reads = {
        "picture": (0, 0, 0.0),
        "read": (0, 0, 0.0, 10**6),
        "read_logs": (0, None, None),
        "summary": (),
        "watch": (2500, 10.0, 300.0),
    }
    before = {m: getattr(sink, m)(*args) for m, args in reads.items()}
    path = sink.retire()
    history = MetricsSink.restored(path)
    assert history._records == [] and history._base == 2500  # every record in the spill file now
    for method, args in reads.items():
        got = getattr(history, method)(*args)
        want = before[method]
        if method == "watch":  # a verdict either way; its times are now's
            assert (got["stall"] is None) == (want["stall"] is None)
            got, want = ({k: v for k, v in d.items() if k not in ("progress", "stall")} for d in (got, want))
        assert got == want, method
    history.discard()
    assert not list(tmp_path.glob("raynb-runs/*.jsonl"))


def test_report_refuses_a_checkpoint_and_names_ray_trains_report(tmp_path) -> None:
    import pytest
    from ray.train import Checkpoint

    import raynb

    with pytest.raises(TypeError, match=r"ray\.train\.report\(metrics, checkpoint=\.\.\.\), called on every rank"):
        raynb.report(loss=1.0, checkpoint=Checkpoint.from_directory(str(tmp_path)))
    raynb.report(loss=1.0, checkpoint=3)  # a metric that happens to be called so


def test_reporter_numbers_steps_bounds_its_buffer_and_converts_values() -> None:
    rep = Reporter(sink=None, rank=3, flush_interval=3600, max_buffered=3)  # the flusher never fires here
    try:
        rep.add({"loss": 1.0})
        rep.add({"loss": 0.5, "step": 10})
        rep.add({"loss": 0.25})

        class Scalar:
            def item(self) -> float:
                return 0.125

        rep.add({"loss": Scalar()})  # the 4th record pushes the oldest out
        batch = rep._take()
        assert [(r["rank"], r["step"], r["loss"]) for r in batch] == [(3, 10, 0.5), (3, 11, 0.25), (3, 12, 0.125)]
        assert rep.dropped == 1 and rep._take() == []
    finally:
        rep._stop.set()


def test_check_resources_refuses_what_can_never_be_placed() -> None:
    check_resources(2, False, 1.0, total={"CPU": 2.0})
    with pytest.raises(InsufficientResourcesError, match="3 workers x 1 CPUs = 3 CPUs") as e:
        check_resources(3, False, 1.0, total={"CPU": 2.0})
    assert "--workers 2" in (e.value.fix or "")
    with pytest.raises(InsufficientResourcesError, match="4 GPU workers") as e:
        check_resources(4, True, 1.0, total={"CPU": 16.0, "GPU": 2.0})
    assert e.value.fix == "use --workers 2"
    with pytest.raises(InsufficientResourcesError) as e:
        check_resources(1, True, 1.0, total={"CPU": 16.0})
    assert "drop --gpu" in (e.value.fix or "")


def test_each_worker_must_fit_on_one_node() -> None:
    """Ray places a worker on one node: the cluster's totals are not enough."""
    two_small = [{"CPU": 4.0}, {"CPU": 4.0}]
    with pytest.raises(InsufficientResourcesError) as e:  # 12 CPUs > 8 in all, caught by the totals anyway
        check_resources(2, False, 6.0, total={"CPU": 8.0}, nodes=two_small)
    with pytest.raises(InsufficientResourcesError) as e:  # 6 CPUs each, 8 in all: only a node of 6 holds one
        check_resources(1, False, 6.0, total={"CPU": 8.0}, nodes=two_small)
    assert "a worker needs 6 CPUs on one node, but the largest node has 4 CPUs" in e.value.what, e.value.what
    assert "nodes: 4 CPUs, 4 CPUs" in (e.value.saw or "") and "--cpus-per-worker 4" in (e.value.fix or "")
    with pytest.raises(InsufficientResourcesError) as e:  # 9 CPUs of 10, but 3 CPUs fit once on each 5-CPU node
        check_resources(3, False, 3.0, total={"CPU": 10.0}, nodes=[{"CPU": 5.0}, {"CPU": 5.0}])
    assert "3 workers of 3 CPUs were asked for, but the nodes hold 2" in e.value.what and "--workers 2" in e.value.fix
    assert check_resources(2, False, 3.0, total={"CPU": 10.0}, nodes=[{"CPU": 5.0}, {"CPU": 5.0}]) is None
    gpu_nodes = [{"CPU": 48.0, "GPU": 4.0}, {"CPU": 48.0, "GPU": 4.0}, {"CPU": 2.0}]  # g6.12xlarge x 2 and the head
    assert check_resources(8, True, 12.0, total={"CPU": 98.0, "GPU": 8.0}, nodes=gpu_nodes) is None
    small = [{"CPU": 40.0, "GPU": 4.0}, {"CPU": 40.0, "GPU": 4.0}, {"CPU": 20.0}]  # 100 CPUs, 8 GPUs in all
    with pytest.raises(InsufficientResourcesError) as e:  # 12 CPUs and a GPU a worker: 3 per 40-CPU node, 6 < 8
        check_resources(8, True, 12.0, total={"CPU": 100.0, "GPU": 8.0}, nodes=small)
    assert "8 workers of 12 CPUs and 1 GPU were asked for, but the nodes hold 6" in e.value.what, e.value.what
    assert e.value.fix == "use --workers 6 or --cpus-per-worker 10, or nodes of a bigger size.", e.value.fix


def test_a_gpu_worker_gets_its_nodes_share_of_cpus() -> None:
    """A GPU worker's default CPUs (its threads): its node's CPUs, less one on the head, divided among its GPUs; the
    smallest share where nodes differ; 1 where the share rounds below it or no GPU node is up yet."""
    head = "node:__internal_head__"
    assert gpu_worker_cpus([{"CPU": 16.0, "GPU": 1.0, head: 1.0}]) == 15.0  # the lent H200: the head is the GPU node
    g6 = [{"CPU": 48.0, "GPU": 4.0}, {"CPU": 48.0, "GPU": 4.0}, {"CPU": 2.0, head: 1.0}]  # 2 x g6.12xlarge, a CPU head
    assert gpu_worker_cpus(g6) == 12.0
    assert gpu_worker_cpus([{"CPU": 48.0, "GPU": 4.0}, {"CPU": 30.0, "GPU": 4.0}]) == 7.0
    assert gpu_worker_cpus([{"CPU": 2.0, "GPU": 4.0}]) == 1.0
    assert gpu_worker_cpus([{"CPU": 2.0, head: 1.0}]) is None  # autoscaled from zero: Ray Train's 1 CPU
    assert check_resources(8, True, gpu_worker_cpus(g6) or 1, total={"CPU": 98.0, "GPU": 8.0}, nodes=g6) is None


def test_sink_gives_each_record_its_own_ranks_attempt(monkeypatch) -> None:
    """Ray orders each worker's calls to the sink, not the ranks' among themselves: in a restarted group rank 1 may
    report before rank 0 says it started (the Ray 2.55.1 kernel's journey in CI: all of attempt 2's rank-1 steps were
    filed under attempt 1). A record belongs to its rank's newest worker; the restart is explained from the attempt
    before's workers."""
    # the cluster's answer (which of these workers' nodes or processes died): tests/integration/test_nodes.py
    monkeypatch.setattr("raynb._remote.sink._lost_workers", lambda before: [e["rank"] for e in before])

    sink = MetricsSink()
    for rank in (0, 1):
        sink.event({"kind": "worker_started", "rank": rank})
    sink.push([{"rank": r, "step": s} for s in range(3) for r in (0, 1)])
    sink.event({"kind": "worker_error", "rank": 1, "error": "rank 1 fails once"})
    sink.event({"kind": "worker_started", "rank": 1})  # the new group's rank 1 speaks first ...
    sink.push([{"rank": 1, "step": s} for s in range(6)])
    sink.log(1, [(0.0, "stdout", "rank 1, second try")])
    sink.push([{"rank": 0, "step": 2}])  # ... a late line of the old rank 0 (its worker not yet restarted)
    sink.event({"kind": "worker_started", "rank": 0})
    sink.push([{"rank": 0, "step": s} for s in range(6)])
    time.sleep(0.1)  # the restart's explanation, asked on a thread
    _, records, events = sink.read(0, 0)
    by_attempt = {a: sorted({(r["rank"], r["step"]) for r in records if r["attempt"] == a}) for a in (1, 2)}
    assert by_attempt[1] == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]
    assert by_attempt[2] == [(r, s) for r in (0, 1) for s in range(6)]
    (restart,) = [e for e in events if e["kind"] == "restart"]  # said when the lost workers are known: any time
    assert [(e["kind"], e.get("rank"), e["attempt"]) for e in events if e is not restart] == [
        ("worker_started", 0, 1),
        ("worker_started", 1, 1),
        ("worker_error", 1, 1),
        ("worker_started", 1, 2),
        ("worker_started", 0, 2),
    ]
    assert (restart["attempt"], restart["lost"]) == (2, [0, 1]) and sink.summary()["attempt"] == 2
    _, lines, _ = sink.read_logs()
    assert [x["attempt"] for x in lines] == [2]


def test_the_kernel_polls_a_run_at_the_pace_of_the_views_that_draw_it() -> None:
    """Nobody draws a run (``display=False``, a warm group between cells): its picture comes once per undrawn gap;
    a view drawing it brings the pace to the view's redraws at once, and the slow pace back when it finishes."""
    sink = MetricsSink()
    polls: list[float] = []

    class Channel:  # what MetricStream asks of a RunChannel, answered by the real sink in this process
        def picture(self, version: int, events_seen: int, timeout: float, since: dict | None = None) -> tuple:
            polls.append(time.monotonic())
            return sink.picture(version, events_seen, timeout, since)

    stop = threading.Event()

    def train() -> None:  # a worker's pushes: something new for every poll
        step = 0
        while not stop.is_set():
            step += 1
            sink.push([{"rank": 0, "step": step, "loss": 1.0, "samples": 8, "time": time.time()}])
            time.sleep(0.01)

    threading.Thread(target=train, daemon=True).start()
    stream = MetricStream(Channel(), min_gap=0.05, undrawn_gap=0.4).start()  # type: ignore[arg-type]
    view = LiveView(fake_run([], stream=stream), mode="html", hz=20)  # a notebook's view, 20 redraws a second
    try:
        time.sleep(0.9)
        undrawn = len(polls)
        started = time.monotonic()
        view.start()
        time.sleep(0.6)
        drawn = [t for t in polls if t >= started]
        view.finish()
        after = len(polls)
        time.sleep(0.9)
        slow_again = len(polls) - after
    finally:
        stop.set()
        stream.stop(final_drain=False)
    assert undrawn <= 4  # ~0.9 s / 0.4 s, not 0.9 s / 0.05 s
    assert drawn and drawn[0] - started < 0.3  # the view's start wakes the stream at once ...
    assert len(drawn) >= 3 * max(undrawn, 1)  # ... and the pictures come at its pace
    assert slow_again <= 4 and stream.gap == 0.4
    # the stream's copy, brought up to date by what each poll said changed, is the sink's picture
    stream.poll_once(timeout=0.0)
    assert stream.picture is not None and stream.picture.tput_total() == sink._picture.tput_total()
