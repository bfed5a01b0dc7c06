r"""Pre-norm transformer encoder blocks that attend under a mask."""

from __future__ import annotations

from typing import Any, Literal, cast, overload

from torch import Tensor, nn

from attnmm._checks import check_features, check_nonneg_int
from attnmm.attention.forms import FormStore
from attnmm.attention.planner import Plan as AttentionPlan
from attnmm.attention.weights import AttentionWeights
from attnmm.masks import Mask
from attnmm.nn._inputs import check_dropout
from attnmm.nn.multihead import MultiHeadAttention
from attnmm.nn.positional import RotaryPE
from attnmm.nn.relative import RelativePositionBias
from attnmm.nn.state import IncrementalState

_ACTIVATIONS: dict[str, type[nn.Module]] = {"relu": nn.ReLU, "gelu": nn.GELU, "silu": nn.SiLU}


def check_input(layer: str, x: object, d_model: int) -> None:
    """Refuse an input of a layer of width ``d_model`` that is not (B, L, d_model) or packed (N, d_model),
    naming ``d_model`` and the shape given (before any LayerNorm meets it)."""
    check_features(
        layer, "x", x, d_model, "d_model", {3: f"(B, L, {d_model})", 2: f"(N, {d_model})"},
        hint="the layer splits its own heads: give the sequence as (B, L, D) (not (B, H, L, E)), or graph "
        "nodes packed as (N, D)",
    )  # fmt: skip


class EncoderLayer(nn.Module):
    r"""A pre-norm transformer encoder block ("On Layer Normalization in the Transformer
    Architecture", Xiong et al., 2020) whose self-attention is restricted by a mask.

    .. math::
        \mathbf{X}' &= \mathbf{X} + \mathrm{Dropout}\left(\mathrm{MHA}(\mathrm{LN}(\mathbf{X}); A)\right) \\
        \mathbf{X}'' &= \mathbf{X}' + \mathrm{Dropout}\left(\mathbf{W}_2\, \mathrm{Dropout}(
        \sigma(\mathbf{W}_1 \mathrm{LN}(\mathbf{X}'))\right)

    Args:
        d_model (int): model width D.
        num_heads (int): number of heads H.
        dim_feedforward (int, optional): hidden width of the feed-forward network.
            (default: :obj:`2048`)
        dropout (float, optional): dropout on the residual branches, the feed-forward hidden
            layer and the attention weights (training only). (default: :obj:`0.1`)
        activation (str, optional): ``"relu"``, ``"gelu"`` or ``"silu"``. (default: :obj:`"gelu"`)
        layer_norm_eps (float, optional): LayerNorm epsilon. (default: :obj:`1e-5`)
        bias (bool, optional): biases in the linear layers. (default: :obj:`True`)
        rotary (RotaryPE, optional): rotary embedding of queries and keys. (default: :obj:`None`)
        position_bias (RelativePositionBias, optional): learned relative bias of the scores.
            (default: :obj:`None`)
        score (str, optional): ``"softmax"`` or ``"relu"`` attention. (default: :obj:`"softmax"`)

    Shapes:
        - **input:** x (B, L, D) or packed (N, D); ``bias`` (P,) or (P, H) per allowed pair
        - **output:** same shape as x; with ``return_weights`` also the
          :class:`~attnmm.attention.AttentionWeights`

    Examples:
        >>> import torch
        >>> from attnmm.masks import Window
        >>> layer = EncoderLayer(32, num_heads=4, dim_feedforward=64)
        >>> layer(torch.randn(2, 10, 32), Window(2, 2)).shape  # (B, L, D)
        torch.Size([2, 10, 32])
    """

    def __init__(
        self, d_model: int, num_heads: int, dim_feedforward: int = 2048, dropout: float = 0.1, *,
        activation: Literal["relu", "gelu", "silu"] = "gelu", layer_norm_eps: float = 1e-5, bias: bool = True,
        rotary: RotaryPE | None = None, position_bias: RelativePositionBias | None = None,
        score: Literal["softmax", "relu"] = "softmax",
    ) -> None:
        super().__init__()
        self.d_model = check_nonneg_int("d_model", d_model, minimum=1)
        dim_feedforward = check_nonneg_int("dim_feedforward", dim_feedforward, minimum=1)
        self.dropout = check_dropout(dropout)
        if activation not in _ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(_ACTIVATIONS)}, got {activation!r}")
        self.norm1 = nn.LayerNorm(self.d_model, eps=layer_norm_eps, bias=bias)
        self.attn = MultiHeadAttention(
            self.d_model, num_heads, dropout=self.dropout, bias=bias, rotary=rotary, position_bias=position_bias,
            score=score,
        )
        self.norm2 = nn.LayerNorm(self.d_model, eps=layer_norm_eps, bias=bias)
        self.ffn = nn.Sequential(
            nn.Linear(self.d_model, dim_feedforward, bias=bias), _ACTIVATIONS[activation](), nn.Dropout(self.dropout),
            nn.Linear(dim_feedforward, self.d_model, bias=bias),
        )
        self.drop = nn.Dropout(self.dropout)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for module in (self.norm1, self.norm2, self.attn, self.ffn[0], self.ffn[3]):
            module.reset_parameters()  # type: ignore[operator]

    @overload
    def forward(
        self, x: Tensor, mask: Mask | None = ..., *, bias: Tensor | None = ...,
        return_weights: Literal[False] = ..., state: IncrementalState | None = ..., plan: AttentionPlan | None = ...,
    ) -> Tensor: ...

    @overload
    def forward(
        self, x: Tensor, mask: Mask | None = ..., *, bias: Tensor | None = ..., return_weights: Literal[True],
        state: IncrementalState | None = ..., plan: AttentionPlan | None = ...,
    ) -> tuple[Tensor, AttentionWeights]: ...

    def forward(
        self, x: Tensor, mask: Mask | None = None, *, bias: Tensor | None = None, return_weights: bool = False,
        state: IncrementalState | None = None, plan: AttentionPlan | None = None,
    ) -> Tensor | tuple[Tensor, AttentionWeights]:
        check_input("EncoderLayer", x, self.d_model)
        h = self.norm1(x)  # (B, L, D)
        result = self.attn(h, mask=mask, bias=bias, return_weights=return_weights, state=state, plan=plan)
        h, weights = result if isinstance(result, tuple) else (result, None)
        x = x + self.drop(h)
        x = x + self.drop(self.ffn(self.norm2(x)))  # (B, L, D)
        return x if weights is None else (x, weights)


