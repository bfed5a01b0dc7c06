r"""Multi-head attention over any mask, self or cross, padded or packed (graphs)."""

from __future__ import annotations

from typing import Literal, overload

import torch
from torch import Tensor, nn

from attnmm._checks import check_features, check_nonneg_int
from attnmm.attention.core import attend
from attnmm.attention.planner import Plan as AttentionPlan
from attnmm.attention.weights import AttentionWeights
from attnmm.masks import Mask, Window
from attnmm.nn._inputs import check_dropout
from attnmm.nn.positional import RotaryPE
from attnmm.nn.relative import RelativePositionBias
from attnmm.nn.state import IncrementalState, causal_reach


class MultiHeadAttention(nn.Module):
    r"""Multi-head attention of "Attention Is All You Need" (Vaswani et al., 2017), with the allowed
    set of each query given by a :class:`~attnmm.masks.Mask`.

    .. math::
        \mathrm{MHA}(\mathbf{X}, \mathbf{Y}) = \left[\mathrm{head}_1 \,\|\, \cdots \,\|\,
        \mathrm{head}_H\right] \mathbf{W}^O, \qquad
        \mathrm{head}_h = \mathrm{attend}\left(\mathbf{X} \mathbf{W}^Q_h, \mathbf{Y} \mathbf{W}^K_h,
        \mathbf{Y}' \mathbf{W}^V_h, A\right)

    with :math:`\mathbf{Y} = \mathbf{Y}' = \mathbf{X}` for self-attention. Every head computes
    :math:`a_{ij} = \mathrm{softmax}_{j \in A(i)}(\mathbf{q}_i^\top \mathbf{k}_j / \sqrt{E} + b_{ij})`
    through :func:`attnmm.attend`, so the mask picks the backend. Queries and keys may come from
    different sequences of lengths L and S (cross-attention; mask the keys of a padded batch with
    ``Padding(key_lengths)``), and inputs may be padded (B, L, D) or packed (N, D) for graphs under a
    :class:`~attnmm.masks.Graph` mask.

    Args:
        embed_dim (int): model width D; the head dim is E = D / H.
        num_heads (int): number of heads H; must divide ``embed_dim``.
        kdim (int, optional): width of the key input. (default: :obj:`embed_dim`)
        vdim (int, optional): width of the value input. (default: :obj:`embed_dim`)
        dropout (float, optional): dropout on the attention weights, in training only.
            (default: :obj:`0.0`)
        bias (bool, optional): add biases to the four projections. (default: :obj:`True`)
        rotary (RotaryPE, optional): rotary embedding applied to queries and keys (padded layout;
            positions 0..L-1 and 0..S-1). (default: :obj:`None`)
        position_bias (RelativePositionBias, optional): learned relative bias added to the scores
            of the allowed pairs. (default: :obj:`None`)
        score (str, optional): ``"softmax"`` or ``"relu"`` attention. (default: :obj:`"softmax"`)

    Shapes:
        - **input:** query (B, L, D), key (B, S, kdim), value (B, S, vdim); or packed query
          (N, D), key (S, kdim), value (S, vdim); ``bias`` (P,) or (P, H) per allowed pair
        - **output:** (B, L, D) or (N, D); with ``return_weights`` also
          :class:`~attnmm.attention.AttentionWeights` with values (P, H)

    With ``state`` (an :class:`~attnmm.nn.IncrementalState`), self-attention reads a causal
    sequence a few tokens at a time: the first call's tokens attend each other under the mask
    (``Causal()`` or ``Window(left, 0)``), each later call's single token attends the cached keys and
    values, and the cache keeps the keys the next token may attend (all of them under ``Causal()``,
    the last ``left`` under ``Window(left, 0)``). The outputs equal those of one call on the whole
    sequence. ``plan`` (an :class:`~attnmm.attention.AttentionPlan`) shares one dispatch among the
    layers of a forward (an :class:`~attnmm.nn.Encoder` passes its own).

    Examples:
        >>> import torch
        >>> from attnmm.masks import Causal, Padding
        >>> mha = MultiHeadAttention(32, num_heads=4)
        >>> x = torch.randn(2, 10, 32)  # (B, L, D)
        >>> mha(x, mask=Causal()).shape
        torch.Size([2, 10, 32])
        >>> memory = torch.randn(2, 7, 32)  # (B, S, D): cross-attention to padded keys
        >>> mha(x, memory, mask=Padding([7, 5])).shape
        torch.Size([2, 10, 32])
    """

    def __init__(
        self, embed_dim: int, num_heads: int, *, kdim: int | None = None, vdim: int | None = None, dropout: float = 0.0,
        bias: bool = True, rotary: RotaryPE | None = None, position_bias: RelativePositionBias | None = None,
        score: Literal["softmax", "relu"] = "softmax",
    ) -> None:
        super().__init__()
        self.embed_dim = check_nonneg_int("embed_dim", embed_dim, minimum=1)
        self.num_heads = check_nonneg_int("num_heads", num_heads, minimum=1)
        if self.embed_dim % self.num_heads:
            raise ValueError(
                f"embed_dim must be divisible by num_heads, got embed_dim={embed_dim}, num_heads={num_heads}"
            )
        self.head_dim = self.embed_dim // self.num_heads
        self.kdim = self.embed_dim if kdim is None else check_nonneg_int("kdim", kdim, minimum=1)
        self.vdim = self.embed_dim if vdim is None else check_nonneg_int("vdim", vdim, minimum=1)
        self.dropout = check_dropout(dropout)
        if score not in ("softmax", "relu"):
            raise ValueError(f"score must be 'softmax' or 'relu', got {score!r}")
        self.score = score
        if rotary is not None and rotary.head_dim != self.head_dim:
            raise ValueError(
                f"rotary.head_dim must equal embed_dim / num_heads = {self.head_dim}, got {rotary.head_dim}"
            )
        if position_bias is not None and position_bias.num_heads != self.num_heads:
            raise ValueError(
                f"position_bias.num_heads must equal num_heads = {self.num_heads}, got {position_bias.num_heads}"
            )
        self.q_proj = nn.Linear(self.embed_dim, self.embed_dim, bias=bias)
        self.k_proj = nn.Linear(self.kdim, self.embed_dim, bias=bias)
        self.v_proj = nn.Linear(self.vdim, self.embed_dim, bias=bias)
        self.out_proj = nn.Linear(self.embed_dim, self.embed_dim, bias=bias)
        self.rotary = rotary
        self.position_bias = position_bias
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for proj in (self.q_proj, self.k_proj, self.v_proj, self.out_proj):
            nn.init.xavier_uniform_(proj.weight)
            if proj.bias is not None:
                nn.init.zeros_(proj.bias)
        if self.rotary is not None:
            self.rotary.reset_parameters()
        if self.position_bias is not None:
            self.position_bias.reset_parameters()

    @overload
    def forward(
        self, query: Tensor, key: Tensor | None = ..., value: Tensor | None = ..., mask: Mask | None = ...,
        *, bias: Tensor | None = ..., return_weights: Literal[False] = ..., state: IncrementalState | None = ...,
        plan: AttentionPlan | None = ...,
    ) -> Tensor: ...

    @overload
    def forward(
        self, query: Tensor, key: Tensor | None = ..., value: Tensor | None = ..., mask: Mask | None = ...,
        *, bias: Tensor | None = ..., return_weights: Literal[True], state: IncrementalState | None = ...,
        plan: AttentionPlan | None = ...,
    ) -> tuple[Tensor, AttentionWeights]: ...

    def forward(
        self, query: Tensor, key: Tensor | None = None, value: Tensor | None = None, mask: Mask | None = None, *,
        bias: Tensor | None = None, return_weights: bool = False, state: IncrementalState | None = None,
        plan: AttentionPlan | None = None,
    ) -> Tensor | tuple[Tensor, AttentionWeights]:
        if state is not None and (key is not None or value is not None or query.dim() != 3):
            raise ValueError(
                "state= reads a padded (B, L, D) sequence incrementally by self-attention; cross-attention "
                "and packed inputs have no incremental form: call without state"
            )
        key = query if key is None else key
        value = key if value is None else value
        packed = self._check_inputs(query, key, value)
        H, E = self.num_heads, self.head_dim
        q = self.q_proj(query).unflatten(-1, (H, E))  # (B, L, H, E) or (N, H, E)
        k = self.k_proj(key).unflatten(-1, (H, E))  # (B, S, H, E) or (S, H, E)
        v = self.v_proj(value).unflatten(-1, (H, E))  # (B, S, H, E) or (S, H, E)
        if not packed:
            q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # (B, H, L|S, E)
        if state is not None:
            q, k, v, mask = self._extend(q, k, v, mask, bias, state)
        elif self.rotary is not None:
            if packed:
                raise ValueError(
                    "rotary needs sequence positions, but the input is packed (N, D); use the padded "
                    "(B, L, D) layout or encode graph positions (e.g. Laplacian eigenvectors) instead"
                )
            q, k = self.rotary(q), self.rotary(k)
        if self.position_bias is not None:
            L, S = (q.size(0), k.size(0)) if packed else (q.size(2), k.size(2))
            rel = self.position_bias(mask, L, S, None if packed else q.size(0))  # (P, H)
            bias = rel if bias is None else rel + (bias.unsqueeze(-1) if bias.dim() == 1 else bias)
        dropout_p = self.dropout if self.training else 0.0
        # (N, D) inputs are graph nodes: said, not guessed
        layout: Literal["packed", "padded"] = "packed" if packed else "padded"
        weights: AttentionWeights | None = None
        if return_weights:
            out, weights = attend(
                q, k, v, mask, dropout_p=dropout_p, score=self.score, bias=bias, plan=plan, layout=layout,
                return_weights=True,
            )
        else:
            out = attend(q, k, v, mask, dropout_p=dropout_p, score=self.score, bias=bias, plan=plan, layout=layout)
        out = self.out_proj(out.flatten(-2) if packed else out.transpose(1, 2).flatten(-2))  # (N, D) or (B, L, D)
        return out if weights is None else (out, weights)

    def _extend(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Mask | None, bias: Tensor | None, state: IncrementalState
    ) -> tuple[Tensor, Tensor, Tensor, Mask | None]:
        """Queries, keys and values of an incremental call, and its mask: the new tokens' keys and
        values join the cached ones, and the cache keeps what the next query may attend."""
        if bias is not None or self.position_bias is not None:
            raise ValueError("state= does not support score biases (bias, position_bias): call without state")
        reach = causal_reach(mask, "MultiHeadAttention(state=...)")
        if state.max_keys is not None:
            reach = state.max_keys - 1 if reach is None else min(reach, state.max_keys - 1)
        if self.rotary is not None:
            positions = torch.arange(state.offset, state.offset + q.size(2), device=q.device)  # (L,)
            q, k = self.rotary(q, positions), self.rotary(k, positions)
        cached = state.get(self)
        if cached is None:  # the first call: the new tokens attend each other under the mask
            if state.max_keys is not None:
                assert mask is not None  # causal_reach refuses None
                mask = mask & Window(state.max_keys - 1, 0)
        else:
            if q.size(2) != 1:
                raise ValueError(
                    f"after the first call, state= reads one token at a time, got {q.size(2)} tokens; feed "
                    "the prompt in the first call and then the new tokens one by one"
                )
            k, v = torch.cat([cached[0], k], 2), torch.cat([cached[1], v], 2)  # (B, H, S, E)
            mask = None  # the cache holds exactly the keys the query may attend, and itself
        keep = k.size(2) if reach is None else min(reach, k.size(2))
        state.set(self, (k[:, :, k.size(2) - keep :], v[:, :, v.size(2) - keep :]))
        return q, k, v, mask

    def _check_inputs(self, query: Tensor, key: Tensor, value: Tensor) -> bool:
        """Validate shapes; return whether the inputs use the packed layout."""
        for name, t, width, param, n in (
            ("query", query, self.embed_dim, "embed_dim", "L"), ("key", key, self.kdim, "kdim", "S"),
            ("value", value, self.vdim, "vdim", "S"),
        ):  # fmt: skip
            check_features(
                "MultiHeadAttention", name, t, width, param, {3: f"(B, {n}, {width})", 2: f"(N, {width})"},
                hint="query must be (B, L, D) (padded) or (N, D) (packed): the layer splits its own heads, so "
                "give (B, L, D), not (B, H, L, E)",
            )  # fmt: skip
        if key.dim() != query.dim() or value.dim() != query.dim():
            raise ValueError(
                f"query, key and value must have the same rank, got shapes {tuple(query.shape)}, "
                f"{tuple(key.shape)}, {tuple(value.shape)}"
            )
        packed = query.dim() == 2
        if not packed and not query.size(0) == key.size(0) == value.size(0):
            raise ValueError(
                f"query, key and value must share the batch size B, got {query.size(0)}, {key.size(0)}, "
                f"{value.size(0)}"
            )
        s_dim = 0 if packed else 1
        if key.size(s_dim) != value.size(s_dim):
            raise ValueError(
                f"key and value must have the same number of keys S, got {key.size(s_dim)} and {value.size(s_dim)}"
            )
        return packed

    def extra_repr(self) -> str:
        out = f"embed_dim={self.embed_dim}, num_heads={self.num_heads}"
        out += f", kdim={self.kdim}" if self.kdim != self.embed_dim else ""
        out += f", vdim={self.vdim}" if self.vdim != self.embed_dim else ""
        out += f", dropout={self.dropout}" if self.dropout else ""
        return out + (f", score={self.score!r}" if self.score != "softmax" else "")


__all__ = ["MultiHeadAttention"]
