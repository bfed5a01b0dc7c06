r"""Convolution on the patch grid, two ways: self-attention that computes a given convolution (the
construction of Cordonnier et al., 2019: :class:`ConvAsAttention`), and the convolutional encoder that is
the CNN baseline of the attention encoders (:class:`ConvEncoder`)."""

from __future__ import annotations

import math
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnmm._checks import check_nonneg_int, refuse_encoder_options
from attnmm.masks import Grid, Mask, grid_size, grid_window, padding_lengths, without_padding
from attnmm.nn.multihead import MultiHeadAttention
from attnmm.nn.relative import RelativePositionBias


class ConvAsAttention(nn.Module):
    r"""Multi-head self-attention over pixels that reproduces a ``kernel`` x ``kernel`` convolution
    ("On the Relationship between Self-Attention and Convolutional Layers", Cordonnier et al., 2019,
    Theorem 1).

    Every pixel is a token, attending under a :class:`~attnmm.masks.Grid` mask with the
    convolution's kernel, and there is one head per kernel offset :math:`\Delta_h`. The query and
    key projections are zero, so a head's scores are its relative position bias alone:
    :math:`0` for the offset :math:`\Delta_h` and :math:`-\gamma` for every other one. For a large
    gap :math:`\gamma` the softmax is one-hot (for :math:`\gamma = 10^4`,
    :math:`e^{-\gamma}` is exactly 0 in floating point), so head :math:`h` returns the value of the
    pixel at :math:`i + \Delta_h`:

    .. math::
        \mathrm{MHA}(\mathbf{X})_i = \sum_{h} \mathrm{head}_h(i)\, \mathbf{W}^O_h + \mathbf{b}^O
        = \sum_{h} \mathbf{x}_{i + \Delta_h} \mathbf{W}^V_h \mathbf{W}^O_h + \mathbf{b}^O
        = \sum_{\Delta} \mathbf{W}_{\Delta}\, \mathbf{x}_{i + \Delta} + \mathbf{b}
        = \mathrm{Conv2d}(\mathbf{X})_i

    with :math:`\mathbf{W}^V_h` copying the input channels into head :math:`h` and
    :math:`\mathbf{W}^O_h = \mathbf{W}_{\Delta_h}^\top`, the kernel's tap at that offset. The
    convolution's zero padding is a frame of zero tokens around the image (their values are zero,
    so a head whose offset falls on the frame adds nothing, as the padded taps do), and the output
    is read off the first ``out_channels`` features of the pixels inside the frame.

    Tokens have width :math:`D = H E` with :math:`H = \mathrm{kernel}^2` heads of width
    :math:`E = \max(C_\mathrm{in}, \lceil C_\mathrm{out} / H \rceil)`; the input channels fill the
    first :math:`C_\mathrm{in}` features, the rest are zero.

    Args:
        in_channels (int): input channels :math:`C_\mathrm{in}`.
        out_channels (int): output channels :math:`C_\mathrm{out}`.
        kernel_size (int, optional): odd kernel side. (default: :obj:`3`)
        gap (float, optional): score gap :math:`\gamma` between a head's offset and the others.
            (default: :obj:`1e4`)

    Shapes:
        - **input:** image (B, C_in, height, width)
        - **output:** (B, C_out, height, width), as ``conv(image)`` with ``padding=kernel_size // 2``

    Examples:
        >>> import torch
        >>> conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        >>> attn = ConvAsAttention.from_conv(conv)
        >>> attn.attn.num_heads  # one head per kernel offset
        9
        >>> x = torch.randn(2, 3, 6, 5)
        >>> torch.allclose(attn(x), conv(x), atol=1e-5)
        True
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int = 3, gap: float = 1e4) -> None:
        super().__init__()
        self.in_channels = check_nonneg_int("in_channels", in_channels, minimum=1)
        self.out_channels = check_nonneg_int("out_channels", out_channels, minimum=1)
        self.kernel_size = check_nonneg_int("kernel_size", kernel_size, minimum=1)
        if self.kernel_size % 2 == 0:
            raise ValueError(f"kernel_size must be odd (a centred window), got {kernel_size}")
        if not gap > 0:
            raise ValueError(f"gap must be > 0, got {gap}")
        self.gap = float(gap)
        heads = self.kernel_size**2
        self.head_dim = max(self.in_channels, math.ceil(self.out_channels / heads))
        self.embed_dim = heads * self.head_dim
        bias = RelativePositionBias.for_grid(heads, self.kernel_size)
        self.attn = MultiHeadAttention(self.embed_dim, heads, position_bias=bias)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Random kernel (as ``nn.Conv2d`` initialises one), with the attention weights that compute it."""
        conv = nn.Conv2d(self.in_channels, self.out_channels, self.kernel_size)
        self.load_conv(conv.weight, conv.bias)

    @classmethod
    def from_conv(cls, conv: nn.Conv2d, gap: float = 1e4) -> ConvAsAttention:
        """The attention layer computing ``conv``, a stride-1, undilated, ungrouped convolution with
        an odd square kernel and ``padding = kernel // 2`` (zeros)."""
        k = conv.kernel_size
        if (k[0] != k[1] or k[0] % 2 == 0 or conv.stride != (1, 1) or conv.dilation != (1, 1) or conv.groups != 1
                or conv.padding != (k[0] // 2, k[0] // 2) or conv.padding_mode != "zeros"):
            raise ValueError(
                "from_conv needs an odd square kernel, stride 1, dilation 1, groups 1 and zero padding kernel // 2, "
                f"got kernel_size={k}, stride={conv.stride}, dilation={conv.dilation}, groups={conv.groups}, "
                f"padding={conv.padding}, padding_mode={conv.padding_mode!r}"
            )
        layer = cls(conv.in_channels, conv.out_channels, k[0], gap)
        layer.load_conv(conv.weight, conv.bias)
        return layer.to(conv.weight.device, conv.weight.dtype)

    @torch.no_grad()
    def load_conv(self, weight: Tensor, bias: Tensor | None = None) -> None:
        r"""Set the attention weights so that the layer computes the convolution with ``weight``
        (C_out, C_in, k, k) and ``bias`` (C_out,)."""
        k, E = self.kernel_size, self.head_dim
        expected = (self.out_channels, self.in_channels, k, k)
        if tuple(weight.shape) != expected:
            raise ValueError(f"weight must have shape (C_out, C_in, k, k) = {expected}, got {tuple(weight.shape)}")
        attn = self.attn
        for proj in (attn.q_proj, attn.k_proj, attn.v_proj, attn.out_proj):
            proj.weight.zero_()
            if proj.bias is not None:
                proj.bias.zero_()
        # head h = a * k + b looks at offset (a - k // 2, b - k // 2); its value is the input's channels
        eye = torch.eye(self.in_channels, dtype=weight.dtype, device=weight.device)
        for h in range(k * k):
            a, b = divmod(h, k)
            attn.v_proj.weight[h * E : h * E + self.in_channels, : self.in_channels] = eye
            attn.out_proj.weight[: self.out_channels, h * E : h * E + self.in_channels] = weight[:, :, a, b]
        if bias is not None and attn.out_proj.bias is not None:
            attn.out_proj.bias[: self.out_channels] = bias
        # the bias table's row t is the offset ((t // k) - k // 2, (t % k) - k // 2): head h prefers row h
        table = attn.position_bias.table  # type: ignore[union-attr]  # (k*k, H)
        table.fill_(-self.gap)
        table.diagonal().zero_()

    def forward(self, image: Tensor) -> Tensor:
        if image.dim() != 4 or image.size(1) != self.in_channels:
            raise ValueError(
                f"image must be (B, C_in, height, width) with C_in = {self.in_channels}, got shape {tuple(image.shape)}"
            )
        B, C, height, width = image.shape
        r = self.kernel_size // 2
        framed = F.pad(image, (r, r, r, r))  # (B, C_in, height + 2r, width + 2r): the zero padding
        Hp, Wp = height + 2 * r, width + 2 * r
        x = framed.flatten(2).transpose(1, 2)  # (B, L, C_in), pixels row-major
        x = F.pad(x, (0, self.embed_dim - C))  # (B, L, D)
        out = self.attn(x, mask=Grid(Hp, Wp, self.kernel_size))  # (B, L, D)
        out = out[..., : self.out_channels].transpose(1, 2).reshape(B, self.out_channels, Hp, Wp)
        return out[:, :, r : r + height, r : r + width]  # (B, C_out, height, width)

    def extra_repr(self) -> str:
        return f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, gap={self.gap:g}"


class ConvBlock(nn.Module):
    r"""A pre-norm residual block whose token mixing is a ``kernel`` x ``kernel`` convolution over
    the patch grid, in place of :class:`~attnmm.nn.EncoderLayer`'s attention.

    .. math::
        \mathbf{X}' = \mathbf{X} + \mathrm{Dropout}\big(\mathrm{Conv2d}(\mathrm{LN}(\mathbf{X}))\big),
        \qquad \mathbf{X}'' = \mathbf{X}' + \mathrm{Dropout}\big(\mathrm{FFN}(\mathrm{LN}(\mathbf{X}'))\big)

    Args:
        d_model (int): token width D (the convolution's channels).
        kernel (int, optional): odd kernel size, zero padding keeps the grid. (default: :obj:`3`)
        dim_feedforward (int, optional): hidden width of the feed-forward network. (default: :obj:`256`)
        dropout (float, optional): dropout on the residual branches. (default: :obj:`0.0`)

    Shapes:
        - **input:** x (B, L, D) with L = height * width, row-major
        - **output:** (B, L, D)
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
        hidden = check_nonneg_int("dim_feedforward", dim_feedforward, minimum=1)
        self.ffn = nn.Sequential(nn.Linear(d_model, hidden), nn.GELU(), nn.Linear(hidden, d_model))
        self.drop = nn.Dropout(dropout)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for m in (self.norm1, self.conv, self.norm2, self.ffn[0], self.ffn[2]):
            cast(nn.Module, m).reset_parameters()  # type: ignore[operator]

    def forward(self, x: Tensor, height: int, width: int) -> Tensor:
        B, _, D = x.shape
        h = self.norm1(x).transpose(1, 2).reshape(B, D, height, width)  # (B, D, height, width)
        x = x + self.drop(self.conv(h).flatten(2).transpose(1, 2))  # (B, L, D)
        return x + self.drop(self.ffn(self.norm2(x)))


class ConvEncoder(nn.Module):
    r"""A stack of :class:`ConvBlock` and a final LayerNorm: a small CNN over patch tokens that
    takes the same ``encoder(x, mask)`` call as :class:`~attnmm.nn.Encoder`, so a recipe can
    swap attention for convolution and nothing else.

    .. math::
        \mathbf{X}^{(\ell)} = \mathrm{ConvBlock}_\ell(\mathbf{X}^{(\ell - 1)}), \qquad
        \mathrm{ConvEncoder}(\mathbf{X}) = \mathrm{LN}(\mathbf{X}^{(\mathrm{num\_layers})})

    A ``kernel`` x ``kernel`` convolution (zero-padded) lets patch :math:`i` see exactly the allowed set
    of ``Grid(height, width, kernel)``, so that is the mask it honours: a mask whose
    :func:`~attnmm.masks.grid_window` is ``(kernel, 1)``, maybe with the key padding of whole
    images. Any other mask (another kernel, a dilation, NATTEN's shifted border, padded images, a
    window over a sequence, full attention) is refused, naming it: a convolution cannot compute it.
    Without a mask the convolution's own neighbourhood is used, on the ``grid_size`` grid. The grid
    comes from ``grid_size`` or, when unset, from the mask's :func:`~attnmm.masks.grid_size`.

    Args:
        d_model (int): token width D.
        num_layers (int): number of blocks.
        kernel (int, optional): odd kernel size. (default: :obj:`3`)
        dim_feedforward (int, optional): hidden width of the feed-forward networks. (default: :obj:`256`)
        dropout (float, optional): dropout of every block. (default: :obj:`0.0`)
        grid_size (tuple[int, int], optional): ``(height, width)`` of the patch grid.
            (default: :obj:`None`, read from the mask)

    Shapes:
        - **input:** x (B, L, D), mask (a :class:`~attnmm.masks.Grid` unless ``grid_size`` is set)
        - **output:** (B, L, D)

    Examples:
        >>> import torch
        >>> from attnmm.masks import Grid
        >>> enc = ConvEncoder(d_model=16, num_layers=2)
        >>> enc(torch.randn(2, 49, 16), Grid(7, 7, kernel=3)).shape  # (B, L, D)
        torch.Size([2, 49, 16])
    """

    def __init__(
        self, d_model: int, num_layers: int, kernel: int = 3, dim_feedforward: int = 256, dropout: float = 0.0,
        grid_size: tuple[int, int] | None = None,
    ) -> None:
        super().__init__()
        self.num_layers = check_nonneg_int("num_layers", num_layers, minimum=1)
        self.kernel, self.grid_size = kernel, grid_size
        self.layers = nn.ModuleList(ConvBlock(d_model, kernel, dim_feedforward, dropout) for _ in range(num_layers))
        self.norm = nn.LayerNorm(d_model)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for layer in self.layers:
            cast(ConvBlock, layer).reset_parameters()
        self.norm.reset_parameters()

    def forward(
        self, x: Tensor, mask: Mask | None = None, *, tokens: Any = None, state: Any = None,
        return_weights: bool = False,
    ) -> Tensor:
        refuse_encoder_options(self, state, return_weights)
        if x.dim() != 3:
            raise ValueError(f"ConvEncoder expects patch tokens (B, L, D), got shape {tuple(x.shape)}")
        grid = self.grid_size if self.grid_size is not None else None if mask is None else grid_size(mask)
        if grid is None:
            raise ValueError(
                f"ConvEncoder needs the patch grid: give it grid_size=(height, width) or a Grid mask, got {mask!r}"
            )
        height, width = grid
        if mask is not None:
            self._check_mask(mask, x.size(1))
        if height * width != x.size(1):
            raise ValueError(f"a {height} x {width} grid has {height * width} patches, the input has L={x.size(1)}")
        for layer in self.layers:
            x = layer(x, height, width)  # (B, L, D)
        return self.norm(x)

    def _check_mask(self, mask: Mask, num_patches: int) -> None:
        """Refuse, naming it, a mask that a ``kernel`` x ``kernel`` convolution does not compute."""
        lengths = padding_lengths(mask)
        whole = lengths is None or bool((lengths == num_patches).all())
        if not whole or grid_window(without_padding(mask)) != (self.kernel, 1):
            raise ValueError(
                f"ConvEncoder computes a {self.kernel} x {self.kernel} convolution over the patch grid, which "
                f"honours Grid(height, width, kernel={self.kernel}) only (truncated borders, no dilation, whole "
                f"images), not {mask!r}; give the adapter that mask, or use an attention encoder for this one"
            )


__all__ = ["ConvAsAttention", "ConvBlock", "ConvEncoder"]
