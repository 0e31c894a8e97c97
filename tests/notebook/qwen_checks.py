"""Checks on the Qwen notebook's executed outputs, shared by its embedded-cluster and Kubernetes tests."""

from __future__ import annotations

import ast
import re

#: every character of the notebook's offline corpus ("a plus b equals c.", "copy: w1 w2 -> ...", "reverse: ..."),
#: one document a line
_WORDS = ["ray", "train", "gpu", "node", "efa", "nccl", "loss", "step", "token", "batch", "shard", "rank"]
CORPUS_ALPHABET = set("0123456789 .:->\n") | set("plus equals copy reverse") | set("".join(_WORDS))


def check_warm_section(cells: list, steps: int) -> None:
    """The warm cells: the model built once stays on each rank; training goes on from where the last cell left it."""

    def result(tag: str) -> list:
        return [
            ast.literal_eval(o["data"]["text/plain"])
            for c in cells
            if tag in c.metadata.get("tags", [])
            for o in c.get("outputs", [])
            if o.output_type == "execute_result"
        ]

    assert re.fullmatch(r"rank 0 of 2: [\d,]+ parameters on cpu", result("warm-build")[0])
    first, second = result("warm-train")
    assert (first["steps_done"], second["steps_done"]) == (steps, 2 * steps)  # the same model, trained on
    (ev,) = result("warm-eval")
    assert ev["steps_trained"] == steps and ev["eval_loss"] < 5.0, ev  # ln(512) = 6.2 before training
    prompt = "12 plus 30 equals"
    assert ev["sample"].startswith(prompt), ev
    # the model's own continuation (the sample begins with the prompt): after training on the offline corpus it
    # writes that corpus's characters -- an untrained byte model writes any of 256 bytes (undecodable ones as U+FFFD)
    continuation = ev["sample"][len(prompt) :]
    assert continuation and set(continuation) <= CORPUS_ALPHABET, ev
    printed = "".join(o.get("text", "") for c in cells for o in c.get("outputs", []) if o.output_type == "stream")
    assert re.search(r"warm group warm-\S+: 2 CPU .* holds 0 GPUs, 4 cells run, memory per rank: rank 0 ", printed)
    assert re.search(r"warm group warm-\S+ stopped", printed), printed[-2000:]
