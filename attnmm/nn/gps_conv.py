r"""A drop-in for PyG's ``GPSConv`` on the packed nodes, whose global attention takes any packed mask."""

from __future__ import annotations

import contextlib
import inspect
from typing import Any, Literal, cast, overload

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from attnmm.attention.core import attend
from attnmm.attention.planner import Plan as AttentionPlan
from attnmm.attention.weights import AttentionWeights
from attnmm.masks import Mask, SameGraph
from attnmm.nn._graph_attention import graph_attention, graph_sizes, within_graph_sizes


class GPSConv(nn.Module):
    r"""The GPS layer of "Recipe for a General, Powerful, Scalable Graph Transformer" (Rampášek et al.,
    2022), as PyG's ``torch_geometric.nn.GPSConv`` defines it, computed on the packed nodes:

    .. math::
        \mathbf{X}_L &= \mathrm{Norm}_1(\mathbf{X} + \mathrm{Dropout}(\mathrm{MPNN}(\mathbf{X}, \mathcal{E}))),
        \qquad \mathbf{X}_G = \mathrm{Norm}_2(\mathbf{X} + \mathrm{Dropout}(\mathrm{MHA}(\mathbf{X}; A))) \\
        \mathbf{X}' &= \mathrm{Norm}_3(\mathbf{X}_L + \mathbf{X}_G + \mathrm{MLP}(\mathbf{X}_L + \mathbf{X}_G))

    The constructor, the parameters (``attn`` is a ``torch.nn.MultiheadAttention``, so the state dict
    loads into and from PyG's layer), the ``repr`` and, without a mask, the outputs are PyG's: every node
    attends the nodes of its own graph (:math:`A(i)` = i's graph, from ``batch``). PyG pads the batch to
    (B, L_max, D) for that; here each graph's attention is computed on its own nodes
    (:func:`~attnmm.nn._graph_attention.graph_attention`), nothing padded. ``mask`` replaces the
    allowed sets with any mask of the packed node layout, computed by :func:`attnmm.attend`: the graph's
    edges united with random expander edges (Exphormer, :func:`~attnmm.masks.graph_helpers.expander`),
    k-hop neighbourhoods, a virtual node, :class:`~attnmm.masks.SameGraph` composed with others, ...
    A mask that allows each node exactly its own graph (:class:`~attnmm.masks.SameGraph`, as the mask
    itself reports) runs the graphs' own path too. ``bias`` adds a score per allowed pair (e.g.
    :class:`~attnmm.nn.ShortestPathBias`), ``plan`` shares one dispatch among layers under the same mask,
    ``return_weights`` also returns the attention weights. ``attn_type="performer"`` is PyG's Performer
    (linear attention, on the padded batch as PyG runs it; no ``mask``); ``attn_type=None`` leaves the
    global attention out, :math:`\mathbf{X}' = \mathrm{Norm}_3(\mathbf{X}_L + \mathrm{MLP}(\mathbf{X}_L))`:
    the message-passing layer alone, the baseline that shows what attention adds.

    On CPU the graphs' own path keeps only the attention's output and one log-sum-exp per graph for the
    backward (the queries, keys and values are recomputed there), so its memory is that of the layer's
    other activations; ``recompute=True`` recomputes those of the local branch and the MLP as well.

    Args:
        channels (int): node width D.
        conv (MessagePassing, optional): the local layer, called as ``conv(x, edge_index, **kwargs)``;
            ``None`` for global attention only.
        heads (int, optional): attention heads H. (default: :obj:`1`)
        dropout (float, optional): dropout on the branch outputs and in the MLP. (default: :obj:`0.0`)
        act (str or Callable, optional): the MLP's activation (PyG's resolver). (default: :obj:`"relu"`)
        act_kwargs (dict, optional): arguments of the activation. (default: :obj:`None`)
        norm (str or Callable, optional): the normalisation (PyG's resolver), ``None`` for none.
            (default: :obj:`"batch_norm"`)
        norm_kwargs (dict, optional): arguments of the normalisation. (default: :obj:`None`)
        attn_type (str, optional): ``"multihead"``, ``"performer"`` or ``None`` (no global attention; needs
            a ``conv``). (default: :obj:`"multihead"`)
        attn_kwargs (dict, optional): arguments of the attention module (e.g. ``dropout``).
            (default: :obj:`None`)
        recompute (bool, optional): keep the activations of neither the local branch nor the MLP (with
            their norms) for the backward: recompute them there (less memory, more time; running statistics
            are updated once). Not one of PyG's arguments. (default: :obj:`False`)

    Shapes:
        - **input:** x (N, D), edge_index (2, M) or a sparse adjacency, batch (N,) optional, a packed
          mask over N nodes optional, bias (P,) or (P, H) per allowed pair of the mask optional
        - **output:** (N, D); with ``return_weights`` also the weights (``None`` without attention)

    Examples:
        >>> import torch
        >>> from torch_geometric.nn import GINConv
        >>> from attnmm.masks import Graph
        >>> from attnmm.masks.graph_helpers import expander, self_loops
        >>> conv = GPSConv(16, GINConv(torch.nn.Linear(16, 16)), heads=4)
        >>> x, edge_index = torch.randn(5, 16), torch.tensor([[0, 1, 3], [1, 2, 4]])
        >>> batch = torch.tensor([0, 0, 0, 1, 1])
        >>> conv(x, edge_index, batch).shape  # every node attends its graph, as PyG's GPSConv
        torch.Size([5, 16])
        >>> exphormer = Graph(edge_index, 5) | expander(5, degree=2, batch=batch) | self_loops(5)
        >>> conv(x, edge_index, batch, mask=exphormer).shape  # Exphormer: edges, expander edges, self-loops
        torch.Size([5, 16])
    """

    def __init__(
        self,
        channels: int,
        conv: nn.Module | None,
        heads: int = 1,
        dropout: float = 0.0,
        act: Any = "relu",
        act_kwargs: dict[str, Any] | None = None,
        norm: Any = "batch_norm",
        norm_kwargs: dict[str, Any] | None = None,
        attn_type: str | None = "multihead",
        attn_kwargs: dict[str, Any] | None = None,
        recompute: bool = False,
    ) -> None:
        from torch_geometric.nn.resolver import activation_resolver, normalization_resolver

        super().__init__()
        if conv is None and attn_type is None:
            raise ValueError("a GPSConv needs a local conv, global attention or both: give a conv or an attn_type")
        self.channels = channels
        self.conv = conv
        self.heads = heads
        self.dropout = dropout
        self.attn_type = attn_type
        self.recompute = recompute
        attn_kwargs = attn_kwargs or {}
        self.attn: nn.Module | None = None
        if attn_type == "multihead":
            self.attn = nn.MultiheadAttention(channels, heads, batch_first=True, **attn_kwargs)
        elif attn_type == "performer":
            from torch_geometric.nn.attention import PerformerAttention

            self.attn = PerformerAttention(channels=channels, heads=heads, **attn_kwargs)
        elif attn_type is not None:
            raise ValueError(f"attn_type must be 'multihead', 'performer' or None, got {attn_type!r}")
        self.mlp = nn.Sequential(
            nn.Linear(channels, channels * 2),
            activation_resolver(act, **(act_kwargs or {})),
            nn.Dropout(dropout),
            nn.Linear(channels * 2, channels),
            nn.Dropout(dropout),
        )
        norm_kwargs = norm_kwargs or {}
        self.norm1 = normalization_resolver(norm, channels, **norm_kwargs)
        self.norm2 = normalization_resolver(norm, channels, **norm_kwargs)
        self.norm3 = normalization_resolver(norm, channels, **norm_kwargs)
        self.norm_with_batch = self.norm1 is not None and "batch" in inspect.signature(self.norm1.forward).parameters

    def reset_parameters(self) -> None:
        from torch_geometric.nn.inits import reset

        if self.conv is not None:
            reset(self.conv)
        if self.attn is not None:
            cast(Any, self.attn)._reset_parameters()  # both kinds have it (as PyG calls it)
        reset(self.mlp)
        for norm in (self.norm1, self.norm2, self.norm3):
            if norm is not None:
                norm.reset_parameters()

    def _norm(self, norm: nn.Module | None, h: Tensor, batch: Tensor | None) -> Tensor:
        if norm is None:
            return h
        return norm(h, batch=batch) if self.norm_with_batch else norm(h)

    def forward(
        self, x: Tensor, edge_index: Any, batch: Tensor | None = None, mask: Mask | None = None, *,
        bias: Tensor | None = None, plan: AttentionPlan | None = None, return_weights: bool = False, **kwargs: Any,
    ) -> Tensor | tuple[Tensor, AttentionWeights | None]:
        out, weights = None, None
        if self.conv is not None:
            out = self._recomputed(self._local, x, edge_index, batch, **kwargs)  # (N, D)
        if self.attn is not None:
            if return_weights:
                h, weights = self.global_attention(x, batch, mask, bias=bias, plan=plan, return_weights=True)
            else:
                h = self.global_attention(x, batch, mask, bias=bias, plan=plan)
            h = self._norm(self.norm2, F.dropout(h, p=self.dropout, training=self.training) + x, batch)
            out = h if out is None else out + h
        assert out is not None
        out = self._recomputed(self._feed_forward, out, batch)
        return (out, weights) if return_weights else out

    def _local(self, x: Tensor, edge_index: Any, batch: Tensor | None, **kwargs: Any) -> Tensor:
        h = F.dropout(self.conv(x, edge_index, **kwargs), p=self.dropout, training=self.training)  # type: ignore[misc]
        return self._norm(self.norm1, h + x, batch)

    def _feed_forward(self, out: Tensor, batch: Tensor | None) -> Tensor:
        return self._norm(self.norm3, out + self.mlp(out), batch)

    def _recomputed(self, block: Any, *args: Any, **kwargs: Any) -> Tensor:
        """``block(*args, **kwargs)``; with ``recompute`` (and gradients on) its activations are not kept but
        recomputed in the backward, which leaves the buffers (running statistics) as the first pass left them."""
        if not (self.recompute and torch.is_grad_enabled()):
            return block(*args, **kwargs)
        passes = (contextlib.nullcontext(), _BuffersKept(self))  # the forward as it is, the recomputation on copies
        return checkpoint(block, *args, use_reentrant=False, context_fn=lambda: passes, **kwargs)

    @overload
    def global_attention(
        self, x: Tensor, batch: Tensor | None = ..., mask: Mask | None = ..., *, bias: Tensor | None = ...,
        plan: AttentionPlan | None = ..., return_weights: Literal[False] = ...,
    ) -> Tensor: ...

    @overload
    def global_attention(
        self, x: Tensor, batch: Tensor | None = ..., mask: Mask | None = ..., *, bias: Tensor | None = ...,
        plan: AttentionPlan | None = ..., return_weights: Literal[True],
    ) -> tuple[Tensor, AttentionWeights | None]: ...

    def global_attention(
        self, x: Tensor, batch: Tensor | None = None, mask: Mask | None = None, *, bias: Tensor | None = None,
        plan: AttentionPlan | None = None, return_weights: bool = False,
    ) -> Tensor | tuple[Tensor, AttentionWeights | None]:
        r"""The attention branch before its dropout and residual: ``attn`` over the nodes of each graph, or
        under ``mask`` (with ``bias`` (P,) or (P, H) added to the scores of its allowed pairs), (N, D); with
        ``return_weights`` also its :class:`~attnmm.attention.AttentionWeights`."""
        if isinstance(self.attn, nn.MultiheadAttention) and _packed_form(self.attn):
            return _multihead(self.attn, x, batch, mask, bias, plan, return_weights)
        if mask is not None or bias is not None or return_weights:
            raise ValueError(
                f"mask= needs attn_type='multihead' without add_bias_kv, add_zero_attn or other key widths (so do "
                f"bias= and return_weights), got {self.attn!r}: leave them out for this attention (it attends each "
                "graph's nodes, as PyG's)"
            )
        from torch_geometric.utils import to_dense_batch

        h, real = to_dense_batch(x, batch)  # (B, L, D): PyG's padded form, for the Performer
        if isinstance(self.attn, nn.MultiheadAttention):
            h, _ = self.attn(h, h, h, key_padding_mask=~real, need_weights=False)
        else:
            assert self.attn is not None
            h = self.attn(h, mask=real)
        return h[real]

    def __repr__(self) -> str:
        name, heads = type(self).__name__, "off" if self.attn is None else self.heads
        return f"{name}({self.channels}, conv={self.conv}, heads={heads}, attn_type={self.attn_type})"


