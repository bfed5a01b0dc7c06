r"""A time-series adapter: multichannel series -> patch tokens, under a Window (or any) mask.

The whole new modality: one :class:`~attnmm.adapters.Adapter` subclass. Nothing in attnmm changes.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from attnmm.adapters import Adapter, Tokens, register_adapter
from attnmm.masks import Mask, Padding
from attnmm.nn import SinusoidalPE


@register_adapter("timeseries")
class TimeSeriesAdapter(Adapter):
    r"""Patch tokens of a multichannel time series, as in PatchTST (Nie et al., 2023): the series is cut
    into non-overlapping patches of ``patch_len`` steps, each patch is embedded linearly, and a
    sinusoidal position is added.

    .. math::
        \mathbf{x}_p = W\,\mathrm{vec}(\mathbf{s}_{p \ell : (p + 1) \ell}) + \mathrm{PE}(p), \qquad
        A = \mathrm{Padding}(\lceil T_b / \ell \rceil) \cap A_{\text{mask}}

    Args:
        in_channels (int, optional): channels C of the series. (default: :obj:`1`)
        patch_len (int, optional): steps per patch. (default: :obj:`8`)
        d_model (int, optional): token width D. (default: :obj:`64`)
        mask (Mask, optional): the patches' attention pattern, e.g. ``Window(4, 4)``; composed with
            the batch's padding. (default: :obj:`None`, full attention within each series)
        dropout (float, optional): dropout on the tokens. (default: :obj:`0.0`)

    Shapes:
        - **input:** a batch with ``series`` (B, T, C) zero-padded and ``lengths`` (B,)
        - **output:** :class:`Tokens` with x (B, L, D), L = ceil(T / patch_len) patches, the mask and the
          patch lengths
    """

    def __init__(
        self,
        in_channels: int = 1,
        patch_len: int = 8,
        d_model: int = 64,
        mask: Mask | None = None,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        if in_channels < 1 or patch_len < 1 or d_model < 1:
            raise ValueError(f"in_channels, patch_len and d_model must be >= 1, got {in_channels}, {patch_len}, "
                             f"{d_model}")
        self.in_channels, self.patch_len, self.out_dim = in_channels, patch_len, d_model
        self.mask = mask
        self.embed = nn.Linear(patch_len * in_channels, d_model)
        self.pos = SinusoidalPE(d_model)
        self.drop = nn.Dropout(dropout)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.embed.reset_parameters()

    def forward(self, batch: dict[str, Any]) -> Tokens:
        series, lengths = batch["series"], batch["lengths"]
        if series.dim() != 3 or series.size(2) != self.in_channels:
            raise ValueError(f"series must be (B, T, C) with C = in_channels = {self.in_channels}, "
                             f"got shape {tuple(series.shape)}")
        B, T, C = series.shape
        L = -(-T // self.patch_len)  # patches, the last one zero-padded
        series = nn.functional.pad(series, (0, 0, 0, L * self.patch_len - T))  # (B, L * patch_len, C)
        patches = series.reshape(B, L, self.patch_len * C)  # (B, L, patch_len * C)
        x = self.drop(self.pos(self.embed(patches)))  # (B, L, D)
        patch_lengths = (lengths + self.patch_len - 1) // self.patch_len  # (B,)
        mask: Mask = Padding(patch_lengths)
        if self.mask is not None:
            mask = mask & self.mask
        return Tokens(x, mask, lengths=patch_lengths)

    @classmethod
    def example_batch(cls, batch_size: int = 2) -> dict[str, Tensor]:
        generator = torch.Generator().manual_seed(0)
        lengths = torch.randint(20, 64, (batch_size,), generator=generator)
        series = torch.randn(batch_size, 64, 1, generator=generator)
        series = series * (torch.arange(64).view(1, -1, 1) < lengths.view(-1, 1, 1))  # zero padding
        return {"series": series, "lengths": lengths, "label": torch.randint(0, 4, (batch_size,), generator=generator)}
