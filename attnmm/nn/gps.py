r"""A GPS graph transformer layer: local message passing plus global masked attention, no padding."""

from __future__ import annotations

import copy
import inspect
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnmm._checks import check_nonneg_int, refuse_encoder_options
from attnmm.attention.planner import AttentionPlan
from attnmm.attention.weights import AttentionWeights
from attnmm.common.tokens import Tokens
from attnmm.masks import Mask, SameGraph
from attnmm.nn._graph_attention import graph_attention, graph_sizes
from attnmm.nn.multihead import MultiHeadAttention
from attnmm.nn.spd_bias import ShortestPathBias
from attnmm.nn.transformer_conv import AttentionConv

Norm = Literal["batch", "layer", "none"]


def _norm(kind: Norm, channels: int) -> nn.Module:
    if kind == "batch":
        return nn.BatchNorm1d(channels)
    if kind == "layer":
        return nn.LayerNorm(channels)
    if kind == "none":
        return nn.Identity()
    raise ValueError(f"norm must be 'batch', 'layer' or 'none', got {kind!r}")


class GPSLayer(nn.Module):
    r"""The layer of "Recipe for a General, Powerful, Scalable Graph Transformer" (Rampášek et al.,
    2022): a local message-passing layer and global attention side by side, then a feed-forward network,

    .. math::
        \mathbf{X}_L &= \mathrm{Norm}(\mathbf{X} + \mathrm{Dropout}(\mathrm{MPNN}(\mathbf{X}, \mathcal{E}))),
        \qquad \mathbf{X}_G = \mathrm{Norm}(\mathbf{X} + \mathrm{Dropout}(\mathrm{MHA}(\mathbf{X}; A))) \\
        \mathbf{X}' &= \mathrm{Norm}(\mathbf{X}_L + \mathbf{X}_G + \mathrm{MLP}(\mathbf{X}_L + \mathbf{X}_G))

    The global attention runs through the attnmm core on PyG's packed layout: by default
    :math:`A(i)` is every node of i's graph (:class:`~attnmm.masks.SameGraph`, built from
    ``batch``), and any packed mask can replace it (e.g. the graph's edges united with random expander
    edges, Exphormer-style). Nothing is padded to a dense batch, so the cost follows the mask's pairs.
    With ``attention=False`` the global branch is left out,
    :math:`\mathbf{X}' = \mathrm{Norm}(\mathbf{X}_L + \mathrm{MLP}(\mathbf{X}_L))`: the layer of a
    message-passing network alone, the baseline that shows what attention adds. ``plan`` (an
    :class:`~attnmm.attention.AttentionPlan`) shares one dispatch among the layers of a forward, as
    :class:`GPSEncoder` passes it.

    Args:
        channels (int): node width D.
        conv (nn.Module, optional): the local layer, any PyG convolution called as
            ``conv(x, edge_index)`` (``conv(x, edge_index, edge_attr)`` when edge features are given)
            that keeps width D; ``None`` for global attention only. (default: :obj:`None`)
        heads (int, optional): attention heads H; must divide D. (default: :obj:`1`)
        dropout (float, optional): dropout on the branch outputs and in the MLP. (default: :obj:`0.0`)
        attn_dropout (float, optional): dropout on the attention weights. (default: :obj:`0.0`)
        norm (str, optional): ``"batch"``, ``"layer"`` or ``"none"``. (default: :obj:`"batch"`)
        attention (bool, optional): keep the global attention branch; ``False`` needs a ``conv``.
            (default: :obj:`True`)

    Shapes:
        - **input:** x (N, D), edge_index (2, M), batch (N,) optional, mask over N nodes optional,
          bias (P,) or (P, H) per allowed pair of the global mask optional, edge_attr (M, F_e) optional
        - **output:** (N, D)

    Examples:
        >>> import torch
        >>> from torch_geometric.nn import GINConv
        >>> layer = GPSLayer(16, GINConv(torch.nn.Linear(16, 16)), heads=4)
        >>> x, edge_index = torch.randn(5, 16), torch.tensor([[0, 1, 3], [1, 2, 4]])
        >>> batch = torch.tensor([0, 0, 0, 1, 1])  # two graphs
        >>> layer(x, edge_index, batch).shape
        torch.Size([5, 16])
    """

    def __init__(
        self,
        channels: int,
        conv: nn.Module | None = None,
        heads: int = 1,
        dropout: float = 0.0,
        attn_dropout: float = 0.0,
        norm: Norm = "batch",
        attention: bool = True,
    ) -> None:
        super().__init__()
        self.channels = check_nonneg_int("channels", channels, minimum=1)
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        if conv is None and not attention:
            raise ValueError("a GPSLayer needs a local conv, global attention or both: give a conv or attention=True")
        self.conv = conv
        self.attn = MultiHeadAttention(channels, heads, dropout=attn_dropout) if attention else None
        self.mlp = nn.Sequential(
            nn.Linear(channels, 2 * channels),
            nn.ReLU(),
            nn.Dropout(dropout),
            nn.Linear(2 * channels, channels),
            nn.Dropout(dropout),
        )
        self.drop = nn.Dropout(dropout)
        self.norm_local, self.norm_attn, self.norm_out = (_norm(norm, channels) for _ in range(3))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for module in [self.conv, self.attn, *self.mlp, self.norm_local, self.norm_attn, self.norm_out]:
            if module is not None and hasattr(module, "reset_parameters"):
                module.reset_parameters()

    def forward(
        self,
        x: Tensor,
        edge_index: Tensor,
        batch: Tensor | None = None,
        mask: Mask | None = None,
        bias: Tensor | None = None,
        edge_attr: Tensor | None = None,
        plan: AttentionPlan | None = None,
        return_weights: bool = False,
    ) -> Tensor | tuple[Tensor, AttentionWeights | None]:
        out: Tensor | None = None
        weights = None
        if self.attn is not None:
            fast = bias is None and (mask is None or type(mask) is SameGraph) and _within_graphs(self.attn)
            if fast and not return_weights:
                # every node attends the nodes of its graph: per-graph fused attention on the packed nodes
                graph = batch if mask is None else mask.batch
                sizes = [x.size(0)] if graph is None else graph_sizes(graph)
                h_attn = attend_within_graphs(self.attn, x, sizes)  # (N, D)
            else:
                if mask is None:  # every node attends the nodes of its graph (all nodes without a batch vector)
                    mask = SameGraph(batch if batch is not None else x.new_zeros(x.size(0), dtype=torch.long))
                if return_weights:
                    h_attn, weights = self.attn(x, mask=mask, bias=bias, plan=plan, return_weights=True)
                else:
                    h_attn = self.attn(x, mask=mask, bias=bias, plan=plan)  # (N, D)
            out = self.norm_attn(x + self.drop(h_attn))
        if self.conv is not None:
            h = self.conv(x, edge_index) if edge_attr is None else self.conv(x, edge_index, edge_attr)
            local = self.norm_local(x + self.drop(h))  # (N, D)
            out = local if out is None else out + local
        assert out is not None
        out = self.norm_out(out + self.mlp(out))
        return (out, weights) if return_weights else out

    def __repr__(self) -> str:
        heads = "off" if self.attn is None else self.attn.num_heads
        return f"{type(self).__name__}({self.channels}, conv={self.conv}, heads={heads})"


