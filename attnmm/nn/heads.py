r"""Classification heads, the model parts after the encoder: pooled sequence/graph classification (also per
segment of a multimodal sequence) and per-token classification. The heads of sequence recognition are
the CTC head (:mod:`attnmm.nn.ctc`) and the attention decoder (:mod:`attnmm.nn.decoder`)."""

from __future__ import annotations

import itertools
from typing import Literal

import torch
from torch import Tensor, nn

from attnmm._checks import check_features, check_nonneg_int
from attnmm.common.tokens import Tokens
from attnmm.masks import segmentation


def _real(x: Tensor, lengths: Tensor) -> Tensor:
    return torch.arange(x.size(1), device=x.device) < lengths.view(-1, 1)  # (B, L): the real tokens


def masked_mean(x: Tensor, lengths: Tensor | None) -> Tensor:
    """Mean over the first ``lengths[b]`` tokens of each item of x (B, L, D); 0 for empty items."""
    if lengths is None:
        return x.mean(1)
    keep = _real(x, lengths)
    return (x * keep.unsqueeze(-1)).sum(1) / keep.sum(1, keepdim=True).clamp(min=1)


def _check_h(head: str, h: object, d_model: int) -> None:
    check_features(head, "h", h, d_model, "d_model", {3: f"(B, L, {d_model})", 2: f"(N, {d_model})"})