class _BuffersKept:
    """A context that runs with copies in place of ``module``'s buffers, so that what the run writes into them
    is dropped; it can be entered again (a backward with ``retain_graph`` recomputes once more)."""

    def __init__(self, module: nn.Module) -> None:
        self.module = module

    def __enter__(self) -> None:
        self.kept = [(owner, name, buffer) for owner in self.module.modules()
                     for name, buffer in owner.named_buffers(recurse=False)]
        for owner, name, buffer in self.kept:
            setattr(owner, name, buffer.clone())

    def __exit__(self, *exc: object) -> None:
        for owner, name, buffer in self.kept:
            setattr(owner, name, buffer)


def _packed_form(attn: nn.MultiheadAttention) -> bool:
    """Whether the packed computation covers ``attn``'s options (one input projection, no extra keys)."""
    return attn._qkv_same_embed_dim and attn.bias_k is None and not attn.add_zero_attn


def _multihead(
    attn: nn.MultiheadAttention, x: Tensor, batch: Tensor | None, mask: Mask | None, bias: Tensor | None,
    plan: AttentionPlan | None, return_weights: bool,
) -> Tensor | tuple[Tensor, AttentionWeights | None]:
    """``attn``'s self-attention of the packed nodes (N, D): within each graph, or under ``mask``."""
    N, H = x.size(0), attn.num_heads
    if mask is None and batch is not None and batch.size(0) != N:  # a mask states the pairs itself
        raise ValueError(f"batch must give the graph of each of the N = {N} nodes, got shape {tuple(batch.shape)}")
    if mask is not None and (not isinstance(mask, Mask) or mask.layout != "packed"):
        raise ValueError(f"mask must be an attnmm mask of the packed node layout (N = {N} nodes), got {mask!r}")
    dropout_p = attn.dropout if attn.training else 0.0
    sizes = None
    if bias is None and not return_weights:  # the graphs' own path, when the allowed set is each node's graph
        sizes = ([N] if batch is None else graph_sizes(batch)) if mask is None else within_graph_sizes(mask, N)
    weights = None
    if sizes is not None:
        out = graph_attention(x, attn.in_proj_weight, attn.in_proj_bias, H, sizes, dropout_p=dropout_p)  # (N, H, E)
    else:
        if mask is None:
            mask = SameGraph(batch if batch is not None else x.new_zeros(N, dtype=torch.long))
        q, k, v = F.linear(x, attn.in_proj_weight, attn.in_proj_bias).view(N, 3, H, -1).unbind(1)  # (N, H, E) each
        if return_weights:
            out, weights = attend(q, k, v, mask, dropout_p=dropout_p, bias=bias, plan=plan, return_weights=True)
        else:
            out = attend(q, k, v, mask, dropout_p=dropout_p, bias=bias, plan=plan)
    out = F.linear(out.reshape(N, -1), attn.out_proj.weight, attn.out_proj.bias)  # (N, D)
    return (out, weights) if return_weights else out


__all__ = ["GPSConv"]
