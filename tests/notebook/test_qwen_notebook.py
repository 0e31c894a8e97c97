"""The Qwen2.5-1.5B notebook, run top to bottom on the embedded cluster with a tiny Qwen2 and offline data."""

from __future__ import annotations

import json
import re
from pathlib import Path

import nbformat

from raynb.notebook import execute
from tests.notebook.qwen_checks import check_warm_section

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "notebooks" / "qwen25_finetune_eks.ipynb"


def _helpers() -> dict:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    ns: dict = {"__name__": "__main__"}
    for c in nb.cells:
        if "helpers" in c.metadata.get("tags", []):
            exec(compile(c.source, "<helpers>", "exec"), ns)
    return ns


def test_dataset_loader_reads_local_files_with_datasets(tmp_path: Path) -> None:
    """The online path (Hugging Face `datasets`) on local JSON-lines and text files."""
    ns = _helpers()
    jsonl = tmp_path / "docs.jsonl"
    jsonl.write_text("\n".join(json.dumps({"text": t}) for t in ["one plus one equals 2.", "", "copy: a -> a."]))
    txt = tmp_path / "docs.txt"
    txt.write_text("first line\nsecond line\n")
    assert ns["load_texts"](str(jsonl)) == ["one plus one equals 2.", "copy: a -> a."]
    assert ns["load_texts"](str(txt)) == ["first line", "second line"]
    cfg = {"dataset": str(jsonl), "pretrained": False, "seq_len": 8, "batch": 2}
    block = next(ns["batches"](cfg, rank=1, world=2))
    assert tuple(block.shape) == (2, 8) and int(block.max()) < 256  # bytes


def test_offline_corpus_is_structured_text() -> None:
    docs = _helpers()["offline_corpus"](200)
    sums = [d for d in docs if " plus " in d]
    a, b, c = map(int, re.match(r"(\d+) plus (\d+) equals (\d+)\.", sums[0]).groups())
    assert a + b == c and len(set(docs)) > 150


def test_qwen_notebook_on_the_embedded_cluster(artifacts: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("RAYNB_HOME", str(tmp_path / "home"))  # its last cell stops the head: one of its own
    out = artifacts / "qwen25-tiny-local.ipynb"
    params = {
        "CLUSTER": "local",
        "WORKERS": 2,
        "GPU": False,
        "PRETRAINED": False,
        "TINY": True,
        "SEQ_LEN": 64,
        "BATCH": 8,
        "STEPS": 120,
        "WARMUP": 5,
        "LR": 3e-3,
        "COMPILE": False,
        "OUTPUT_DIR": str(tmp_path / "weights"),
        "PROBE_SIZES": [1 << 18, 1 << 20],
    }
    summary = execute(NOTEBOOK, out, params, cwd=NOTEBOOK.parent)
    assert summary.errors == []
    names = {r["name"]: r for r in summary.runs}
    main = next(r for n, r in names.items() if n.startswith("raytrain-"))
    assert main["status"] == "succeeded" and main["step"] == 120
    assert names["qwen-tcp"]["status"] == "succeeded"
    assert names["raynb-bench"]["status"] == names["raynb-bench-tcp"]["status"] == "succeeded"
    text = "\n".join(json.dumps(c.get("outputs", [])) for c in nbformat.read(out, as_version=4).cells)
    m = re.search(r"loss (\d+\.\d+) -> (\d+\.\d+) over 120 steps", text)
    assert m and float(m[2]) < float(m[1]) * 0.6, "the offline corpus must be learnable"
    assert (tmp_path / "weights" / "config.json").exists()
    assert any((tmp_path / "weights").glob("*.safetensors"))
    m = re.search(r'fine-tuned weights: ([^\s\\"]+)', text)  # the Ray Train checkpoint in the run's storage path
    assert m and (Path(m[1]) / "config.json").exists(), text[-2000:]
    check_warm_section(nbformat.read(out, as_version=4).cells, steps=120)
