r"""Absolute and rotary positional encodings: sinusoidal (1-D and 2-D), learned, rotary."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from attnmm._checks import check_nonneg_int


def _check_base(base: float) -> float:
    if isinstance(base, bool) or not isinstance(base, (int, float)) or not base > 1.0:
        raise ValueError(f"base must be a number > 1, got {base!r}")
    return float(base)


def _check_x(name: str, x: Tensor, shape: str, width: int) -> None:
    if x.dim() != len(shape.split(",")) or x.size(-1) != width:
        raise ValueError(f"{name} expects x of shape {shape} with {shape[-2]}={width}, got shape {tuple(x.shape)}")


def _check_positions(positions: Tensor | None, x: Tensor, name: str) -> Tensor:
    """``positions`` must be (L,) or (B, L) matching x (B, L, ...); ``None`` is 0 .. L - 1."""
    if positions is None:
        return torch.arange(x.size(1), device=x.device)
    if not isinstance(positions, Tensor):
        raise TypeError(f"positions must be a Tensor of shape (L,) or (B, L), got {type(positions).__name__}")
    batch, length = x.size(0), x.size(1)
    if positions.shape not in ((length,), (batch, length)):
        raise ValueError(
            f"{name}: positions must have shape (L,) = ({length},) or (B, L) = ({batch}, {length}) "
            f"for an input of shape {tuple(x.shape)}, got shape {tuple(positions.shape)}"
        )
    return positions.to(x.device)


def sinusoid(positions: Tensor, dim: int, base: float = 10000.0) -> Tensor:
    r"""The sinusoidal encoding of Vaswani et al. (2017) at arbitrary (real) positions.

    .. math::
        \mathrm{PE}(p, 2i) = \sin\left(p / \mathrm{base}^{2i/d}\right), \qquad
        \mathrm{PE}(p, 2i + 1) = \cos\left(p / \mathrm{base}^{2i/d}\right)

    Args:
        positions (Tensor): positions of any shape (...,), integer or real.
        dim (int): number of channels d (odd d ends with a sine channel).
        base (float, optional): wavelength base. (default: :obj:`10000.0`)

    Returns:
        Tensor: float32 encoding of shape (..., d).

    Examples:
        >>> import torch
        >>> sinusoid(torch.arange(3), 4)[1, :2]
        tensor([0.8415, 0.5403])
    """
    half = (dim + 1) // 2
    freq = base ** (-torch.arange(half, device=positions.device, dtype=torch.float64) * 2 / dim)
    angle = positions.to(torch.float64).unsqueeze(-1) * freq  # (..., ceil(d/2))
    out = torch.stack([angle.sin(), angle.cos()], dim=-1).flatten(-2)  # (..., 2 * ceil(d/2)) interleaved
    return out[..., :dim].float()


class SinusoidalPE(nn.Module):
    r"""The fixed sinusoidal positional encoding of "Attention Is All You Need" (Vaswani et al., 2017),
    added to the input.

    .. math::
        \mathbf{x}'_{p} = \mathbf{x}_{p} + \mathrm{PE}(p), \qquad
        \mathrm{PE}(p, 2i) = \sin\left(p / 10000^{2i/d}\right), \quad
        \mathrm{PE}(p, 2i + 1) = \cos\left(p / 10000^{2i/d}\right)

    Positions default to :math:`0, \dots, L-1`; pass ``positions`` for an offset (streaming: the
    chunk starting at frame ``t`` uses ``torch.arange(t, t + L)``) or per-item positions. Nothing is
    cached, so there is no maximum length.

    Args:
        d_model (int): model width D (odd D is allowed; the last channel is then a sine).
        base (float, optional): wavelength base. (default: :obj:`10000.0`)

    Shapes:
        - **input:** x (B, L, D), positions (L,) or (B, L), optional
        - **output:** (B, L, D)

    Examples:
        >>> import torch
        >>> pe = SinusoidalPE(16)
        >>> x = torch.zeros(2, 5, 16)  # (B, L, D)
        >>> pe(x).shape
        torch.Size([2, 5, 16])
        >>> torch.allclose(pe(x)[:, 3:], pe(x[:, :2], positions=torch.arange(3, 5)))
        True
    """

    def __init__(self, d_model: int, base: float = 10000.0) -> None:
        super().__init__()
        self.d_model = check_nonneg_int("d_model", d_model, minimum=1)
        self.base = _check_base(base)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Nothing to reset: the encoding has no parameters."""

    def encode(self, positions: Tensor) -> Tensor:
        """The encoding PE at ``positions`` (...,), shape (..., D), float32."""
        return sinusoid(positions, self.d_model, self.base)

    def forward(self, x: Tensor, positions: Tensor | None = None) -> Tensor:
        _check_x("SinusoidalPE", x, "(B, L, D)", self.d_model)
        pos = _check_positions(positions, x, "SinusoidalPE")
        return x + self.encode(pos).to(x.dtype)  # (B, L, D)

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}" + (f", base={self.base}" if self.base != 10000.0 else "")


