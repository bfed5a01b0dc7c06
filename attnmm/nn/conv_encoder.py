r"""A convolutional encoder over a grid of patch tokens: the CNN baseline of the attention encoders."""

from __future__ import annotations

from typing import cast

from torch import Tensor, nn

from attnmm._checks import check_nonneg_int
from attnmm.masks import Grid, Mask
from attnmm.masks.compose import find_part


class ConvBlock(nn.Module):
    r"""A pre-norm residual block whose token mixing is a ``kernel`` x ``kernel`` convolution over
    the patch grid, in place of :class:`~attnmm.attention.EncoderLayer`'s attention.

    .. math::
        \mathbf{X}' = \mathbf{X} + \mathrm{Dropout}\big(\mathrm{Conv2d}(\mathrm{LN}(\mathbf{X}))\big),
        \qquad \mathbf{X}'' = \mathbf{X}' + \mathrm{Dropout}\big(\mathrm{FFN}(\mathrm{LN}(\mathbf{X}'))\big)

    Args:
        d_model (int): token width D (the convolution's channels).
        kernel (int, optional): odd kernel size, zero padding keeps the grid. (default: :obj:`3`)
        dim_feedforward (int, optional): hidden width of the feed-forward network. (default: :obj:`256`)
        dropout (float, optional): dropout on the residual branches. (default: :obj:`0.0`)

    Shapes:
        - **input:** x (B, P, D) with P = height * width, row-major
        - **output:** (B, P, D)
    """

    def __init__(self, d_model: int, kernel: int = 3, dim_feedforward: int = 256, dropout: float = 0.0) -> None:
        super().__init__()
        d_model = check_nonneg_int("d_model", d_model, minimum=1)
        kernel = check_nonneg_int("kernel", kernel, minimum=1)
        if kernel % 2 == 0:
            raise ValueError(f"kernel must be odd (a centred window), got {kernel}")
        self.norm1 = nn.LayerNorm(d_model)
        self.conv = nn.Conv2d(d_model, d_model, kernel, padding=kernel // 2)
        self.norm2 = nn.LayerNorm(d_model)
        self.ffn = nn.Sequential(
            nn.Linear(d_model, check_nonneg_int("dim_feedforward", dim_feedforward, minimum=1)),
            nn.GELU(),
            nn.Linear(dim_feedforward, d_model),
        )
        self.drop = nn.Dropout(dropout)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for m in (self.norm1, self.conv, self.norm2, self.ffn[0], self.ffn[2]):
            cast(nn.Module, m).reset_parameters()  # type: ignore[operator]

    def forward(self, x: Tensor, height: int, width: int) -> Tensor:
        B, _, D = x.shape
        h = self.norm1(x).transpose(1, 2).reshape(B, D, height, width)  # (B, D, height, width)
        x = x + self.drop(self.conv(h).flatten(2).transpose(1, 2))  # (B, P, D)
        return x + self.drop(self.ffn(self.norm2(x)))


class ConvEncoder(nn.Module):
    r"""A stack of :class:`ConvBlock` and a final LayerNorm: a small CNN over patch tokens that
    takes the same ``encoder(x, mask)`` call as :class:`~attnmm.attention.Encoder`, so a recipe can
    swap attention for convolution and nothing else.

    .. math::
        \mathbf{X}^{(\ell)} = \mathrm{ConvBlock}_\ell(\mathbf{X}^{(\ell - 1)}), \qquad
        \mathrm{ConvEncoder}(\mathbf{X}) = \mathrm{LN}(\mathbf{X}^{(\mathrm{num\_layers})})

    The grid comes from ``grid_size`` or, when unset, from the :class:`~attnmm.masks.Grid` in the
    mask the adapter hands over (the mask is otherwise unused: the kernel is the neighbourhood).

    Args:
        d_model (int): token width D.
        num_layers (int): number of blocks.
        kernel (int, optional): odd kernel size. (default: :obj:`3`)
        dim_feedforward (int, optional): hidden width of the feed-forward networks. (default: :obj:`256`)
        dropout (float, optional): dropout of every block. (default: :obj:`0.0`)
        grid_size (tuple[int, int], optional): ``(height, width)`` of the patch grid.
            (default: :obj:`None`, read from the mask)

    Shapes:
        - **input:** x (B, P, D), mask (a :class:`~attnmm.masks.Grid` unless ``grid_size`` is set)
        - **output:** (B, P, D)

    Examples:
        >>> import torch
        >>> from attnmm.masks import Grid
        >>> enc = ConvEncoder(d_model=16, num_layers=2)
        >>> enc(torch.randn(2, 49, 16), Grid(7, 7, kernel=3)).shape  # (B, P, D)
        torch.Size([2, 49, 16])
    """

    def __init__(
        self,
        d_model: int,
        num_layers: int,
        kernel: int = 3,
        dim_feedforward: int = 256,
        dropout: float = 0.0,
        grid_size: tuple[int, int] | None = None,
    ) -> None:
        super().__init__()
        self.num_layers = check_nonneg_int("num_layers", num_layers, minimum=1)
        self.grid_size = grid_size
        self.layers = nn.ModuleList(
            ConvBlock(d_model, kernel, dim_feedforward, dropout) for _ in range(self.num_layers)
        )
        self.norm = nn.LayerNorm(d_model)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for layer in self.layers:
            cast(ConvBlock, layer).reset_parameters()
        self.norm.reset_parameters()

    def forward(self, x: Tensor, mask: Mask | None = None) -> Tensor:
        if x.dim() != 3:
            raise ValueError(f"ConvEncoder expects patch tokens (B, P, D), got shape {tuple(x.shape)}")
        if self.grid_size is not None:
            height, width = self.grid_size
        else:
            grid = find_part(mask, Grid)
            if grid is None:
                raise ValueError(
                    f"ConvEncoder needs the patch grid: give it grid_size=(height, width) or a Grid mask, got {mask!r}"
                )
            height, width = grid.height, grid.width
        if height * width != x.size(1):
            raise ValueError(f"a {height} x {width} grid has {height * width} patches, the input has P={x.size(1)}")
        for layer in self.layers:
            x = layer(x, height, width)  # (B, P, D)
        return self.norm(x)


__all__ = ["ConvBlock", "ConvEncoder"]
