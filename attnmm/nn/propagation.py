"""Predict, then propagate: an MLP whose predictions spread over a mask's allowed sets by attention."""

from __future__ import annotations

from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnmm._checks import check_nonneg_int, refuse_encoder_options
from attnmm.attention import attend
from attnmm.attention.weights import AttentionWeights
from attnmm.masks import Mask
from attnmm.nn._inputs import check_dropout, check_node_features


class PropagationEncoder(nn.Module):
    r"""Predict, then propagate (APPNP, Klicpera et al., 2019) with the attention core as the
    propagation operator.

    An MLP predicts :math:`\mathbf{H} = \mathrm{MLP}(\mathbf{X})`; then ``steps`` rounds of
    personalised-PageRank propagation mix each node's prediction with its allowed set's:

    .. math::
        \mathbf{Z}^{(0)} = \mathbf{H}, \qquad
        \mathbf{z}^{(t+1)}_i = (1 - \alpha) \sum_{j \in A(i)} a^{(t)}_{ij} \mathbf{z}^{(t)}_j
        + \alpha\, \mathbf{h}_i

    With ``scores="uniform"`` the weights are :math:`a_{ij} = 1/|A(i)|` (the random-walk normalised
    adjacency of the mask, with self loops when the mask has them); with ``scores="cosine"`` they
    are a softmax over :math:`\beta \cos(\mathbf{z}_i, \mathbf{z}_j)` with a learned temperature
    :math:`\beta` (AGNN's attention, Thekumparampil et al., 2018), recomputed every round; with
    ``scores="additive"`` they are GAT's learned attention on the MLP's hidden layer
    :math:`\mathbf{g} = \mathrm{relu}(\mathbf{W}_1 \mathbf{x})`, with ``heads`` independent
    heads whose weights are averaged, computed once per forward and used in every round:

    .. math::
        a_{ij} = \frac{1}{H} \sum_{h=1}^{H} \mathrm{softmax}_{j \in A(i)}\, \mathrm{LeakyReLU}\big(
        \mathbf{a}_{\mathrm{dst},h}^\top \mathbf{g}_i + \mathbf{a}_{\mathrm{src},h}^\top \mathbf{g}_j\big)

    (each pair's score goes to :func:`~attnmm.attention.attend` as a per-pair bias, so no value
    vector is copied per pair; ``pair_dropout`` drops pairs in each head independently). Every round
    is one :func:`~attnmm.attention.attend` call under the mask, so any mask works: a
    :class:`~attnmm.masks.Graph`, its k-hop neighbourhoods, a union with expander edges.

    Args:
        in_channels (int): input width F.
        hidden_channels (int): width of the MLP's hidden layer.
        out_channels (int): output width (the classes).
        steps (int, optional): propagation rounds K, >= 0. (default: :obj:`10`)
        alpha (float, optional): teleport probability in [0, 1]. (default: :obj:`0.1`)
        dropout (float, optional): dropout on the MLP's hidden layer, in training (the input's is
            the adapter's). (default: :obj:`0.5`)
        pair_dropout (float, optional): dropout on the propagation weights (APPNP's adjacency
            dropout), in training. (default: :obj:`0.0`)
        scores (str, optional): ``"uniform"``, ``"cosine"`` or ``"additive"``. (default: :obj:`"uniform"`)
        heads (int, optional): heads of the additive scores, >= 1. (default: :obj:`1`)
        negative_slope (float, optional): LeakyReLU slope of the additive scores. (default: :obj:`0.2`)

    Shapes:
        - **input:** x (N, F), a packed mask over N nodes
        - **output:** (N, out_channels); with ``return_weights`` also the
          :class:`~attnmm.attention.AttentionWeights` of each propagation step

    Examples:
        >>> import torch
        >>> from attnmm.masks import Graph
        >>> enc = PropagationEncoder(16, 32, out_channels=3, steps=4)
        >>> ring = Graph(torch.tensor([[0, 1, 2, 3], [1, 2, 3, 0]]), 4)
        >>> enc(torch.randn(4, 16), ring).shape
        torch.Size([4, 3])
    """

    def __init__(
        self, in_channels: int, hidden_channels: int, out_channels: int, steps: int = 10, alpha: float = 0.1,
        dropout: float = 0.5, pair_dropout: float = 0.0, scores: Literal["uniform", "cosine", "additive"] = "uniform",
        heads: int = 1, negative_slope: float = 0.2,
    ) -> None:
        super().__init__()
        self.steps = check_nonneg_int("steps", steps)
        self.dropout, self.pair_dropout = check_dropout(dropout), check_dropout(pair_dropout, "pair_dropout")
        if not 0.0 <= alpha <= 1.0:
            raise ValueError(f"alpha must be in [0, 1], got {alpha}")
        if scores not in ("uniform", "cosine", "additive"):
            raise ValueError(f"scores must be 'uniform', 'cosine' or 'additive', got {scores!r}")
        self.alpha, self.scores = float(alpha), scores
        self.lin1 = nn.Linear(in_channels, hidden_channels)
        self.lin2 = nn.Linear(hidden_channels, out_channels)
        # AGNN's temperature, learned; unused (and absent from the state dict) for uniform weights
        self.beta = nn.Parameter(torch.ones(())) if scores == "cosine" else None
        # GAT's attention vectors on the hidden layer; absent unless the scores are additive
        self.heads = check_nonneg_int("heads", heads, minimum=1)
        if heads > 1 and scores != "additive":
            raise ValueError(f"heads={heads} needs scores='additive' (uniform and cosine weights have one head)")
        self.negative_slope = float(negative_slope)
        additive = scores == "additive"
        self.att_dst = nn.Parameter(torch.empty(heads, hidden_channels)) if additive else None  # (H, hidden)
        self.att_src = nn.Parameter(torch.empty(heads, hidden_channels)) if additive else None
        reset_attention(self.att_dst, self.att_src)

    def reset_parameters(self) -> None:
        self.lin1.reset_parameters()
        self.lin2.reset_parameters()
        if self.beta is not None:
            nn.init.ones_(self.beta)
        reset_attention(self.att_dst, self.att_src)

    def forward(
        self, x: Tensor, mask: Mask, *, tokens: Any = None, state: Any = None, return_weights: bool = False
    ) -> Tensor | tuple[Tensor, list[AttentionWeights]]:
        refuse_encoder_options(self, state)
        check_node_features("PropagationEncoder", x, None, self.lin1.in_features, (self.lin1.in_features,) * 2)
        g = F.dropout(F.relu(self.lin1(x)), self.dropout, self.training)  # (N, hidden)
        h = self.lin2(g)
        p = self.pair_dropout if self.training else 0.0
        bias = additive_scores(g, mask, self.att_dst, self.att_src, self.negative_slope)
        z = h
        weights: list[AttentionWeights] = []
        for _ in range(self.steps):
            if self.beta is None:
                out, w = spread(z, mask, bias, self.heads, p, return_weights)
            else:
                v = z.unsqueeze(1)  # (N, 1, C): one head
                u = F.normalize(v, dim=-1)
                if return_weights:
                    out, w = attend(u * self.beta, u, v, mask, scale=1.0, dropout_p=p, layout="packed",
                                    return_weights=True)
                else:
                    out, w = attend(u * self.beta, u, v, mask, scale=1.0, dropout_p=p, layout="packed"), None
                out = out.squeeze(1)  # (N, C)
            if w is not None:
                weights.append(w)  # the weights of this propagation step
            z = (1.0 - self.alpha) * out + self.alpha * h
        return (z, weights) if return_weights else z


