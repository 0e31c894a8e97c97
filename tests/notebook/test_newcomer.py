"""What a newcomer sees, in a real kernel: a typo found before any worker starts, `list` naming why Kubernetes was not
asked, no chatter on `up`, error colours. (A failed run's one error, and the throughput "total" with its smoothing,
are checked on the quickstart's own runs: tests/packaging/test_wheel.py; the rate's arithmetic and the error's
assembly are unit tests: tests/unit/test_display.py, tests/unit/test_run_error.py.)"""

from __future__ import annotations

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


def test_list_and_a_quiet_up_on_a_running_head(kc) -> None:
    _client, listing, up = kc
    lines = listing.splitlines()
    assert lines[0].split()[:3] == ["NAME", "NAMESPACE", "KIND"], listing  # a table with headers
    assert any(ln.split()[:4] == ["local", "-", "local", "running"] for ln in lines), listing  # the running head
    assert "No Kubernetes configuration found." in listing  # and why Kubernetes was not asked
    assert "SIGTERM handler" not in up and "reusing the embedded Ray head" in up and "as a Ray driver" in up


def test_an_undefined_name_is_found_before_any_worker_starts(kc) -> None:
    client, _, _ = kc
    out = run(client, "%%raytrain --workers 2\nimport time\nprint(undefined_thing)\n", timeout=60)
    errs = errors(out)
    assert len(errs) == 1 and errs[0]["ename"] == "UndefinedNameError", text(out)
    assert "`undefined_thing` (line 3)" in errs[0]["evalue"] and "--no-name-check" in "".join(errs[0]["traceback"])
    assert not [m for m in out if m["msg_type"] in ("display_data", "update_display_data")]  # no run was started


def test_error_colours_follow_ipython(kc) -> None:
    client, _, _ = kc
    out = run(client, "%colors nocolor\n%raycluster up --local --values x.env")
    (err,) = errors(out)
    assert err["ename"] == "UsageError" and not any("\x1b[" in ln for ln in err["traceback"]), err["traceback"]
    run(client, "%colors linux")
    (err,) = errors(run(client, "%raycluster up --local --values x.env"))
    assert "\x1b[31m" in err["traceback"][0]
