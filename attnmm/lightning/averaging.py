r"""Averaging the weights of the best checkpoints of a run, as the checkpoint ``fit`` selects."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from torch import Tensor

from attnmm._checks import check_nonneg_int


class AverageCheckpoints(L.Callback):
    r"""The average of the weights of the ``k`` best validation epochs of a run, saved as the run's best
    checkpoint (the averaging of the n best models of ESPnet; Izmailov et al., 2018, on why averaged
    weights generalise).

    At the end of each validation epoch the weights are scored by the run's ``ModelCheckpoint`` metric
    (``monitor``, ``mode``: the recipes' ``checkpoint:`` key, said once); the ``k`` best are kept (in
    memory, on the CPU). When training ends,

    .. math::
        \bar{\theta} = \frac{1}{k} \sum_{e \in \mathrm{best}_k} \theta_e

    is written as ``averaged-best{k}.ckpt`` beside the other checkpoints and becomes the
    ``ModelCheckpoint``'s ``best_model_path``: what ``fit`` then tests or validates
    (``ckpt_path="best"``, :class:`~attnmm.lightning.RecipeCLI`), and what ``test --ckpt_path`` reads
    when given that file. Integer buffers (counters) are the best epoch's. With fewer than ``k``
    validation epochs, the ones there are are averaged; a ``fast_dev_run`` averages nothing. The kept
    weights are part of the callback's state, so a resumed run averages the same epochs.

    Args:
        k (int, optional): the number of best epochs averaged; 1 keeps the best checkpoint as it is.
            (default: :obj:`5`)

    Examples:
        >>> AverageCheckpoints(k=5)
        AverageCheckpoints(k=5)
    """

    def __init__(self, k: int = 5) -> None:
        super().__init__()
        self.k = check_nonneg_int("k", k, minimum=1)
        self.kept: list[tuple[float, int, dict[str, Tensor]]] = []  # (score, epoch, CPU state dict)
        self.path: str | None = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(k={self.k})"

    @staticmethod
    def _checkpoint(trainer: L.Trainer) -> ModelCheckpoint:
        callback = trainer.checkpoint_callback
        if not isinstance(callback, ModelCheckpoint) or callback.monitor is None:
            raise RuntimeError(
                "AverageCheckpoints ranks epochs by the ModelCheckpoint's monitored metric, but the trainer has no "
                "ModelCheckpoint with a monitor: add one (the recipes' checkpoint: key sets monitor and mode)"
            )
        return callback

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking or trainer.state.fn != "fit" or getattr(trainer, "fast_dev_run", False):
            return  # (a smoke run writes no checkpoint)
        checkpoint = self._checkpoint(trainer)
        assert checkpoint.monitor is not None  # (_checkpoint refuses one without)
        value = trainer.callback_metrics.get(checkpoint.monitor)
        if value is None:
            raise RuntimeError(
                f"AverageCheckpoints: the monitored metric {checkpoint.monitor!r} was not logged in validation; "
                f"logged: {sorted(trainer.callback_metrics)}"
            )
        score = float(value) if checkpoint.mode == "max" else -float(value)
        if len(self.kept) == self.k and score <= self.kept[-1][0]:
            return
        state = {k: v.detach().to("cpu", copy=True) for k, v in pl_module.state_dict().items()}
        self.kept.append((score, trainer.current_epoch, state))
        self.kept.sort(key=lambda item: -item[0])  # best first; a tie keeps the earlier epoch first
        del self.kept[self.k :]

    def average(self) -> dict[str, Tensor]:
        r"""The average of the kept weights (floating entries; others are the best epoch's)."""
        if not self.kept:
            raise RuntimeError("AverageCheckpoints has no validated weights yet; it averages after validation epochs")
        states = [state for _, _, state in self.kept]
        return {
            name: torch.stack([s[name] for s in states]).mean(0).to(value.dtype) if value.is_floating_point() else value
            for name, value in states[0].items()
        }

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not self.kept:
            return
        checkpoint = self._checkpoint(trainer)
        pl_module.load_state_dict(self.average())
        folder = Path(checkpoint.dirpath or trainer.default_root_dir)
        path = folder / f"averaged-best{self.k}.ckpt"
        trainer.save_checkpoint(path)
        checkpoint.best_model_path = str(path)
        self.path = str(path)
        epochs = sorted(epoch for _, epoch, _ in self.kept)
        print(f"AverageCheckpoints: averaged the weights of epochs {epochs} into {path}")

    def state_dict(self) -> dict[str, Any]:
        return {"k": self.k, "kept": [list(item) for item in self.kept]}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.kept = [(float(s), int(e), dict(w)) for s, e, w in state_dict.get("kept", [])][: self.k]