class LearnedPE(nn.Module):
    r"""Learned absolute positional embedding (as in BERT, Devlin et al., 2019), added to the input.

    .. math::
        \mathbf{x}'_{p} = \mathbf{x}_{p} + \mathbf{W}_{p}, \qquad
        \mathbf{W} \in \mathbb{R}^{\mathrm{max\_len} \times D}

    Args:
        max_len (int): number of positions with an embedding; positions must lie in
            ``[0, max_len)``.
        d_model (int): model width D.

    Shapes:
        - **input:** x (B, L, D), positions (L,) or (B, L), optional integer
        - **output:** (B, L, D)

    Examples:
        >>> import torch
        >>> pe = LearnedPE(max_len=32, d_model=8)
        >>> pe(torch.zeros(2, 10, 8)).shape  # (B, L, D)
        torch.Size([2, 10, 8])
    """

    def __init__(self, max_len: int, d_model: int) -> None:
        super().__init__()
        self.max_len = check_nonneg_int("max_len", max_len, minimum=1)
        self.d_model = check_nonneg_int("d_model", d_model, minimum=1)
        self.weight = nn.Parameter(torch.empty(self.max_len, self.d_model))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.trunc_normal_(self.weight, std=0.02)

    def forward(self, x: Tensor, positions: Tensor | None = None) -> Tensor:
        _check_x("LearnedPE", x, "(B, L, D)", self.d_model)
        if positions is None:
            if x.size(1) > self.max_len:
                raise ValueError(
                    f"LearnedPE has max_len={self.max_len} positions but the input has L={x.size(1)}; "
                    "build it with a larger max_len or crop the sequence"
                )
            return x + self.weight[: x.size(1)].to(x.dtype)  # (B, L, D)
        pos = _check_positions(positions, x, "LearnedPE")
        if pos.is_floating_point() or pos.dtype == torch.bool:
            raise TypeError(f"LearnedPE positions must be integers, got dtype {pos.dtype}")
        if pos.numel() and (int(pos.min()) < 0 or int(pos.max()) >= self.max_len):
            raise ValueError(
                f"LearnedPE positions must lie in [0, max_len={self.max_len}), got min {int(pos.min())} "
                f"and max {int(pos.max())}"
            )
        return x + self.weight[pos].to(x.dtype)  # (B, L, D)

    def extra_repr(self) -> str:
        return f"max_len={self.max_len}, d_model={self.d_model}"


