"""Ray Train code as users bring it, in `%%raytrain` cells of a real kernel on the embedded cluster.

Each cell follows an upstream guide's idiom -- the same APIs called the same way -- with a tiny model built from a
config (nothing downloaded):
- Ray Train "Get started with PyTorch" (docs.ray.io/en/latest/train/getting-started-pytorch.html) and "Saving and
  loading checkpoints" (train/user-guides/checkpoints.html): prepare_model, prepare_data_loader,
  ray.train.report(metrics, checkpoint=...) every epoch from rank 0 and checkpoint=None elsewhere, get_checkpoint()
  to resume;
- "Get started with Hugging Face Transformers" (train/getting-started-transformers.html): transformers.Trainer +
  RayTrainReportCallback + prepare_trainer;
- "Get started with PyTorch Lightning" (train/getting-started-pytorch-lightning.html): RayDDPStrategy,
  RayLightningEnvironment, RayTrainReportCallback, prepare_trainer;
- "Data loading and preprocessing" (train/user-guides/data-loading-preprocessing.html): a ray.data dataset handed to
  the run and read with get_dataset_shard("train").
Each asserts success, a falling loss in run.metrics, points in the live view and checkpoints in the storage path.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.notebook.kernels import errors, kernel, run, text

TORCH_GUIDE = """
import os, tempfile
import torch
import ray.train, ray.train.torch
from ray.train import Checkpoint

model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
model = ray.train.torch.prepare_model(model)
g = torch.Generator().manual_seed(0)
X = torch.randn(512, 8, generator=g)
y = X.sum(dim=1, keepdim=True)
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(X, y), batch_size=32, shuffle=True)
loader = ray.train.torch.prepare_data_loader(loader)
optimizer = torch.optim.SGD(model.parameters(), lr=0.02)

start_epoch = 0
checkpoint = ray.train.get_checkpoint()
if checkpoint:
    with checkpoint.as_directory() as checkpoint_dir:
        state = torch.load(os.path.join(checkpoint_dir, "model.pt"))
        model.module.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start_epoch = state["epoch"] + 1

for epoch in range(start_epoch, config["epochs"]):
    if ray.train.get_context().get_world_size() > 1:
        loader.sampler.set_epoch(epoch)
    for xb, yb in loader:
        loss = torch.nn.functional.mse_loss(model(xb), yb)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    metrics = {"loss": loss.item(), "epoch": epoch}
    with tempfile.TemporaryDirectory() as temp_dir:
        checkpoint = None
        if ray.train.get_context().get_world_rank() == 0:
            torch.save({"model": model.module.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch},
                       os.path.join(temp_dir, "model.pt"))
            checkpoint = Checkpoint.from_directory(temp_dir)
        ray.train.report(metrics, checkpoint=checkpoint)
"""

HF_GUIDE = """
import torch
import transformers
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments
import ray.train.huggingface.transformers

config_ = GPT2Config(n_layer=1, n_head=2, n_embd=32, vocab_size=64, n_positions=16)
model = GPT2LMHeadModel(config_)

class Tokens(torch.utils.data.Dataset):
    def __init__(self, n):
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, 8, (n, 16), generator=g)  # few distinct tokens: learnable fast
    def __len__(self):
        return len(self.ids)
    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}

training_args = TrainingArguments(
    output_dir="hf_out", num_train_epochs=3, per_device_train_batch_size=16, learning_rate=5e-3,
    logging_strategy="steps", logging_steps=2, save_strategy="epoch", report_to="none", use_cpu=True,
)
trainer = Trainer(model=model, args=training_args, train_dataset=Tokens(256))

callback = ray.train.huggingface.transformers.RayTrainReportCallback()
trainer.add_callback(callback)
trainer = ray.train.huggingface.transformers.prepare_trainer(trainer)
trainer.train()
"""

LIGHTNING_GUIDE = """
import torch
import pytorch_lightning as pl
from ray.train.lightning import (RayDDPStrategy, RayLightningEnvironment, RayTrainReportCallback,
                                 prepare_trainer)

class Regressor(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.log("train_loss", loss, on_step=False, on_epoch=True, sync_dist=True)
        return loss
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.02)

g = torch.Generator().manual_seed(0)
X = torch.randn(512, 8, generator=g)
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(X, X.sum(dim=1, keepdim=True)), batch_size=32)

trainer = pl.Trainer(
    max_epochs=4, devices="auto", accelerator="auto", strategy=RayDDPStrategy(),
    plugins=[RayLightningEnvironment()], callbacks=[RayTrainReportCallback()],
    enable_progress_bar=False, enable_checkpointing=False, logger=False,
)
trainer = prepare_trainer(trainer)
trainer.fit(Regressor(), train_dataloaders=loader)
"""

DATA_GUIDE = """
import torch
import ray.train, ray.train.torch

