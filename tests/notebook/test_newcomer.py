"""What a newcomer sees, in a real kernel: a typo found before any worker starts, one error per failure, no waiting
text on a finished run, no made-up throughput, "total" said, the smoothing named, `list` naming why Kubernetes was not
asked, and no chatter on `up`."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from tests.notebook.kernels import errors, kernel, run, text


@pytest.fixture(scope="module")
def kc(session_head: object, tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    """One kernel for the module, on the session's head (`list` with nothing running, and the quiet `up` of a new
    head, are checked where a head starts: test_cli_and_local_options.py)."""
    home = tmp_path_factory.mktemp("home")
    env = {"KUBECONFIG": str(home / "no-kubeconfig"), "HOME": str(home)}
    with kernel(env=env) as (_km, client):
        out = run(client, "%load_ext raynb\n%raycluster list")
        assert not errors(out), text(out)
        listing = text(out)
        up = run(client, "%raycluster up --local", timeout=300)
        assert not errors(up), text(up)
        yield client, listing, text(up)


def _final_display(msgs: list[dict]) -> tuple[str, str]:
    shown = [m for m in msgs if m["msg_type"] in ("display_data", "update_display_data")]
    assert shown, "no live view"
    data = shown[-1]["content"]["data"]
    return data.get("text/html", ""), data.get("text/plain", "")


def test_list_and_a_quiet_up_on_a_running_head(kc) -> None:
    _client, listing, up = kc
    lines = listing.splitlines()
    assert lines[0].split()[:3] == ["NAME", "NAMESPACE", "KIND"], listing  # a table with headers
    assert any(ln.split()[:4] == ["local", "-", "local", "running"] for ln in lines), listing  # the running head
    assert "No Kubernetes configuration found." in listing  # and why Kubernetes was not asked
    assert (
        "SIGTERM handler" not in up and "reusing the embedded Ray head" in up and "connected to ray://127.0.0.1:" in up
    )


def test_an_undefined_name_is_found_before_any_worker_starts(kc) -> None:
    client, _, _ = kc
    out = run(client, "%%raytrain --workers 2\nimport time\nprint(undefined_thing)\n", timeout=60)
    errs = errors(out)
    assert len(errs) == 1 and errs[0]["ename"] == "UndefinedNameError", text(out)
    assert "`undefined_thing` (line 3)" in errs[0]["evalue"] and "--no-name-check" in "".join(errs[0]["traceback"])
    assert not [m for m in out if m["msg_type"] in ("display_data", "update_display_data")]  # no run was started


def test_a_failed_run_says_its_error_once(kc) -> None:
    """The escape hatch (--no-name-check: the workers decide) and a failure on one rank, in one run: one error, with
    the cell's line; Ray's copies stay in Ray's logs; the view says failed and shows no waiting frames."""
    client, _, _ = kc
    cell = (
        "%%raytrain --workers 2 --no-name-check\nimport ray.train\n"
        "if ray.train.get_context().get_world_rank() == 1:\n    print(undefined_thing)\n"
    )
    out = run(client, cell, timeout=300)
    errs = errors(out)
    assert [e["ename"] for e in errs] == ["TrainingFailedError"], text(out)
    assert "NameError" in errs[0]["evalue"] and "undefined_thing" in errs[0]["evalue"], errs[0]["evalue"]
    assert "cell line 4" in "\n".join(errs[0]["traceback"])
    html, plain = _final_display(out)
    streams = "".join(m["content"]["text"] for m in out if m["msg_type"] == "stream")
    assert "undefined_thing" not in streams and "Traceback" not in streams, streams  # Ray's copies stay in its logs
    assert "undefined_thing" not in html and "undefined_thing" not in plain  # the view says failed; the error why
    assert 'data-status="failed"' in html
    # a run that failed before its first report shows no "waiting" frames at all
    assert "waiting for the first report" not in html and "report samples=" not in html and "<svg" not in html


def test_throughput_says_total_and_how_it_smooths(kc) -> None:
    """A steady run's rate, total and per rank, in the cell's text and HTML. (That a burst of back-to-back reports
    has no time base, so no rate, is the view's arithmetic: tests/unit/test_display.py.)"""
    client, _, _ = kc
    steady = (
        "%%raytrain --workers 2 --out steady\nimport raynb, time\n"
        "for i in range(60):\n    time.sleep(0.05)\n    raynb.report(loss=1.0 / (i + 1), samples=64)\n"
    )
    out = run(client, steady, timeout=300)
    assert not errors(out), text(out)
    html, plain = _final_display(out)
    m = re.search(r"([\d,]+) samples/s total \(([\d,]+) per rank\)", plain)
    assert m, plain
    total, per = (int(g.replace(",", "")) for g in m.groups())
    # 2 ranks x 64 samples every 0.05 s (sleep) plus the step's own time: at most 2,560/s, and not far below
    assert 0.7 * 2560 < total < 2560 * 1.01 and abs(total / 2 - per) <= 1, plain
    assert re.search(r"throughput[^<]*rolling mean of \d+ steps", html), "the chart says how it smooths"


def test_error_colours_follow_ipython(kc) -> None:
    client, _, _ = kc
    out = run(client, "%colors nocolor\n%raycluster up --local --values x.env")
    (err,) = errors(out)
    assert err["ename"] == "UsageError" and not any("\x1b[" in ln for ln in err["traceback"]), err["traceback"]
    run(client, "%colors linux")
    (err,) = errors(run(client, "%raycluster up --local --values x.env"))
    assert "\x1b[31m" in err["traceback"][0]
