r"""Starting a task from a trained model, as a Lightning callback: load a backbone when ``fit`` begins, and
keep it frozen for the first epochs."""

from __future__ import annotations

from typing import cast

import lightning as L
from lightning.pytorch.callbacks import Callback
from torch import nn

from attnmm._checks import check_nonneg_int

__all__ = ["Transfer"]


class Transfer(Callback):
    r"""Start ``fit`` from the adapter and encoder weights (the backbone) of a compatible model, and freeze
    them for the first epochs.

    When ``fit`` begins, the backbone of ``init_from`` (a checkpoint, a backbone file, or the name of a
    backbone shipped in ``attnmm/pretrained/``; see :mod:`attnmm.lightning.pretrained`) is loaded into the
    task, before a resumed run restores its own checkpoint over it; the head keeps its fresh
    initialisation, so the new task may have other classes. A model built differently is refused with
    the mismatching entries named. For the first ``freeze_encoder_epochs`` epochs the adapter and
    encoder get no gradient (so no update and no weight decay), and the new head learns on the loaded
    features before they change. With ``init_into``, the backbone goes into that part of the model
    instead (its dotted path, a module with ``adapter`` and ``encoder`` parts such as an
    :class:`~attnmm.adapters.EncodedAdapter`: one modality's tower of a multimodal model, e.g.
    ``"adapter.adapters.audio"``), and that part is what is frozen.

    Give it to the trainer (``Trainer(callbacks=[Transfer("speech_commands_8k")])``); the recipes have it
    under the ``transfer:`` key (``--transfer.init_from``; ``--model.init_from`` is read as that).

    Args:
        init_from (str, optional): the checkpoint, backbone file or shipped name to start from.
            (default: :obj:`None`, nothing loaded)
        freeze_encoder_epochs (int, optional): epochs at the start of training during which the backbone
            is frozen; needs ``init_from``. (default: :obj:`0`)
        init_into (str, optional): the dotted path of the part that receives the backbone.
            (default: :obj:`None`, the task's own adapter and encoder)
    """

    def __init__(
        self, init_from: str | None = None, freeze_encoder_epochs: int = 0, init_into: str | None = None
    ) -> None:
        self.freeze_encoder_epochs = check_nonneg_int("freeze_encoder_epochs", freeze_encoder_epochs)
        if self.freeze_encoder_epochs and init_from is None:
            raise ValueError(
                f"freeze_encoder_epochs={freeze_encoder_epochs} freezes loaded weights, but init_from is None: give "
                "init_from (a checkpoint to start from), or set freeze_encoder_epochs=0"
            )
        if init_into is not None and init_from is None:
            raise ValueError(f"init_into={init_into!r} names where a backbone goes, but init_from is None: give both")
        self.init_from = None if init_from is None else str(init_from)
        self.init_into = init_into
        self.loaded = False  # a second fit (or a resume, restored after setup) does not load the file again

    def target(self, task: nn.Module) -> nn.Module:
        """The module whose ``adapter`` and ``encoder`` take the backbone: ``task``, or its part ``init_into``."""
        if self.init_into is None:
            return task
        try:
            return task.get_submodule(self.init_into)
        except AttributeError as err:
            raise ValueError(
                f"init_into={self.init_into!r} is not a part of the model ({err}); give the dotted path of a module "
                "with adapter and encoder parts, e.g. 'adapter.adapters.audio' for an EncodedAdapter named audio"
            ) from err

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if stage != "fit" or self.init_from is None or self.loaded:
            return
        if hasattr(pl_module, "members"):
            raise ValueError(
                "init_from loads one backbone, but an Ensemble's members are independently initialised copies: "
                "train one model from the checkpoint (ensemble=None), or an ensemble without init_from"
            )
        from attnmm.lightning.pretrained import load_backbone

        load_backbone(self.target(pl_module), self.init_from)
        self.loaded = True

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.freeze_encoder_epochs:
            frozen = trainer.current_epoch < self.freeze_encoder_epochs
            target = self.target(pl_module)
            for part in (target.adapter, target.encoder):
                cast(nn.Module, part).requires_grad_(not frozen)