class PoolingClassifier(nn.Module):
    r"""Pools the encoder's tokens over each item and classifies,
    :math:`\mathbf{y} = \mathbf{W} \,\mathrm{pool}_{i \le n_b} \mathbf{h}_i + \mathbf{b}`,
    optionally through ``hidden_layers`` hidden layers first (an MLP head,
    :math:`\mathbf{z} \leftarrow \mathrm{ReLU}(\mathbf{W}_l \mathbf{z} + \mathbf{b}_l)` of width D each, as
    the graph-level heads of GraphGPS and of the LRGB baselines).

    Mean pooling counts only real tokens (``Tokens.lengths``) in the padded layout and uses each
    graph's nodes (``Tokens.batch``) in the packed layout; sum pooling adds them up, so the pooled
    vector grows with the item's size (GIN's readout, where the number of nodes matters).

    Args:
        d_model (int): token width D.
        num_classes (int): number of classes C.
        pooling (str, optional): ``"mean"``, ``"max"`` or ``"sum"``. (default: :obj:`"mean"`)
        dropout (float, optional): dropout before each linear layer. (default: :obj:`0.0`)
        hidden_layers (int, optional): hidden layers of width D before the output layer.
            (default: :obj:`0`)

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
        self, d_model: int, num_classes: int, pooling: Literal["mean", "max", "sum"] = "mean", dropout: float = 0.0,
        hidden_layers: int = 0,
    ) -> None:
        super().__init__()
        if pooling not in ("mean", "max", "sum"):
            raise ValueError(f"pooling must be 'mean', 'max' or 'sum', got {pooling!r}")
        self.pooling = pooling
        self.drop = nn.Dropout(dropout)
        width = check_nonneg_int("d_model", d_model, minimum=1)
        hidden: list[nn.Module] = []
        for _ in range(check_nonneg_int("hidden_layers", hidden_layers)):
            hidden += [nn.Dropout(dropout), nn.Linear(width, width), nn.ReLU()]
        self.hidden = nn.Sequential(*hidden) if hidden else None
        self.linear = nn.Linear(width, check_nonneg_int("num_classes", num_classes, minimum=1))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for module in [*(self.hidden or []), self.linear]:
            if isinstance(module, nn.Linear):
                module.reset_parameters()

    def pool(self, h: Tensor, tokens: Tokens) -> Tensor:
        """Pooled features (B, D)."""
        if h.dim() == 2:  # packed nodes: pool per graph
            from torch_geometric.nn import global_add_pool, global_max_pool, global_mean_pool

            fn = {"mean": global_mean_pool, "max": global_max_pool, "sum": global_add_pool}[self.pooling]
            return fn(h, tokens.batch)
        if self.pooling == "mean":
            return masked_mean(h, tokens.lengths)
        if tokens.lengths is None:
            return h.sum(1) if self.pooling == "sum" else h.amax(1)
        keep = _real(h, tokens.lengths)
        if self.pooling == "sum":
            return (h * keep.unsqueeze(-1)).sum(1)
        pooled = h.masked_fill(~keep.unsqueeze(-1), float("-inf")).amax(1)
        return torch.where(keep.any(1, keepdim=True), pooled, torch.zeros_like(pooled))

    def forward(self, h: Tensor, tokens: Tokens) -> Tensor:
        _check_h("PoolingClassifier", h, self.linear.in_features)
        z = self.pool(h, tokens)  # (B, D)
        if self.hidden is not None:
            z = self.hidden(z)
        return self.linear(self.drop(z))


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
        _check_h(type(self).__name__, h, self.linear.in_features)
        return self.linear(self.drop(h))


class TokenHeads(nn.ModuleDict):
    r"""One :class:`TokenClassifier` per key, of one width and one class count: the auxiliary heads of
    multi-task tagging, keyed by the batch entries that hold their targets (e.g. XPOS tags and
    dependency relations beside UPOS), as :class:`~attnmm.lightning.ClassificationTask` takes them.

    A recipe names it by ``class_path`` and links ``d_model``, ``keys`` and ``num_classes`` to the
    adapter's width and the data's auxiliary columns and class cap.

    Args:
        d_model (int): token width D.
        keys (list[str]): batch keys of the targets, one head each, in this order.
        num_classes (int): number of classes C of every head.
        dropout (float, optional): dropout before each linear layer. (default: :obj:`0.0`)

    Examples:
        >>> import torch
        >>> heads = TokenHeads(8, ["xpos", "deprel"], 40)
        >>> {key: head(torch.randn(2, 5, 8)).shape[-1] for key, head in heads.items()}
        {'xpos': 40, 'deprel': 40}
    """

    def __init__(self, d_model: int, keys: list[str], num_classes: int, dropout: float = 0.0) -> None:
        if len(set(keys)) != len(keys) or not all(isinstance(k, str) and k for k in keys):
            raise ValueError(f"keys must be distinct non-empty batch keys, got {keys!r}")
        super().__init__({key: TokenClassifier(d_model, num_classes, dropout) for key in keys})


#: What :class:`SegmentPoolingClassifier` averages with its weights: the segments' logits, their
#: probabilities, or their probabilities with equal weights.
COMBINES = ("logits", "probabilities", "average")


class SegmentPoolingClassifier(nn.Module):
    r"""Pools a segmented sequence segment by segment and classifies: for item :math:`b` with real
    segments :math:`S_b` (length > 0),

    .. math::
        \mathbf{p}_{b,k} = \frac{1}{n_{b,k}} \sum_{i < n_{b,k}} \mathbf{h}_{o_k + i}, \qquad
        \mathbf{y}_b = \frac{1}{|S_b|} \sum_{k \in S_b} \mathbf{W}_k \mathbf{p}_{b,k} + \mathbf{b}_k

    With ``num_segments`` each segment has its own classifier :math:`\mathbf{W}_k` and the
    predictions are averaged (late fusion: each modality predicts alone); without, one classifier
    reads the mean of the present segments' pooled features. A segment an item lacks is left out of
    its average, so an item with one modality is classified from that one. The segment layout and
    lengths come from the tokens' mask (:func:`~attnmm.masks.segmentation`: a
    :class:`~attnmm.masks.Segments` mask, e.g. of :class:`~attnmm.adapters.MultimodalAdapter`, alone or
    intersected); a mask of one sequence is one segment of every token.

    With ``gate`` (and ``num_segments``), the average is weighted by a learned confidence of each
    segment, read from its own pooled features (a gate, as in mixtures of experts):

    .. math::
        \mathbf{y}_b = \sum_{k \in S_b} \alpha_{b,k} (\mathbf{W}_k \mathbf{p}_{b,k} + \mathbf{b}_k),
        \qquad \alpha_{b,k} = \frac{\exp(\mathbf{u}_k^\top \mathbf{p}_{b,k} + c_k)}
        {\sum_{j \in S_b} \exp(\mathbf{u}_j^\top \mathbf{p}_{b,j} + c_j)}

    so that a modality whose tokens look unreliable (noisy, from an unknown voice) can count less, item
    by item. The gate starts at zero (the plain average). :meth:`segment_logits` gives every segment's
    own prediction, which :class:`~attnmm.lightning.ClassificationTask` can train beside the fused one
    (``segment_loss_weight``), so that each modality learns to predict alone.

    ``gate_only`` (B,) marks items that train the gate alone: for them the pooled features and the
    segments' logits are constants, so their loss reaches :math:`\mathbf{u}_k, c_k` and nothing else
    (voices the towers never learn from, to show the gate how the model fares on unfamiliar input; see
    ``AVDigitsDataModule(gate_voices=...)``, whose batches carry the flag, which
    :class:`~attnmm.lightning.ClassificationTask` passes on). A head without a gate refuses them.

    ``combine`` says what the weights average: ``"logits"`` (above), where a confidently wrong segment
    can outvote the others; ``"probabilities"``, :math:`\mathbf{y}_b = \log \sum_{k \in S_b}
    \alpha_{b,k}\, \mathrm{softmax}(\mathbf{W}_k \mathbf{p}_{b,k} + \mathbf{b}_k)` (a softmax of the
    output is the mixture), where no segment moves more than its weight of probability; or
    ``"average"``, the same with equal weights, the gate unused. It holds no parameter: set
    ``head.combine`` on a loaded model to evaluate it another way.

    Args:
        d_model (int): token width D.
        num_classes (int): number of classes C.
        num_segments (int, optional): segments K, one classifier each; ``None`` shares one.
            (default: :obj:`None`)
        dropout (float, optional): dropout before the linear layer(s). (default: :obj:`0.0`)
        gate (bool, optional): weight the segments' predictions by a learned confidence per item;
            needs ``num_segments``. (default: :obj:`False`)
        combine (str, optional): ``"logits"``, ``"probabilities"`` or ``"average"`` (see above); the
            last two need ``num_segments``. (default: ``"logits"``)

    Shapes:
        - **input:** h (B, L, D), the adapter's :class:`Tokens` and optionally ``gate_only`` (B,) bool
        - **output:** logits (B, C)

    Examples:
        >>> import torch
        >>> from attnmm.adapters import Tokens
        >>> from attnmm.masks import Segments
        >>> head = SegmentPoolingClassifier(8, num_classes=3, num_segments=2)
        >>> h = torch.randn(2, 5, 8)
        >>> head(h, Tokens(h, Segments([3, 2], lengths=[[3, 2], [0, 1]]))).shape
        torch.Size([2, 3])
    """

    def __init__(
        self, d_model: int, num_classes: int, num_segments: int | None = None, dropout: float = 0.0, gate: bool = False,
        combine: Literal["logits", "probabilities", "average"] = "logits",
    ) -> None:
        super().__init__()
        if combine not in COMBINES:
            raise ValueError(f"combine must be one of {', '.join(map(repr, COMBINES))}, got {combine!r}")
        if (combine != "logits" or gate) and num_segments is None:
            what = f"combine={combine!r} averages" if combine != "logits" else "gate weights"
            raise ValueError(
                f"{what} the segments' own predictions, but without num_segments the segments share one "
                "classifier of their mean features: set num_segments (the modalities, plus 1 for a bottleneck)"
            )
        self.combine = combine
        d_model = check_nonneg_int("d_model", d_model, minimum=1)
        num_classes = check_nonneg_int("num_classes", num_classes, minimum=1)
        self.num_segments = None if num_segments is None else check_nonneg_int("num_segments", num_segments, minimum=1)
        self.drop = nn.Dropout(dropout)
        self.linears = nn.ModuleList(nn.Linear(d_model, num_classes) for _ in range(self.num_segments or 1))
        self.gate = nn.Linear(d_model, self.num_segments) if gate and self.num_segments else None  # u_k, c_k
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for linear in self.linears:
            linear.reset_parameters()  # type: ignore[operator]
        if self.gate is not None:  # the plain average to begin with
            nn.init.zeros_(self.gate.weight)
            nn.init.zeros_(self.gate.bias)

    def pool(self, h: Tensor, tokens: Tokens) -> tuple[Tensor, Tensor]:
        """Pooled features (B, K, D) of every segment, and which segments each item has (B, K)."""
        layout = None if tokens.mask is None else segmentation(tokens.mask)
        if layout is None:  # one segment: the real tokens
            layout = (h.size(1),), None if tokens.lengths is None else tokens.lengths.view(-1, 1)
        sizes, real = layout
        offsets = [0, *itertools.accumulate(sizes)]
        lengths = (torch.tensor(sizes).expand(h.size(0), -1) if real is None else real).to(h.device)  # (B, K)
        pooled = [masked_mean(h[:, offsets[k] : offsets[k + 1]], lengths[:, k]) for k in range(len(offsets) - 1)]
        return torch.stack(pooled, 1), lengths > 0  # (B, K, D), (B, K)

    def _weights(self, pooled: Tensor, present: Tensor) -> Tensor:
        """alpha (B, K): the plain average of the present segments, or the gate's softmax over them;
        0 for absent segments (and for items with none). ``combine="average"`` leaves the gate unused."""
        alpha = torch.softmax(self._gate_scores(pooled).masked_fill(~present, float("-inf")), 1)  # (0s without a gate)
        return torch.where(present.any(1, keepdim=True), alpha, torch.zeros_like(alpha))

    def _gate_scores(self, pooled: Tensor) -> Tensor:
        """(B, K): u_k . p_bk + c_k, or 0s without the gate (or with ``combine="average"``)."""
        if self.gate is None or self.combine == "average":
            return pooled.new_zeros(pooled.shape[:2])
        return (pooled * self.gate.weight).sum(-1) + self.gate.bias

    def _check_segments(self, pooled: Tensor) -> None:
        if self.num_segments is not None and pooled.size(1) != self.num_segments:
            raise ValueError(
                f"the head has num_segments={self.num_segments} classifiers but the tokens have {pooled.size(1)} "
                "segments; set num_segments to the number of segments (modalities, plus 1 for a bottleneck)"
            )

    def _segment_logits(self, pooled: Tensor) -> Tensor:
        linears = list(self.linears) if self.num_segments is not None else [self.linears[0]] * pooled.size(1)
        return torch.stack([lin(self.drop(pooled[:, k])) for k, lin in enumerate(linears)], 1)  # (B, K, C)

    def segment_logits(self, h: Tensor, tokens: Tokens) -> tuple[Tensor, Tensor]:
        """Every segment's own prediction (B, K, C) (with one shared classifier: of its own pooled
        features) and which segments each item has (B, K)."""
        pooled, present = self.pool(h, tokens)
        self._check_segments(pooled)
        return self._segment_logits(pooled), present

    def segment_weights(self, h: Tensor, tokens: Tokens) -> Tensor:
        """The weights alpha (B, K) of the segments' predictions in :meth:`forward` (uniform over the
        present ones without a gate, or with ``combine="average"``)."""
        pooled, present = self.pool(h, tokens)
        self._check_segments(pooled)
        return self._weights(pooled, present)

    def forward(self, h: Tensor, tokens: Tokens, gate_only: Tensor | None = None) -> Tensor:
        pooled, present = self.pool(h, tokens)  # (B, K, D), (B, K)
        self._check_segments(pooled)
        if self.num_segments is None:
            weight = self._weights(pooled, present)  # (B, K)
            return self.linears[0](self.drop((pooled * weight.unsqueeze(-1)).sum(1)))
        if gate_only is not None and bool(gate_only.any()):
            if self.gate is None or self.combine == "average":
                why = "has no gate" if self.gate is None else "leaves its gate unused (combine='average')"
                raise ValueError(
                    f"the batch marks items gate_only (they train the gate alone), but this head {why}: build "
                    "it with gate=True and combine 'logits' or 'probabilities', or drop the gate-only items"
                )
            # what a gate-only item teaches reaches the gate's parameters only: its pooled features and its
            # segments' logits are constants to the loss
            rows = gate_only.to(pooled.device).view(-1, 1, 1)
            pooled = torch.where(rows, pooled.detach(), pooled)
            logits = self._segment_logits(pooled)
            logits = torch.where(rows, logits.detach(), logits)
        else:
            logits = self._segment_logits(pooled)  # (B, K, C)
        if self.combine == "logits":
            return (logits * self._weights(pooled, present).unsqueeze(-1)).sum(1)
        # log sum_k alpha_k softmax(z_k), from the log-weights (an absent segment's is -inf; no log of a 0
        # weight, whose gradient would be NaN); an item with no segment gets 0s
        some = present.any(1, keepdim=True)
        log_alpha = torch.log_softmax(self._gate_scores(pooled).masked_fill(~(present | ~some), float("-inf")), 1)
        mixed = torch.logsumexp(torch.log_softmax(logits, -1) + log_alpha.unsqueeze(-1), 1)
        return torch.where(some, mixed, torch.zeros_like(mixed))
