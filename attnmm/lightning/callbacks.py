"""Callbacks shared by the recipes."""

from __future__ import annotations

from pathlib import Path
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

        tokens, weights, n = _encode(pl_module, batch, self.max_tokens)
        dense = _first_item_weights(tokens, weights[min(self.layer, len(weights) - 1)])
        head = min(self.head, dense.size(0) - 1)
        attn = plot_attention(dense[head, :n, :n].float().cpu(), title=f"layer {self.layer}, head {head}")
        figs = {"attention_map": attn}
        mask, (B, L) = tokens.mask, tokens.x.shape[:2]
        if mask is not None and not mask.batched:
            figs["mask"] = plot_mask(mask, n, n)
        elif mask is not None:  # the first item's allowed matrix, cropped to n x n
            figs["mask"] = plot_attention(mask.dense(L, L, B)[0, :n, :n].float(), title=repr(mask)[:60])
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


class AttentionMapPNG(L.Callback):
    """Saves, when a recipe run ends, the attention map of one example per encoder layer as PNG files
    ``attention_layer<i>.png`` (the heads' mean) in the run's folder, beside ``metrics.json``.

    It keeps the first batch of the last test (or validation) run and draws its first item with the
    final weights; :meth:`save` writes the pictures (:class:`~attnmm.lightning.RecipeCLI` calls it once
    per run, after writing the metrics). An encoder that returns no attention weights (an LSTM, a CNN)
    gets no picture; a graph encoder draws its weights over the first graph's nodes.

    Args:
        max_tokens (int, optional): crop to the first ``max_tokens`` queries and keys.
            (default: :obj:`64`)
    """

    def __init__(self, max_tokens: int = 64) -> None:
        super().__init__()
        self.max_tokens = check_nonneg_int("max_tokens", max_tokens, minimum=1)
        self._batch: Any = None
        #: why the last :meth:`save` wrote nothing (``None`` when it wrote the pictures)
        self.skipped: str | None = None

    def on_validation_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        if batch_idx == 0 and dataloader_idx == 0 and not trainer.sanity_checking:
            self._batch = batch

    on_test_batch_end = on_validation_batch_end

    def save(self, pl_module: L.LightningModule, folder: str | Path) -> list[Path]:
        """Write one PNG per encoder layer into ``folder`` and return their paths (none when no batch was
        kept or the encoder returns no weights)."""
        self.skipped = None
        if self._batch is None or not callable(getattr(pl_module, "encode", None)):
            self.skipped = "no batch was kept" if self._batch is None else f"{type(pl_module).__name__} has no encode"
            return []
        from matplotlib.figure import Figure

        from attnmm.viz import plot_attention

        try:
            tokens, weights, n = _encode(pl_module, self._batch, self.max_tokens)
        except ValueError as err:
            if "does not return attention weights" in str(err):
                self.skipped = str(err).split(" (")[0]
                return []
            raise
        finally:
            self._batch = None
        paths = []
        for layer, w in enumerate(weights or ()):
            if w is None:
                continue
            dense = _first_item_weights(tokens, w)  # (H, L, S)
            title = f"layer {layer}, mean of {dense.size(0)} heads, first {n} tokens"
            # a figure without a layout engine: half the time of plot_attention's own (constrained) figure
            fig = Figure(figsize=(4.0, 3.6))
            fig.subplots_adjust(left=0.16, right=0.86, top=0.78, bottom=0.04)  # room for the keys and the title
            plot_attention(dense[:, :n, :n].float().mean(0).cpu(), ax=fig.add_subplot(), title=title)
            path = Path(folder) / f"attention_layer{layer}.png"
            path.parent.mkdir(parents=True, exist_ok=True)
            fig.savefig(path, dpi=72)
            paths.append(path)
        return paths


def _encode(pl_module: L.LightningModule, batch: Any, max_tokens: int) -> tuple[Any, Any, int]:
    """The adapter's tokens and the attention weights per layer of ``batch``, in eval mode, and how many
    tokens of the first item to show: its length, at most ``max_tokens``. The batch goes where the module
    is (after a fit or test Lightning has moved the module back to the CPU, the batch kept stays on the
    accelerator)."""
    from lightning.fabric.utilities.apply_func import move_data_to_device

    batch = move_data_to_device(batch, pl_module.device)
    was_training = pl_module.training
    pl_module.eval()
    try:
        with torch.no_grad():
            _, tokens, weights = pl_module.encode(batch, return_weights=True)  # type: ignore[operator]
    finally:
        pl_module.train(was_training)
    n = tokens.x.size(0) if tokens.x.dim() == 2 else tokens.x.size(1)
    n = n if tokens.lengths is None else int(tokens.lengths[0])
    return tokens, weights, max(1, min(n, max_tokens))


def _first_item_weights(tokens: Any, w: Any) -> Any:
    """One layer's weights as a dense (H, L, S) tensor of the first item (packed tokens: of all nodes):
    :class:`~attnmm.attention.AttentionWeights`, or a graph layer's ``(edge_index, alpha)``."""
    x = tokens.x
    size = x.size(0) if x.dim() == 2 else x.size(1)
    if not hasattr(w, "to_dense"):  # PyG's form: edge_index (2, M) as (source, target), alpha (M, H)
        edge_index, alpha = w
        alpha = alpha if alpha.dim() == 2 else alpha[:, None]
        dense = alpha.new_zeros(alpha.size(1), size, size)
        dense[:, edge_index[1], edge_index[0]] = alpha.T  # row: the target (query), column: the source (key)
        return dense
    dense = w.to_dense(size, size, None if w.batch is None else x.size(0))
    return dense[0] if dense.dim() == 4 else dense  # (H, L, S) of the first item