class Encoder(nn.Module):
    r"""A stack of pre-norm :class:`EncoderLayer` blocks and a final LayerNorm, all attending under
    one mask.

    .. math::
        \mathbf{X}^{(\ell)} = \mathrm{EncoderLayer}_\ell(\mathbf{X}^{(\ell - 1)}; A), \qquad
        \mathrm{Encoder}(\mathbf{X}) = \mathrm{LN}(\mathbf{X}^{(\mathrm{num\_layers})})

    A ``position_bias`` is shared by all layers (as in T5) and computed once per forward; a
    ``rotary`` embedding is applied in every layer. Dispatch too is made once per forward: the layers
    share an :class:`~attnmm.attention.AttentionPlan` (the backend and the mask's sparse form). With ``state`` (an
    :class:`~attnmm.nn.IncrementalState`), a causal encoder reads its input a few tokens at a
    time from key/value caches, as :class:`~attnmm.nn.MultiHeadAttention` describes (not with
    a ``position_bias``).

    Args:
        d_model (int): model width D.
        num_heads (int): number of heads H.
        num_layers (int): number of blocks.
        dim_feedforward (int, optional): hidden width of the feed-forward networks.
            (default: :obj:`2048`)
        dropout (float, optional): dropout of every block (training only). (default: :obj:`0.1`)
        activation (str, optional): ``"relu"``, ``"gelu"`` or ``"silu"``. (default: :obj:`"gelu"`)
        layer_norm_eps (float, optional): LayerNorm epsilon. (default: :obj:`1e-5`)
        bias (bool, optional): biases in the linear and norm layers. (default: :obj:`True`)
        rotary (RotaryPE, optional): rotary embedding of queries and keys. (default: :obj:`None`)
        position_bias (RelativePositionBias, optional): learned relative bias, shared by the layers.
            (default: :obj:`None`)
        score (str, optional): ``"softmax"`` or ``"relu"`` attention. (default: :obj:`"softmax"`)

    Shapes:
        - **input:** x (B, L, D) or packed (N, D)
        - **output:** same shape as x; with ``return_weights`` also a list of
          :class:`~attnmm.attention.AttentionWeights`, one per layer

    Examples:
        >>> import torch
        >>> from attnmm.masks import Causal
        >>> enc = Encoder(d_model=32, num_heads=4, num_layers=2, dim_feedforward=64, dropout=0.0)
        >>> enc(torch.randn(2, 10, 32), Causal()).shape  # (B, L, D)
        torch.Size([2, 10, 32])
    """

    def __init__(
        self, d_model: int, num_heads: int, num_layers: int, dim_feedforward: int = 2048, dropout: float = 0.1, *,
        activation: Literal["relu", "gelu", "silu"] = "gelu", layer_norm_eps: float = 1e-5, bias: bool = True,
        rotary: RotaryPE | None = None, position_bias: RelativePositionBias | None = None,
        score: Literal["softmax", "relu"] = "softmax",
    ) -> None:
        super().__init__()
        self._forms = FormStore()  # the masks' forms, kept across forwards by value (the plans' store)
        self.num_layers = check_nonneg_int("num_layers", num_layers, minimum=1)
        self.d_model = check_nonneg_int("d_model", d_model, minimum=1)
        self.layers = nn.ModuleList(
            EncoderLayer(
                d_model, num_heads, dim_feedforward, dropout, activation=activation, layer_norm_eps=layer_norm_eps,
                bias=bias, rotary=rotary, score=score,
            )
            for _ in range(self.num_layers)
        )
        if position_bias is not None and position_bias.num_heads != num_heads:
            raise ValueError(
                f"position_bias.num_heads must equal num_heads = {num_heads}, got {position_bias.num_heads}"
            )
        self.position_bias = position_bias
        self.norm = nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for layer in self.layers:
            cast(EncoderLayer, layer).reset_parameters()
        if self.position_bias is not None:
            self.position_bias.reset_parameters()
        self.norm.reset_parameters()

    @overload
    def forward(
        self, x: Tensor, mask: Mask | None = ..., *, bias: Tensor | None = ..., tokens: Any = ...,
        state: IncrementalState | None = ..., return_weights: Literal[False] = ...,
    ) -> Tensor: ...

    @overload
    def forward(
        self, x: Tensor, mask: Mask | None = ..., *, bias: Tensor | None = ..., tokens: Any = ...,
        state: IncrementalState | None = ..., return_weights: Literal[True],
    ) -> tuple[Tensor, list[AttentionWeights]]: ...

    def forward(
        self, x: Tensor, mask: Mask | None = None, *, bias: Tensor | None = None, tokens: Any = None,
        state: IncrementalState | None = None, return_weights: bool = False,
    ) -> Tensor | tuple[Tensor, list[AttentionWeights]]:
        # (``tokens``, the adapter's output, is part of every encoder's call; x and mask say all this one needs)
        check_input("Encoder", x, self.d_model)
        if self.position_bias is not None and state is not None:
            raise ValueError("state= does not support score biases (position_bias): call without state")
        if self.position_bias is not None:
            L = x.size(0) if x.dim() == 2 else x.size(1)
            rel = self.position_bias(mask, L, L, None if x.dim() == 2 else x.size(0))  # (P, H)
            bias = rel if bias is None else rel + (bias.unsqueeze(-1) if bias.dim() == 1 else bias)
        all_weights: list[AttentionWeights] = []
        plan = AttentionPlan(mask, store=self._forms)  # one dispatch for every layer: same mask, same sizes
        for layer in self.layers:
            if return_weights:
                x, weights = layer(x, mask, bias=bias, return_weights=True, state=state, plan=plan)
                all_weights.append(weights)
            else:
                x = layer(x, mask, bias=bias, state=state, plan=plan)  # (B, L, D)
        x = self.norm(x)
        return (x, all_weights) if return_weights else x


__all__ = ["Encoder", "EncoderLayer"]