model = ray.train.torch.prepare_model(torch.nn.Linear(1, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
train_shard = ray.train.get_dataset_shard("train")
for epoch in range(6):
    for batch in train_shard.iter_torch_batches(batch_size=16, dtypes=torch.float32):
        pred = model(batch["x"].unsqueeze(1))
        loss = torch.nn.functional.mse_loss(pred, batch["y"].unsqueeze(1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    ray.train.report({"loss": loss.item(), "epoch": epoch})
"""

SUMMARY = """
import json, re
def summary(r, key="loss"):
    df = r.metrics
    per_epoch = df.dropna(subset=[key]).groupby("step")[key].mean()
    html = r._repr_mimebundle_()["text/html"]
    return json.dumps({"status": r.status, "error": str(r.error) if r.error else None,
                       "first": float(per_epoch.iloc[0]), "last": float(per_epoch.iloc[-1]), "n": len(per_epoch),
                       "columns": sorted(df.columns), "points": {c: int(p) for c, p in re.findall(r'data-chart="(\\w+)" data-points="(\\d+)"', html)},
                       "checkpoint": (r.result or {}).get("checkpoint"), "path": (r.result or {}).get("path"),
                       "progress": r.progress.as_dict(), "bar": "raynb-progress" in html})
print("SUMMARY-READY")
"""


@pytest.fixture(scope="module")
def kc(session_head: object, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple]:
    """One kernel for the module on the session's head, with a storage path of its own."""
    storage = tmp_path_factory.mktemp("runs")
    work = tmp_path_factory.mktemp("work")
    with kernel(cwd=str(work)) as (_km, client):
        out = run(
            client,
            f"%load_ext raynb\n%config RayNB.storage_path = {str(storage)!r}\n%raycluster up --local",
            timeout=300,
        )
        assert not errors(out), text(out)
        out = run(client, SUMMARY)
        assert "SUMMARY-READY" in text(out), text(out)
        yield client, storage


def _summary(client, var: str, key: str = "loss") -> dict:
    out = run(client, f"print(summary({var}, {key!r}))")
    assert not errors(out), text(out)
    return json.loads(text(out).strip().splitlines()[-1])


def _cell(client, line: str, body: str, timeout: float = 600) -> None:
    out = run(client, f"%%raytrain {line}\n{body}", timeout=timeout)
    assert not errors(out), text(out)[-4000:]


def test_pytorch_guide_with_checkpoints(kc) -> None:
    client, storage = kc
    _cell(client, '--workers 2 --name torch-guide --config {"epochs": 3} --steps 3 --out torch_run', TORCH_GUIDE)
    s = _summary(client, "torch_run")
    assert s["status"] == "succeeded" and s["n"] == 3 and s["last"] < s["first"], s
    assert s["progress"]["total"] == 3 and s["progress"]["fraction"] == 1.0 and s["bar"], s  # --steps
    assert s["points"]["loss"] >= 3, s["points"]  # the live view drew every epoch
    assert s["checkpoint"] and Path(s["checkpoint"]).is_relative_to(storage / "torch-guide"), s
    assert (Path(s["checkpoint"]) / "model.pt").is_file()
    # (the same run name again resumes from the latest checkpoint through the same get_checkpoint() idiom:
    # tests/integration/test_train.py's restart on S3 runs it, on storage every node can reach)


def test_hugging_face_trainer_with_rays_callback(kc) -> None:
    client, storage = kc
    _cell(client, "--workers 2 --name hf-guide --out hf_run", HF_GUIDE)
    s = _summary(client, "hf_run")
    assert s["status"] == "succeeded" and s["n"] >= 2 and s["last"] < s["first"], s
    # the Trainer's own max_steps (256 samples / (16 x 2 ranks) x 3 epochs), with no flag and no line in the cell
    assert s["progress"]["total"] == 24 and s["progress"]["done"] == 24 and s["bar"], s["progress"]
    assert {"loss", "learning_rate", "epoch"} <= set(s["columns"]), s["columns"]
    assert s["points"]["loss"] >= 2, s["points"]
    assert s["checkpoint"] and Path(s["checkpoint"]).is_relative_to(storage / "hf-guide"), s
    assert any(Path(s["checkpoint"]).rglob("model.safetensors")), "the Transformers checkpoint is in storage"


def test_lightning_with_rays_strategy_and_callback(kc) -> None:
    client, storage = kc
    _cell(client, "--workers 2 --name lightning-guide --out pl_run", LIGHTNING_GUIDE)
    s = _summary(client, "pl_run", "train_loss")
    assert s["status"] == "succeeded" and s["n"] == 4 and s["last"] < s["first"], s
    # Lightning's own total (512 samples / 32 a batch / 2 ranks x 4 epochs), with no flag and no line in the cell
    assert s["progress"]["total"] == 32 and s["progress"]["done"] == 32 and s["bar"], s["progress"]
    assert s["points"]["loss"] >= 4, s["points"]  # the metric chart (its title says train_loss)
    assert s["checkpoint"] and Path(s["checkpoint"]).is_relative_to(storage / "lightning-guide"), s
    assert any(Path(s["checkpoint"]).rglob("*.ckpt")), "the Lightning checkpoint is in storage"


def test_ray_data_dataset_handed_to_the_run(kc) -> None:
    client, _storage = kc
    out = run(client, "import ray\nds = ray.data.from_items([{'x': i / 64, 'y': 3 * i / 64 + 1} for i in range(128)])")
    assert not errors(out), text(out)
    _cell(client, "--workers 2 --name data-guide --datasets train=ds --out data_run", DATA_GUIDE)
    s = _summary(client, "data_run")
    assert s["status"] == "succeeded" and s["n"] == 6 and s["last"] < s["first"] / 2, s
    # the Python twin's own ScalingConfig: integration/test_train.py's resumed run; its `datasets=` is what the
    # magic's --datasets hands raynb.train


def test_the_twin_refuses_a_shape_given_twice(kc) -> None:
    client, _ = kc
    out = run(
        client,
        "import raynb\nfrom ray.train import ScalingConfig\n"
        "raynb.train(lambda c: None, workers=4, scaling_config=ScalingConfig(num_workers=2), display=False)",
    )
    errs = errors(out)
    assert len(errs) == 1 and errs[0]["ename"] == "UsageError", text(out)
    assert re.search(r"workers.*ScalingConfig\.num_workers.*given twice: 4 and 2", errs[0]["evalue"]), errs[0]
