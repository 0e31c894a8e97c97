"""The Qwen2.5-1.5B notebook's helpers on local files (the notebook runs top to bottom once in the suite, on its EKS
path: tests/k8s/test_qwen_notebook_on_kubernetes.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import nbformat

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
