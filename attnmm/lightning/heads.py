r"""Prediction heads: pooled sequence/graph classification and per-token classification."""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor, nn

from attnmm.adapters.base import Tokens
from attnmm.masks._checks import check_nonneg_int


def masked_mean(x: Tensor, lengths: Tensor | None) -> Tensor:
    """Mean over the first ``lengths[b]`` tokens of each item of x (B, L, D); 0 for empty items."""
    if lengths is None:
        return x.mean(1)
    keep = torch.arange(x.size(1), device=x.device) < lengths.view(-1, 1)  # (B, L)
    total = (x * keep.unsqueeze(-1)).sum(1)
    return total / keep.sum(1, keepdim=True).clamp(min=1)


class PoolingClassifier(nn.Module):
    r"""Pools the encoder's tokens over each item and classifies,
    :math:`\mathbf{y} = \mathbf{W} \,\mathrm{pool}_{i \le n_b} \mathbf{h}_i + \mathbf{b}`.

    Mean pooling counts only real tokens (``Tokens.lengths``) in the padded layout and uses each
    graph's nodes (``Tokens.batch``) in the packed layout.

    Args:
        d_model (int): token width D.
        num_classes (int): number of classes C.
        pooling (str, optional): ``"mean"`` or ``"max"``. (default: :obj:`"mean"`)
        dropout (float, optional): dropout before the linear layer. (default: :obj:`0.0`)

    Shapes:
        - **input:** h (B, L, D) or packed (N, D), and the adapter's :class:`Tokens`
        - **output:** logits (B, C)

    Examples:
        >>> import torch
        >>> from attnmm.adapters import Tokens
        >>> head = PoolingClassifier(8, num_classes=3)
        >>> h = torch.randn(2, 5, 8)
        >>> head(h, Tokens(h, lengths=torch.tensor([5, 2]))).shape
        torch.Size([2, 3])
    """

    def __init__(
        self, d_model: int, num_classes: int, pooling: Literal["mean", "max"] = "mean", dropout: float = 0.0
    ) -> None:
        super().__init__()
        if pooling not in ("mean", "max"):
            raise ValueError(f"pooling must be 'mean' or 'max', got {pooling!r}")
        self.pooling = pooling
        self.drop = nn.Dropout(dropout)
        self.linear = nn.Linear(
            check_nonneg_int("d_model", d_model, minimum=1), check_nonneg_int("num_classes", num_classes, minimum=1)
        )
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.linear.reset_parameters()

    def pool(self, h: Tensor, tokens: Tokens) -> Tensor:
        """Pooled features (B, D)."""
        if h.dim() == 2:  # packed nodes: pool per graph
            from torch_geometric.nn import global_max_pool, global_mean_pool

            fn = global_mean_pool if self.pooling == "mean" else global_max_pool
            return fn(h, tokens.batch)
        if self.pooling == "mean":
            return masked_mean(h, tokens.lengths)
        if tokens.lengths is None:
            return h.amax(1)
        keep = torch.arange(h.size(1), device=h.device) < tokens.lengths.view(-1, 1)
        pooled = h.masked_fill(~keep.unsqueeze(-1), float("-inf")).amax(1)
        return torch.where(keep.any(1, keepdim=True), pooled, torch.zeros_like(pooled))

    def forward(self, h: Tensor, tokens: Tokens) -> Tensor:
        return self.linear(self.drop(self.pool(h, tokens)))


class TokenClassifier(nn.Module):
    r"""Classifies every token, :math:`\mathbf{y}_i = \mathbf{W} \mathbf{h}_i + \mathbf{b}`
    (sequence labelling, node classification).

    Args:
        d_model (int): token width D.
        num_classes (int): number of classes C.
        dropout (float, optional): dropout before the linear layer. (default: :obj:`0.0`)

    Shapes:
        - **input:** h (B, L, D) or packed (N, D)
        - **output:** logits (B, L, C) or (N, C)

    Examples:
        >>> import torch
        >>> TokenClassifier(8, 17)(torch.randn(2, 5, 8)).shape
        torch.Size([2, 5, 17])
    """

    def __init__(self, d_model: int, num_classes: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.drop = nn.Dropout(dropout)
        self.linear = nn.Linear(
            check_nonneg_int("d_model", d_model, minimum=1), check_nonneg_int("num_classes", num_classes, minimum=1)
        )
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.linear.reset_parameters()

    def forward(self, h: Tensor, tokens: Tokens | None = None) -> Tensor:
        return self.linear(self.drop(h))