class GPSEncoder(nn.Module):
    r"""A stack of :class:`GPSLayer` blocks for graph batches, with an optional Graphormer
    shortest-path bias (:class:`ShortestPathBias`, shared by the layers) on the global attention.

    Called as every encoder is, ``encoder(x, mask, tokens=tokens)``: the global attention runs under
    the adapter's ``mask`` (e.g. every node of its graph with ``GraphAdapter(scope="graph")``, or the
    graph's edges united with expander edges) and the local layers pass messages along the edges of
    :class:`~attnmm.adapters.GraphTokens`, with the tokens' edge features (``edge_attr``) for a local
    layer that reads them (one whose ``forward`` takes ``edge_attr`` after ``edge_index``, e.g. GINE).
    Without a mask every node attends the nodes of its graph; without tokens, ``mask`` must be a mask of
    the packed node layout (a :class:`~attnmm.masks.Graph`), whose allowed pairs are then the edges and
    whose nodes form one graph. ``attention=False`` leaves out the global attention: a message-passing
    network of the same layers.

    Args:
        d_model (int): node width D.
        num_layers (int, optional): number of layers. (default: :obj:`2`)
        heads (int, optional): attention heads. (default: :obj:`4`)
        local (nn.Module or str, optional): the local layer: any PyG convolution called as
            ``conv(x, edge_index)`` that keeps width D (each layer gets a freshly initialised copy;
            in YAML by ``class_path``), ``"gin"`` (GINConv with a 2-layer MLP), ``"gine"`` (GINEConv
            with a 2-layer MLP, Hu et al., 2020: messages :math:`\mathrm{ReLU}(\mathbf{x}_j + \mathbf{e}_{ji})`
            with edge features of width D, e.g. embedded by ``GraphAdapter(edge_cardinalities=...)``),
            ``"attention"`` (:class:`AttentionConv`), or ``None``/``"none"`` for global attention only.
            (default: :obj:`"gin"`)
        dropout (float, optional): dropout in the layers. (default: :obj:`0.0`)
        attn_dropout (float, optional): dropout on the attention weights. (default: :obj:`0.0`)
        max_distance (int, optional): use a shortest-path bias up to this distance; ``None`` for none.
            (default: :obj:`None`)
        norm (str, optional): ``"batch"``, ``"layer"`` or ``"none"``. (default: :obj:`"batch"`)
        attention (bool, optional): the global attention in every layer; ``False`` for message passing
            alone (needs a ``local`` layer). (default: :obj:`True`)

    Shapes:
        - **input:** x (N, D), a packed mask over N nodes, optionally the adapter's tokens
        - **output:** (N, D); with ``return_weights`` also one
          :class:`~attnmm.attention.AttentionWeights` per layer (``None`` for a layer without attention),
          computed by the general path instead of the per-graph one

    Examples:
        >>> from torch_geometric.nn import GCNConv
        >>> from attnmm.adapters import GraphAdapter
        >>> adapter = GraphAdapter(d_model=32, scope="graph")
        >>> encoder = GPSEncoder(32, local=GCNConv(32, 32), max_distance=3)
        >>> tokens = adapter(GraphAdapter.example_batch(2))
        >>> encoder(tokens.x, tokens.mask, tokens=tokens).shape == tokens.x.shape
        True
    """

    def __init__(
        self,
        d_model: int,
        num_layers: int = 2,
        heads: int = 4,
        local: nn.Module | Literal["gin", "gine", "attention", "none"] | None = "gin",
        dropout: float = 0.0,
        attn_dropout: float = 0.0,
        max_distance: int | None = None,
        norm: Norm = "batch",
        attention: bool = True,
    ) -> None:
        super().__init__()
        if not (local is None or isinstance(local, nn.Module) or local in ("gin", "gine", "attention", "none")):
            raise ValueError(f"local must be a module, 'gin', 'gine', 'attention', 'none' or None, got {local!r}")
        if not attention and (local is None or local == "none"):
            raise ValueError("attention=False leaves message passing alone: give a local layer (e.g. local='gine')")
        if not attention and max_distance is not None:
            raise ValueError(
                "max_distance biases the global attention, which attention=False leaves out: set it to None"
            )
        self.d_model = check_nonneg_int("d_model", d_model, minimum=1)
        self.layers = nn.ModuleList(
            GPSLayer(d_model, _local(local, d_model, heads), heads, dropout, attn_dropout, norm, attention)
            for _ in range(check_nonneg_int("num_layers", num_layers, minimum=1))
        )
        # which local layers read edge features (a forward taking edge_attr third, as GINEConv's)
        self._reads_edges = [_reads_edges(layer.conv) for layer in self.layers]
        self._edges_of_width_d = local == "gine"  # the built GINE layers add edge features of width D
        self.spd = None if max_distance is None else ShortestPathBias(heads, max_distance)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for layer in self.layers:
            layer.reset_parameters()
        if self.spd is not None:
            self.spd.reset_parameters()

    def forward(
        self, x: Tensor, mask: Mask | None = None, *, tokens: Tokens | None = None, state: Any = None,
        return_weights: bool = False,
    ) -> Tensor | tuple[Tensor, list[AttentionWeights | None]]:
        refuse_encoder_options(self, state)
        edge_index = getattr(tokens, "edge_index", None)
        N = x.size(0)
        if edge_index is None:
            if mask is None or mask.layout != "packed":
                raise ValueError(
                    f"GPSEncoder needs the edges: pass tokens=GraphTokens (from GraphAdapter) or a mask of the "
                    f"packed node layout (a Graph mask: its pairs are the edges), got mask {mask!r} and no tokens"
                )
            pairs = mask.pairs(N, N, device=x.device)  # query i, key j: the edge j -> i
            edge_index = torch.stack([pairs.col, pairs.row])  # (2, M)
        if mask is None:
            batch = getattr(tokens, "batch", None)
            mask = SameGraph(batch if batch is not None else x.new_zeros(N, dtype=torch.long))
        bias = None if self.spd is None else self.spd(mask, edge_index, N)  # (P, H)
        edge_attr = getattr(tokens, "edge_attr", None)
        if self._edges_of_width_d:
            _check_edge_width(edge_attr, self.d_model)
        plan = AttentionPlan()  # one dispatch for every layer: same mask, same sizes
        weights: list[AttentionWeights | None] = []
        for layer, reads_edges in zip(self.layers, self._reads_edges):
            edges = edge_attr if reads_edges else None
            if return_weights:  # the general path, which returns the weights (None for a layer without attention)
                x, w = layer(x, edge_index, mask=mask, bias=bias, edge_attr=edges, plan=plan, return_weights=True)
                weights.append(w)
            else:
                x = layer(x, edge_index, mask=mask, bias=bias, edge_attr=edges, plan=plan)
        return (x, weights) if return_weights else x