class Sinusoidal2DPE(nn.Module):
    r"""The 2-D sinusoidal encoding of patches of DETR ("End-to-End Object Detection with
    Transformers", Carion et al., 2020): half the channels encode the row, half the column.

    For the patch at row :math:`r`, column :math:`c` of an ``height`` x ``width`` grid (patches
    row-major, :math:`p = r \cdot \mathrm{width} + c`):

    .. math::
        \mathbf{x}'_{p} = \mathbf{x}_{p} + \left[\mathrm{PE}_{D/2}(\tilde r) \,\|\, \mathrm{PE}_{D/2}(\tilde c)\right]

    where :math:`\mathrm{PE}_{D/2}` is the 1-D sinusoid of :func:`sinusoid` with :math:`D/2` channels,
    :math:`\tilde r = r`, :math:`\tilde c = c`, or with ``normalize=True`` (DETR's option, independent
    of the grid size) :math:`\tilde r = 2\pi (r + 1) / \mathrm{height}`,
    :math:`\tilde c = 2\pi (c + 1) / \mathrm{width}`.

    Args:
        d_model (int): model width D, even.
        base (float, optional): wavelength base. (default: :obj:`10000.0`)
        normalize (bool, optional): scale positions to :math:`(0, 2\pi]`. (default: :obj:`False`)

    Shapes:
        - **input:** x (B, L, D) with L = height * width
        - **output:** (B, L, D)

    Examples:
        >>> import torch
        >>> pe = Sinusoidal2DPE(8)
        >>> x = torch.zeros(1, 6, 8)  # (B, L, D): a 2 x 3 grid
        >>> out = pe(x, height=2, width=3)
        >>> torch.equal(out[0, 0, :4], out[0, 2, :4])  # same row, same first half
        True
    """

    def __init__(self, d_model: int, base: float = 10000.0, normalize: bool = False) -> None:
        super().__init__()
        self.d_model = check_nonneg_int("d_model", d_model, minimum=2)
        if self.d_model % 2:
            raise ValueError(
                f"Sinusoidal2DPE splits the channels into a row half and a column half, so d_model "
                f"must be even, got {d_model}"
            )
        self.base = _check_base(base)
        self.normalize = bool(normalize)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Nothing to reset: the encoding has no parameters."""

    def encode(self, height: int, width: int, device: torch.device | str | None = None) -> Tensor:
        """The encoding of every patch of a ``height`` x ``width`` grid, shape (L, D), float32."""
        height = check_nonneg_int("height", height, minimum=1)
        width = check_nonneg_int("width", width, minimum=1)
        rows = torch.arange(height, device=device, dtype=torch.float64)
        cols = torch.arange(width, device=device, dtype=torch.float64)
        if self.normalize:
            rows, cols = (rows + 1) * (2 * math.pi / height), (cols + 1) * (2 * math.pi / width)
        half = self.d_model // 2
        row_pe = sinusoid(rows, half, self.base)  # (height, D/2)
        col_pe = sinusoid(cols, half, self.base)  # (width, D/2)
        grid = torch.cat(
            [row_pe.unsqueeze(1).expand(-1, width, -1), col_pe.unsqueeze(0).expand(height, -1, -1)], dim=-1
        )  # (height, width, D)
        return grid.reshape(height * width, self.d_model)  # (L, D)

    def forward(self, x: Tensor, height: int, width: int) -> Tensor:
        _check_x("Sinusoidal2DPE", x, "(B, L, D)", self.d_model)
        if x.size(1) != height * width:
            raise ValueError(
                f"Sinusoidal2DPE needs L = height * width = {height} * {width} = {height * width} patches, "
                f"got L={x.size(1)}"
            )
        return x + self.encode(height, width, device=x.device).to(x.dtype)  # (B, L, D)

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, normalize={self.normalize}"


class RotaryPE(nn.Module):
    r"""Rotary position embedding of RoFormer ("RoFormer: Enhanced Transformer with Rotary Position
    Embedding", Su et al., 2021), applied to queries and keys.

    Channel pairs :math:`(x_{2i}, x_{2i+1})` of a head vector at position :math:`p` are rotated by
    the angle :math:`p\,\theta_i`:

    .. math::
        \begin{pmatrix} x'_{2i} \\ x'_{2i+1} \end{pmatrix} =
        \begin{pmatrix} \cos p\theta_i & -\sin p\theta_i \\ \sin p\theta_i & \cos p\theta_i \end{pmatrix}
        \begin{pmatrix} x_{2i} \\ x_{2i+1} \end{pmatrix}, \qquad
        \theta_i = \mathrm{base}^{-2i/E}

    Rotations preserve norms, and :math:`\mathbf{q}'^\top_m \mathbf{k}'_n` depends on the positions
    only through :math:`n - m`. Positions default to :math:`0, \dots, L-1`; pass ``positions`` for
    an offset (e.g. the queries of a streaming chunk after ``t`` cached frames use
    ``torch.arange(t, t + L)``).

    Args:
        head_dim (int): head dimension E, even.
        base (float, optional): wavelength base. (default: :obj:`10000.0`)

    Shapes:
        - **input:** x (B, H, L, E), positions (L,) or (B, L), optional
        - **output:** (B, H, L, E)

    Examples:
        >>> import torch
        >>> rope = RotaryPE(8)
        >>> q = torch.randn(2, 4, 10, 8)  # (B, H, L, E)
        >>> rope(q).shape
        torch.Size([2, 4, 10, 8])
        >>> torch.allclose(rope(q).norm(dim=-1), q.norm(dim=-1), atol=1e-5)
        True
    """

    inv_freq: Tensor

    def __init__(self, head_dim: int, base: float = 10000.0) -> None:
        super().__init__()
        self.head_dim = check_nonneg_int("head_dim", head_dim, minimum=2)
        if self.head_dim % 2:
            raise ValueError(f"RotaryPE rotates channel pairs, so head_dim must be even, got {head_dim}")
        self.base = _check_base(base)
        self.register_buffer("inv_freq", torch.empty(self.head_dim // 2), persistent=False)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Recompute the frequencies :math:`\\theta_i` (the module has no trainable parameters)."""
        exponent = torch.arange(self.head_dim // 2, dtype=torch.float64) * 2 / self.head_dim
        self.inv_freq.copy_((self.base ** (-exponent)).to(self.inv_freq.device))

    def forward(self, x: Tensor, positions: Tensor | None = None) -> Tensor:
        _check_x("RotaryPE", x, "(B, H, L, E)", self.head_dim)
        pos = _check_positions(positions, x.transpose(1, 2), "RotaryPE")
        angle = pos.to(torch.float32).unsqueeze(-1) * self.inv_freq.float()  # (L, E/2) or (B, L, E/2)
        if angle.dim() == 3:
            angle = angle.unsqueeze(1)  # (B, 1, L, E/2)
        cos, sin = angle.cos(), angle.sin()
        pairs = x.float().unflatten(-1, (self.head_dim // 2, 2))  # (B, H, L, E/2, 2)
        even, odd = pairs[..., 0], pairs[..., 1]
        out = torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1)  # (B, H, L, E/2, 2)
        return out.flatten(-2).to(x.dtype)  # (B, H, L, E)

    def extra_repr(self) -> str:
        return f"head_dim={self.head_dim}" + (f", base={self.base}" if self.base != 10000.0 else "")


__all__ = ["LearnedPE", "RotaryPE", "Sinusoidal2DPE", "SinusoidalPE", "sinusoid"]