def spread(
    z: Tensor, mask: Mask, bias: Tensor | None, heads: int, p: float, return_weights: bool = False
) -> tuple[Tensor, AttentionWeights | None]:
    r"""One round :math:`\mathbf{P}\mathbf{z}` (N, C), its ``heads`` averaged, and its weights when asked for:
    attention with no query or key, so the score is the bias alone (a softmax over zeros without one: uniform)."""
    v = z.unsqueeze(1).expand(-1, heads, -1)  # (N, H, C): every head spreads z
    q = k = z.new_zeros(z.shape[0], heads, 0)
    if return_weights:
        out, w = attend(q, k, v, mask, bias=bias, dropout_p=p, layout="packed", return_weights=True)
        return out.mean(1), w
    return attend(q, k, v, mask, bias=bias, dropout_p=p, layout="packed").mean(1), None


def reset_attention(att_dst: Tensor | None, att_src: Tensor | None) -> None:
    """GAT's initialisation of its attention vectors (H, C): glorot of each head's (1, C) vector."""
    if att_dst is not None and att_src is not None:
        bound = (6.0 / (att_dst.shape[1] + 1)) ** 0.5
        nn.init.uniform_(att_dst, -bound, bound)
        nn.init.uniform_(att_src, -bound, bound)


def additive_scores(
    g: Tensor, mask: Mask, att_dst: Tensor | None, att_src: Tensor | None, slope: float
) -> Tensor | None:
    """GAT's score of every allowed pair and head, (P, H) in the order of ``mask.pairs`` (``None``
    without attention vectors)."""
    if att_dst is None or att_src is None:
        return None
    pairs = mask.pairs(g.shape[0], device=g.device)
    if pairs.batch is not None:
        raise ValueError("scores='additive' needs one mask for all nodes (a packed graph), not a batched mask")
    return F.leaky_relu((g @ att_dst.T)[pairs.row] + (g @ att_src.T)[pairs.col], slope)  # (P, H)