def _within_graphs(attn: MultiHeadAttention) -> bool:
    """Whether ``attn`` is plain softmax self-attention (no rotary, no learned bias), which
    :func:`attend_within_graphs` computes."""
    return (
        attn.rotary is None and attn.position_bias is None and attn.score == "softmax"
        and attn.kdim == attn.vdim == attn.embed_dim
    )


def attend_within_graphs(attn: MultiHeadAttention, x: Tensor, sizes: list[int]) -> Tensor:
    """``attn(x, mask=SameGraph(batch))`` for plain softmax self-attention: the three projections as one
    matrix product, then per-graph fused attention on the packed nodes (:func:`graph_attention`)."""
    H, E = attn.num_heads, attn.head_dim
    projections = (attn.q_proj, attn.k_proj, attn.v_proj)
    weight = torch.cat([p.weight for p in projections])  # (3D, D)
    bias = None if attn.q_proj.bias is None else torch.cat([p.bias for p in projections])
    qkv = F.linear(x, weight, bias).view(x.size(0), 3, H, E)  # (N, 3, H, E)
    dropout_p = attn.dropout if attn.training else 0.0
    out = graph_attention(qkv[:, 0], qkv[:, 1], qkv[:, 2], sizes, dropout_p=dropout_p)  # (N, H, E)
    return attn.out_proj(out.reshape(x.size(0), H * E))  # (N, D)


