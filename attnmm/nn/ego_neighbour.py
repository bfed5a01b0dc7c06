r"""Ego-neighbour separation for heterophilous graphs: a node's own features and its neighbourhood's, kept apart."""

from __future__ import annotations

from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnmm._checks import check_nonneg_int, refuse_encoder_options
from attnmm.masks import Mask
from attnmm.nn._inputs import check_dropout, check_node_features
from attnmm.nn.propagation import additive_scores, reset_attention, spread


class EgoNeighbourEncoder(nn.Module):
    r"""Ego-neighbour separation (H2GCN, Zhu et al., 2020) with hop-wise projections (FSGNN, Maurya et
    al., 2022), the attention core spreading each hop over a mask.

    On a heterophilous graph a node's neighbours mostly belong to other classes, so averaging them into
    the node's own features (as a GCN does) blurs what identifies it. Here every hop
    :math:`t = 0, \dots, K` has its own projection of the input, spread :math:`t` times over the
    mask's allowed sets, and the hops meet only in the classifier:

    .. math::
        \mathbf{z}^{(t)} = \mathbf{P}^{t} \mathbf{X} \mathbf{W}_t, \qquad
        (\mathbf{P}\mathbf{Z})_i = \sum_{j \in A(i)} a_{ij} \mathbf{z}_j, \qquad
        \mathbf{Y} = \mathrm{Dropout}\big(\mathrm{ReLU}\big[\,\nu(\mathbf{z}^{(0)}) \,\|\,
        \nu(\mathbf{z}^{(1)}) \,\|\, \dots \,\|\, \nu(\mathbf{z}^{(K)})\big]\big)\, \mathbf{W}_{\mathrm{out}}

    where :math:`\nu` normalises each row to unit length (FSGNN's hop normalisation, ``normalize``) or
    is the identity. Hop 0 is the node itself, never mixed with its neighbours; ``hops=0`` is an MLP of
    one hidden layer. Dropout on the input features is the adapter's (``GraphAdapter(dropout=...)``).
    The mask should leave the node itself out (``GraphAdapter(self_loops=False)``): a node with an
    empty allowed set gets zero for its neighbour hops. Any packed mask works: the graph's edges, their
    k-hop neighbourhoods, feature-similarity neighbours (:func:`~attnmm.common.feature_knn.feature_knn`),
    or a union of them.

    With ``scores="uniform"`` the weights are :math:`a_{ij} = 1/|A(i)|` (the mean over the allowed set,
    the random-walk normalised adjacency); with ``scores="additive"`` they are GAT's learned attention
    of :class:`~attnmm.nn.PropagationEncoder`, on the ego hidden layer :math:`\mathbf{g} = \mathbf{z}^{(0)}`.

    Args:
        in_channels (int): input width F.
        hidden_channels (int): width of each hop's projection.
        out_channels (int): output width (the classes).
        hops (int, optional): neighbour hops K, >= 0. (default: :obj:`1`)
        dropout (float, optional): dropout on the concatenated hidden layer, in training.
            (default: :obj:`0.5`)
        normalize (bool, optional): scale each hop's projection to unit length per node.
            (default: :obj:`False`)
        scores (str, optional): ``"uniform"`` or ``"additive"``. (default: :obj:`"uniform"`)
        heads (int, optional): heads of the additive scores, >= 1. (default: :obj:`1`)
        pair_dropout (float, optional): dropout on the weights of the allowed pairs, in training.
            (default: :obj:`0.0`)
        negative_slope (float, optional): LeakyReLU slope of the additive scores. (default: :obj:`0.2`)

    Shapes:
        - **input:** x (N, F), a packed mask over N nodes
        - **output:** (N, out_channels)

    Examples:
        >>> import torch
        >>> from attnmm.masks import Graph
        >>> enc = EgoNeighbourEncoder(16, 32, out_channels=3, hops=2)
        >>> ring = Graph(torch.tensor([[0, 1, 2, 3], [1, 2, 3, 0]]), 4)
        >>> enc(torch.randn(4, 16), ring).shape
        torch.Size([4, 3])
    """

    def __init__(
        self, in_channels: int, hidden_channels: int, out_channels: int, hops: int = 1, dropout: float = 0.5,
        normalize: bool = False, scores: Literal["uniform", "additive"] = "uniform", heads: int = 1,
        pair_dropout: float = 0.0, negative_slope: float = 0.2,
    ) -> None:
        super().__init__()
        self.hops = check_nonneg_int("hops", hops)
        self.dropout, self.pair_dropout = check_dropout(dropout), check_dropout(pair_dropout, "pair_dropout")
        if scores not in ("uniform", "additive"):
            raise ValueError(f"scores must be 'uniform' or 'additive', got {scores!r}")
        self.heads = check_nonneg_int("heads", heads, minimum=1)
        if heads > 1 and scores != "additive":
            raise ValueError(f"heads={heads} needs scores='additive' (uniform weights have one head)")
        self.normalize, self.scores, self.negative_slope = normalize, scores, float(negative_slope)
        self.in_channels = in_channels = check_nonneg_int("in_channels", in_channels, minimum=1)
        hidden_channels = check_nonneg_int("hidden_channels", hidden_channels, minimum=1)
        self.lins = nn.ModuleList(nn.Linear(in_channels, hidden_channels) for _ in range(self.hops + 1))
        out_channels = check_nonneg_int("out_channels", out_channels, minimum=1)
        self.out = nn.Linear((self.hops + 1) * hidden_channels, out_channels)
        additive = scores == "additive" and self.hops > 0
        # GAT's attention vectors on the ego hidden layer; absent unless the scores are additive
        self.att_dst = nn.Parameter(torch.empty(heads, hidden_channels)) if additive else None  # (H, hidden)
        self.att_src = nn.Parameter(torch.empty(heads, hidden_channels)) if additive else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for lin in [*self.lins, self.out]:
            lin.reset_parameters()
        reset_attention(self.att_dst, self.att_src)

    def forward(
        self, x: Tensor, mask: Mask, *, tokens: Any = None, state: Any = None, return_weights: bool = False
    ) -> Tensor:
        refuse_encoder_options(self, state, return_weights)
        width = self.in_channels
        check_node_features("EgoNeighbourEncoder", x, None, width, (width, width))
        zs = [lin(x) for lin in self.lins]  # K + 1 of (N, hidden)
        bias = additive_scores(zs[0], mask, self.att_dst, self.att_src, self.negative_slope)
        p, heads = self.pair_dropout if self.training else 0.0, 1 if bias is None else self.heads
        for t in range(1, self.hops + 1):
            for _ in range(t):
                zs[t] = spread(zs[t], mask, bias, heads, p)[0]
        if self.normalize:
            zs = [F.normalize(z, dim=-1) for z in zs]
        h = F.dropout(F.relu(torch.cat(zs, dim=-1)), self.dropout, self.training)  # (N, (K + 1) hidden)
        return self.out(h)

__all__ = ["EgoNeighbourEncoder"]
