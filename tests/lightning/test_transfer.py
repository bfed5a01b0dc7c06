"""The Transfer callback: the backbone frozen for exactly the first ``freeze_encoder_epochs`` epochs."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from attnmm.adapters import SpeechAdapter
from attnmm.lightning import ClassificationTask, Transfer
from attnmm.nn import Encoder, PoolingClassifier


def _task() -> ClassificationTask:
    torch.manual_seed(0)
    return ClassificationTask(SpeechAdapter(d_model=8, channels=4), Encoder(8, 2, 1, 16), PoolingClassifier(8, 3), 3)


def _trainable(module: torch.nn.Module) -> set[bool]:
    return {p.requires_grad for p in module.parameters()}


def test_freezes_the_backbone_for_the_first_epochs_then_unfreezes_it(tmp_path) -> None:
    task = _task()
    path = tmp_path / "source.ckpt"
    torch.save({"state_dict": _task().state_dict()}, path)
    transfer = Transfer(init_from=str(path), freeze_encoder_epochs=2)
    transfer.setup(None, task, "fit")  # type: ignore[arg-type]
    assert transfer.loaded
    seen = []
    for epoch in range(4):
        transfer.on_train_epoch_start(SimpleNamespace(current_epoch=epoch), task)  # type: ignore[arg-type]
        seen.append((_trainable(task.adapter), _trainable(task.encoder), _trainable(task.head)))
    frozen, free = ({False}, {False}, {True}), ({True}, {True}, {True})
    assert seen == [frozen, frozen, free, free]  # the head always learns


def test_no_freezing_and_nothing_loaded_by_default() -> None:
    task, transfer = _task(), Transfer()
    transfer.setup(None, task, "fit")  # type: ignore[arg-type]
    transfer.on_train_epoch_start(SimpleNamespace(current_epoch=0), task)  # type: ignore[arg-type]
    assert not transfer.loaded and _trainable(task) == {True}
