"""Callbacks shared by the recipes."""

from __future__ import annotations

from typing import Any

import lightning as L
import torch
from lightning.pytorch.loggers import TensorBoardLogger

from attnmm._checks import check_nonneg_int


class AttentionMapLogger(L.Callback):
    """Logs, once per validation epoch, the first validation item's attention map (first layer,
    one head) and the picture of the mask it attended under, as TensorBoard images.

    Args:
        layer (int, optional): encoder layer whose weights are shown. (default: :obj:`0`)
        head (int, optional): attention head shown. (default: :obj:`0`)
        max_tokens (int, optional): crop to the first ``max_tokens`` queries and keys.
            (default: :obj:`128`)
    """

    def __init__(self, layer: int = 0, head: int = 0, max_tokens: int = 128) -> None:
        super().__init__()
        self.layer = check_nonneg_int("layer", layer)
        self.head = check_nonneg_int("head", head)
        self.max_tokens = check_nonneg_int("max_tokens", max_tokens, minimum=1)
        self._batch: Any = None

    def on_validation_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        if batch_idx == 0 and dataloader_idx == 0:
            self._batch = batch

    def figures(self, pl_module: L.LightningModule, batch: Any) -> dict[str, Any]:
        """The attention-map and mask figures of ``batch``'s first item."""
        from attnmm.viz import plot_attention, plot_mask

        was_training = pl_module.training
        pl_module.eval()
        with torch.no_grad():
            _, tokens, weights = pl_module.encode(batch, return_weights=True)  # type: ignore[operator]
        pl_module.train(was_training)
        x = tokens.x
        n = x.size(0) if x.dim() == 2 else x.size(1)
        if tokens.lengths is not None:
            n = int(tokens.lengths[0])
        n = max(1, min(n, self.max_tokens))
        w = weights[min(self.layer, len(weights) - 1)]
        dense = w.to_dense(x.size(0) if x.dim() == 2 else x.size(1), x.size(0) if x.dim() == 2 else x.size(1),
                           None if w.batch is None else x.size(0))
        dense = dense[0] if dense.dim() == 4 else dense  # (H, L, S) of the first item
        head = min(self.head, dense.size(0) - 1)
        attn = plot_attention(dense[head, :n, :n].float().cpu(), title=f"layer {self.layer}, head {head}")
        figs = {"attention_map": attn}
        if tokens.mask is not None:
            figs["mask"] = plot_mask(tokens.mask, n, n) if not tokens.mask.batched else _plot_item_mask(tokens, n)
        return figs

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._batch is None or trainer.sanity_checking:
            return
        import matplotlib.pyplot as plt

        figs = self.figures(pl_module, self._batch)
        for logger in trainer.loggers:
            if isinstance(logger, TensorBoardLogger):
                for name, fig in figs.items():
                    logger.experiment.add_figure(name, fig, global_step=trainer.global_step)
        for fig in figs.values():
            plt.close(fig)
        self._batch = None


def _plot_item_mask(tokens: Any, n: int) -> Any:
    """The first item's allowed matrix, cropped to n x n."""
    from attnmm.viz import plot_attention

    dense = tokens.mask.dense(tokens.x.size(1), tokens.x.size(1), tokens.x.size(0))[0, :n, :n]
    return plot_attention(dense.float(), title=repr(tokens.mask)[:60])
