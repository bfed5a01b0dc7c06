r"""A stack of :class:`~attnmm.nn.AttentionConv` layers: a graph attention network over a mask."""

from __future__ import annotations

from functools import partial
from typing import Any

import torch.nn.functional as F
from torch import Tensor, nn

from attnmm._checks import check_nonneg_int, refuse_encoder_options
from attnmm.masks import Mask
from attnmm.nn._inputs import check_dropout, check_node_features
from attnmm.nn.transformer_conv import AttentionConv


class GraphAttentionEncoder(nn.Module):
    r"""A graph attention network (in the layout of GAT, Veličković et al., 2018) built from
    :class:`AttentionConv` layers, every layer attending under the same mask:

    .. math::
        \mathbf{H}^{(l+1)} = \mathrm{ELU}\left(\mathrm{AttentionConv}_l(\mathrm{Dropout}(\mathbf{H}^{(l)}); A)\right),
        \qquad \mathbf{Y} = \mathrm{AttentionConv}_L(\mathrm{Dropout}(\mathbf{H}^{(L)}); A)

    Hidden layers concatenate ``heads`` heads of ``hidden_channels``; the last layer averages
    ``out_heads`` heads of ``out_channels``. It is called as ``encoder(x, mask)`` like every attnmm
    encoder, with a packed-layout mask (e.g. the :class:`~attnmm.masks.Graph` of a
    :class:`~attnmm.adapters.GraphAdapter`).

    Args:
        in_channels (int): input width F.
        hidden_channels (int): width per head of the hidden layers.
        out_channels (int): output width.
        num_layers (int, optional): number of layers, >= 1. (default: :obj:`2`)
        heads (int, optional): heads of the hidden layers. (default: :obj:`8`)
        out_heads (int, optional): heads of the last layer, averaged. (default: :obj:`1`)
        dropout (float, optional): dropout on each layer's input (not the first: the adapter's) and on
            the attention weights, in training. (default: :obj:`0.6`)
        root_weight (bool, optional): add each layer's projected own features (a skip connection).
            (default: :obj:`False`)

    Shapes:
        - **input:** x (N, F), a packed mask over N nodes
        - **output:** (N, out_channels)

    Examples:
        >>> import torch
        >>> from attnmm.masks import Graph
        >>> enc = GraphAttentionEncoder(16, 8, out_channels=3, heads=2)
        >>> ring = Graph(torch.tensor([[0, 1, 2, 3], [1, 2, 3, 0]]), 4)
        >>> enc(torch.randn(4, 16), ring).shape
        torch.Size([4, 3])
    """

    def __init__(
        self, in_channels: int, hidden_channels: int, out_channels: int, num_layers: int = 2, heads: int = 8,
        out_heads: int = 1, dropout: float = 0.6, root_weight: bool = False,
    ) -> None:
        super().__init__()
        num_layers = check_nonneg_int("num_layers", num_layers, minimum=1)
        self.dropout = check_dropout(dropout)
        self.in_channels = check_nonneg_int("in_channels", in_channels, minimum=1)
        widths = [in_channels] + [hidden_channels * heads] * (num_layers - 1)
        conv = partial(AttentionConv, dropout=dropout, root_weight=root_weight)
        self.convs = nn.ModuleList(conv(w, hidden_channels, heads=heads) for w in widths[:-1])
        self.out = conv(widths[-1], out_channels, heads=out_heads, concat=False)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for conv in [*self.convs, self.out]:
            conv.reset_parameters()

    def forward(
        self, x: Tensor, mask: Mask, *, tokens: Any = None, state: Any = None, return_weights: bool = False
    ) -> Any:
        """Node embeddings (N, out_channels); with ``return_weights`` also each layer's
        ``(edge_index, alpha)``."""
        refuse_encoder_options(self, state=state)
        check_node_features("GraphAttentionEncoder", x, None, self.in_channels, (self.in_channels,) * 2)
        weights = []
        for i, conv in enumerate([*self.convs, self.out]):
            if i > 0:
                x = F.dropout(x, self.dropout, self.training)
            result = conv(x, mask, return_attention_weights=True if return_weights else None)
            x, w = result if isinstance(result, tuple) else (result, None)
            weights.append(w)
            if conv is not self.out:
                x = F.elu(x)
        return (x, weights) if return_weights else x


__all__ = ["GraphAttentionEncoder"]
