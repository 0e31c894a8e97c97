"""The run notice a RayCluster carries (``_shared/run_notice.py``) and the head's in-cluster identity
(``_remote/kube_notice.py``): pure parts. The writes themselves go to a real API server in
``tests/k8s/test_through_kubernetes.py`` (a run nobody follows) and ``tests/k8s/test_errors.py`` (what the head's
account may and may not patch)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from raynb._remote.kube_notice import PodIdentity
from raynb._shared import run_notice
from raynb._shared.run_notice import Notice, label_value, notice_of, patch_body, read

ROWS = [
    {"name": "old", "user": "bo@nb", "status": "succeeded", "started": 10.0, "ended": 50.0, "step": 9},
    {"name": "failed", "user": "al@nb", "status": "failed", "started": 60.0, "ended": 70.0, "step": 2},
    {"name": "a", "user": "al@nb", "status": "running", "started": 80.0, "ended": None, "step": 3, "last_report": 99.0},
    {"name": "b", "user": "bo@nb", "status": "running", "started": 90.0, "ended": None, "step": 7, "last_report": 98.0},
]


def test_the_notice_names_the_running_runs_newest_first_and_the_last_that_ended() -> None:
    n = notice_of(ROWS, now=100.0)
    assert [r["name"] for r in n.running] == ["b", "a"]
    assert n.running[0] == {"name": "b", "user": "bo@nb", "step": 7, "last_report": 98.0, "started": 90.0}
    assert n.last == {"name": "failed", "user": "al@nb", "status": "failed", "step": 2, "started": 60.0, "ended": 70.0}
    assert n.describe(now=100.0) == "b (bo@nb, step 7, reported 2 s ago); a (al@nb, step 3, reported 1 s ago)"


def test_the_patch_sets_the_label_to_the_newest_run_and_removes_it_when_none_runs() -> None:
    body = patch_body(notice_of(ROWS, now=100.0))
    assert body["metadata"]["labels"] == {run_notice.LABEL: "b"}
    doc = json.loads(body["metadata"]["annotations"][run_notice.ANNOTATION])
    assert [r["name"] for r in doc["running"]] == ["b", "a"] and doc["updated"] == 100.0
    idle = notice_of([r for r in ROWS if r["status"] != "running"], now=200.0)
    body = patch_body(idle)
    assert body["metadata"]["labels"] == {run_notice.LABEL: None}  # merge patch: null deletes the label
    back = read(body["metadata"]["annotations"])
    assert back == idle and back.describe(now=200.0) == "idle 2 min ago (last: failed failed)"
    assert Notice().describe() == "idle"


def test_a_notice_left_unwritten_says_how_old_it_is() -> None:
    """A head that stopped writing (gone, or its right taken away): the row says since when it knows."""
    n = notice_of(ROWS[2:3], now=100.0)
    assert n.describe(now=400.0).endswith("[as of 5 min ago]")
    assert n.same_as(notice_of(ROWS[2:3], now=500.0)) and not n.same_as(notice_of(ROWS[3:], now=100.0))


@pytest.mark.parametrize(
    ("name", "label"),
    [("train-3", "train-3"), ("Ünïcode run!", "n-code-run"), ("x" * 80, "x" * 63), ("--", "run"), ("a_b.c", "a_b.c")],
)
def test_run_names_become_label_values(name: str, label: str) -> None:
    assert label_value(name) == label


def test_unreadable_annotations_read_as_none() -> None:
    assert read(None) is None and read({}) is None
    assert read({run_notice.ANNOTATION: "{not json"}) is None and read({run_notice.ANNOTATION: "[1]"}) is None


def test_the_head_knows_its_identity_only_inside_a_pod_of_a_raycluster(tmp_path: Path) -> None:
    env = {"KUBERNETES_SERVICE_HOST": "10.100.0.1", "KUBERNETES_SERVICE_PORT": "443", "RAY_CLUSTER_NAME": "rc"}
    env["RAYNB_SERVICEACCOUNT_DIR"] = str(tmp_path)
    (tmp_path / "namespace").write_text("ray-train\n")
    assert PodIdentity.from_env(env) is None  # no token mounted (yet)
    (tmp_path / "token").write_text("t")
    ident = PodIdentity.from_env(env)
    assert ident == PodIdentity("https://10.100.0.1:443", tmp_path, "ray-train", "rc")
    assert ident.where == "RayCluster ray-train/rc"
    assert PodIdentity.from_env({**env, "KUBERNETES_SERVICE_HOST": "fd00::1"}).server == "https://[fd00::1]:443"
    assert PodIdentity.from_env({k: v for k, v in env.items() if k != "RAY_CLUSTER_NAME"}) is None  # not KubeRay's
    assert PodIdentity.from_env({k: v for k, v in env.items() if k != "KUBERNETES_SERVICE_HOST"}) is None
