r"""The GPS graph transformer encoder: a stack of GPS layers (local message passing plus global masked attention)."""

from __future__ import annotations

import copy
import inspect
from typing import Any, Literal, cast

import torch
from torch import Tensor, nn

from attnmm._checks import check_nonneg_int, refuse_encoder_options
from attnmm.attention.planner import AttentionPlan
from attnmm.attention.weights import AttentionWeights
from attnmm.common.tokens import Tokens
from attnmm.masks import Mask, SameGraph
from attnmm.nn._inputs import check_dropout
from attnmm.nn.gps_conv import GPSConv
from attnmm.nn.spd_bias import ShortestPathBias
from attnmm.nn.transformer_conv import AttentionConv

Norm = Literal["batch", "layer", "none"]
#: the encoder's norm names as PyG's resolver names and arguments (layer norm per node, as in a transformer)
_NORMS: dict[str, tuple[str | None, dict[str, Any]]] = {
    "batch": ("batch_norm", {}), "layer": ("layer_norm", {"mode": "node"}), "none": (None, {}),
}


class GPSEncoder(nn.Module):
    r"""A stack of :class:`GPSConv` layers (local message passing beside global attention, Rampášek et
    al., 2022) for graph batches, with an optional Graphormer shortest-path bias
    (:class:`ShortestPathBias`, shared by the layers) on the global attention.

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
        recompute (bool, optional): recompute the local layers' and the MLPs' activations in the backward
            instead of keeping them (:class:`GPSConv`'s ``recompute``). (default: :obj:`False`)

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
        recompute: bool = False,
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
        if norm not in _NORMS:
            raise ValueError(f"norm must be 'batch', 'layer' or 'none', got {norm!r}")
        check_dropout(dropout)
        self.d_model = check_nonneg_int("d_model", d_model, minimum=1)
        norm_name, norm_kwargs = _NORMS[norm]
        self.layers = nn.ModuleList(
            GPSConv(
                d_model, _local(local, d_model, heads), heads, dropout, norm=norm_name, norm_kwargs=norm_kwargs,
                attn_type="multihead" if attention else None, attn_kwargs={"dropout": attn_dropout},
                recompute=recompute,
            )
            for _ in range(check_nonneg_int("num_layers", num_layers, minimum=1))
        )
        # which local layers read edge features (a forward taking edge_attr third, as GINEConv's)
        self._reads_edges = [_reads_edges(layer.conv) for layer in self._gps_layers()]
        self._edges_of_width_d = local == "gine"  # the built GINE layers add edge features of width D
        self.spd = None if max_distance is None else ShortestPathBias(heads, max_distance)
        self.reset_parameters()

    def _gps_layers(self) -> list[GPSConv]:
        return [cast(GPSConv, layer) for layer in self.layers]

    def reset_parameters(self) -> None:
        for layer in self._gps_layers():
            layer.reset_parameters()
            if isinstance(layer.attn, nn.MultiheadAttention):  # q, k, v, out: four D x D xavier draws
                for w in (*layer.attn.in_proj_weight.detach().chunk(3), layer.attn.out_proj.weight.detach()):
                    nn.init.xavier_uniform_(w)
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
        batch = getattr(tokens, "batch", None)
        if mask is None and (self.spd is not None or return_weights):  # the pairs the bias or the weights are of
            mask = SameGraph(batch if batch is not None else x.new_zeros(N, dtype=torch.long))
        bias = None if self.spd is None else self.spd(mask, edge_index, N)  # (P, H)
        edge_attr = getattr(tokens, "edge_attr", None)
        if self._edges_of_width_d:
            _check_edge_width(edge_attr, self.d_model)
        plan = AttentionPlan()  # one dispatch for every layer: same mask, same sizes
        weights: list[AttentionWeights | None] = []
        for layer, reads_edges in zip(self.layers, self._reads_edges):
            edges = {"edge_attr": edge_attr} if reads_edges else {}
            if return_weights:  # the general path, which returns the weights (None for a layer without attention)
                x, w = layer(x, edge_index, batch, mask, bias=bias, plan=plan, return_weights=True, **edges)
                weights.append(w)
            else:
                x = layer(x, edge_index, batch, mask, bias=bias, plan=plan, **edges)
        return (x, weights) if return_weights else x


def _reads_edges(conv: nn.Module | None) -> bool:
    """Whether ``conv(x, edge_index, edge_attr)`` hands it edge features (its third argument is ``edge_attr``)."""
    return conv is not None and list(inspect.signature(conv.forward).parameters)[2:3] == ["edge_attr"]


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


__all__ = ["GPSEncoder"]