def _reads_edges(conv: nn.Module | None) -> bool:
    """Whether ``conv(x, edge_index, edge_attr)`` hands it edge features (its third argument is ``edge_attr``)."""
    if conv is None:
        return False
    names = list(inspect.signature(conv.forward).parameters)
    return len(names) > 2 and names[2] == "edge_attr"


def _check_edge_width(edge_attr: Tensor | None, width: int) -> None:
    if edge_attr is None or edge_attr.dim() != 2 or edge_attr.size(1) != width:
        got = None if edge_attr is None else tuple(edge_attr.shape)
        raise ValueError(
            f"local='gine' adds edge features of the model's width D = {width} to the messages, got edge_attr {got}: "
            "embed categorical edge features with GraphAdapter(edge_cardinalities=...), or inject "
            "GINEConv(..., edge_dim=F_e) as local for float ones"
        )


def _local(kind: nn.Module | str | None, channels: int, heads: int) -> nn.Module | None:
    if isinstance(kind, nn.Module):  # a fresh copy per layer
        conv = copy.deepcopy(kind)
        for sub in conv.modules():
            reset = getattr(sub, "reset_parameters", None)
            if callable(reset):
                reset()
        return conv
    if kind in ("gin", "gine"):
        from torch_geometric.nn import GINConv, GINEConv

        mlp = nn.Sequential(nn.Linear(channels, channels), nn.ReLU(), nn.Linear(channels, channels))
        return GINConv(mlp) if kind == "gin" else GINEConv(mlp)
    if kind == "attention":
        if channels % heads:
            raise ValueError(f"local='attention' needs heads to divide d_model, got {heads} and {channels}")
        return AttentionConv(channels, channels // heads, heads=heads)
    return None


__all__ = ["GPSEncoder", "GPSLayer"]
