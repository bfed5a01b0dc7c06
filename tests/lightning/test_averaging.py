from __future__ import annotations

from pathlib import Path

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from torch import nn
from torch.utils.data import DataLoader

from attnmm.lightning import AverageCheckpoints

#: the validation score of each epoch
SCORES = [0.5, 0.1, 0.3, 0.9, 0.2]


class Toy(L.LightningModule):
    """Weights equal to the epoch number during it (the optimiser does nothing), a scripted score."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.zeros(3))
        self.register_buffer("epoch_seen", torch.zeros((), dtype=torch.long))

    def training_step(self, batch, batch_idx):
        with torch.no_grad():
            self.w.fill_(float(self.current_epoch))
            self.epoch_seen.fill_(self.current_epoch)
        return (self.w * 0.0).sum()

    def validation_step(self, batch, batch_idx):
        self.log("score", SCORES[self.current_epoch])

    def test_step(self, batch, batch_idx):
        self.log("test_w", self.w.mean())
        self.log("test_epoch_seen", self.epoch_seen.float())

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.0)


def _fit(tmp_path: Path, mode: str, k: int) -> tuple[L.Trainer, Toy, AverageCheckpoints]:
    loader = DataLoader(torch.zeros(2, 1), batch_size=1)
    average = AverageCheckpoints(k=k)
    checkpoint = ModelCheckpoint(dirpath=tmp_path / "ckpt", monitor="score", mode=mode, save_last=True)
    trainer = L.Trainer(
        max_epochs=len(SCORES), callbacks=[average, checkpoint], logger=False, enable_progress_bar=False,
        enable_model_summary=False, default_root_dir=tmp_path,
    )
    model = Toy()
    trainer.fit(model, loader, loader)
    return trainer, model, average


@pytest.mark.parametrize(("mode", "mean", "best"), [("max", 1.5, 3), ("min", 2.5, 1)])
def test_the_k_best_epochs_are_averaged_into_the_selected_checkpoint(
    tmp_path: Path, mode: str, mean: float, best: int
) -> None:
    trainer, model, average = _fit(tmp_path, mode, k=2)
    path = Path(trainer.checkpoint_callback.best_model_path)
    assert path == tmp_path / "ckpt" / "averaged-best2.ckpt" and average.path == str(path)
    state = torch.load(path, weights_only=True)["state_dict"]
    torch.testing.assert_close(state["w"], torch.full((3,), mean))  # max: epochs 3 and 0; min: epochs 1 and 4
    assert int(state["epoch_seen"]) == best  # an integer buffer is the best epoch's
    # what fit selects ("best") and what test --ckpt_path reads are the average
    loader = DataLoader(torch.zeros(1, 1), batch_size=1)
    for ckpt in ("best", str(path)):
        (result,) = trainer.test(model, loader, ckpt_path=ckpt, weights_only=True, verbose=False)
        assert result["test_w"] == pytest.approx(mean) and result["test_epoch_seen"] == best


def test_k_one_is_the_best_epoch_and_state_round_trips(tmp_path: Path) -> None:
    trainer, _, _ = _fit(tmp_path, "max", k=1)
    state = torch.load(trainer.checkpoint_callback.best_model_path, weights_only=True)
    torch.testing.assert_close(state["state_dict"]["w"], torch.full((3,), 3.0))
    # the kept weights are the callback's state (a resumed run averages the same epochs)
    saved = state["callbacks"][next(k for k in state["callbacks"] if k.startswith("AverageCheckpoints"))]
    restored = AverageCheckpoints(k=1)
    restored.load_state_dict(saved)
    assert [(pytest.approx(s), e) for s, e, _ in restored.kept] == [(0.9, 3)]
    torch.testing.assert_close(restored.average()["w"], torch.full((3,), 3.0))


def test_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="k"):
        AverageCheckpoints(k=0)
    with pytest.raises(RuntimeError, match="no validated weights"):
        AverageCheckpoints().average()
    loader = DataLoader(torch.zeros(1, 1), batch_size=1)
    trainer = L.Trainer(max_epochs=1, callbacks=[AverageCheckpoints()], enable_checkpointing=False, logger=False,
                        enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path)
    with pytest.raises(RuntimeError, match="ModelCheckpoint with a monitor"):
        trainer.fit(Toy(), loader, loader)
