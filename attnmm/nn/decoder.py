r"""The attention decoder of sequence recognition: labels generated one by one, each attending the
labels so far (causally) and the encoder's frames (cross-attention)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from attnmm._checks import check_nonneg_int
from attnmm.common.tokens import Tokens
from attnmm.masks import Causal, Mask, Padding
from attnmm.nn.multihead import MultiHeadAttention
from attnmm.nn.positional import SinusoidalPE


class AttentionDecoderLayer(nn.Module):
    r"""A pre-norm transformer decoder block: causal self-attention over the labels so far, then
    cross-attention to the encoder's frames, then a feed-forward network.

    .. math::
        \mathbf{Y}' &= \mathbf{Y} + \mathrm{MHA}(\mathrm{LN}(\mathbf{Y}); \mathrm{Causal}) \\
        \mathbf{Y}'' &= \mathbf{Y}' + \mathrm{MHA}(\mathrm{LN}(\mathbf{Y}'), \mathbf{H};
        \mathrm{Padding}(n_b)) \\
        \mathbf{Y}''' &= \mathbf{Y}'' + \mathbf{W}_2\, \mathrm{GELU}(\mathbf{W}_1 \mathrm{LN}(\mathbf{Y}''))

    (dropout on each branch). Args as :class:`AttentionDecoder`.

    Shapes:
        - **input:** y (B, U, D), memory (B, L, D), memory_mask a mask over the L frames (or ``None``)
        - **output:** (B, U, D)
    """

    def __init__(self, d_model: int, num_heads: int, dim_feedforward: int, dropout: float) -> None:
        super().__init__()
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, num_heads, dropout=dropout)
        self.ffn = nn.Sequential(
            nn.Linear(d_model, dim_feedforward), nn.GELU(), nn.Dropout(dropout), nn.Linear(dim_feedforward, d_model)
        )
        self.drop = nn.Dropout(dropout)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for module in (self.norm1, self.norm2, self.norm3, self.self_attn, self.cross_attn, self.ffn[0], self.ffn[3]):
            module.reset_parameters()  # type: ignore[operator]

    def forward(self, y: Tensor, memory: Tensor, memory_mask: Mask | None) -> Tensor:
        y = y + self.drop(self.self_attn(self.norm1(y), mask=Causal()))  # (B, U, D)
        y = y + self.drop(self.cross_attn(self.norm2(y), memory, mask=memory_mask))  # (B, U, D)
        return y + self.drop(self.ffn(self.norm3(y)))


class AttentionDecoder(nn.Module):
    r"""Attention decoder of a hybrid CTC/attention recogniser ("Hybrid CTC/Attention Architecture for
    End-to-End Speech Recognition", Watanabe et al., 2017): labels predicted one after another, each
    from the labels before it (causal self-attention) and the encoder's frames (cross-attention).

    .. math::
        p(y_u \mid y_{<u}, \mathbf{H}) = \mathrm{softmax}\big(\mathbf{W}\,
        \mathrm{Decoder}(\mathrm{Emb}(\langle s \rangle, y_1, \ldots, y_{u-1}) + \mathrm{PE};
        \mathbf{H})_u\big)

    The vocabulary is the C classes plus one symbol, index C, that starts the input and ends the
    output (``<sos/eos>``): teacher forcing reads ``(C, y_1, .., y_U)`` and predicts
    ``(y_1, .., y_U, C)``. Cross-attention sees each item's real frames (``Tokens.lengths``).

    Args:
        d_model (int): width D of the encoder's frames and of the decoder.
        num_classes (int): number of classes C.
        num_heads (int, optional): heads H of both attentions. (default: :obj:`4`)
        num_layers (int, optional): decoder blocks. (default: :obj:`2`)
        dim_feedforward (int, optional): hidden width of the feed-forward networks. (default: :obj:`256`)
        dropout (float, optional): dropout (training only). (default: :obj:`0.1`)

    Shapes:
        - **input:** h (B, L, D), the adapter's :class:`Tokens`, labels in (B, U')
        - **output:** logits (B, U', C + 1)

    Examples:
        >>> import torch
        >>> from attnmm.adapters import Tokens
        >>> dec = AttentionDecoder(16, num_classes=10, num_layers=1)
        >>> h = torch.randn(2, 7, 16)
        >>> y_in = dec.teacher_inputs(torch.tensor([[3, 1, -100], [4, 1, 5]]), torch.tensor([2, 3]))
        >>> y_in
        tensor([[10,  3,  1, 10],
                [10,  4,  1,  5]])
        >>> dec(h, Tokens(h, lengths=torch.tensor([7, 4])), y_in).shape
        torch.Size([2, 4, 11])
    """

    def __init__(
        self, d_model: int, num_classes: int, num_heads: int = 4, num_layers: int = 2, dim_feedforward: int = 256,
        dropout: float = 0.1,
    ) -> None:
        super().__init__()
        self.d_model = check_nonneg_int("d_model", d_model, minimum=1)
        self.num_classes = check_nonneg_int("num_classes", num_classes, minimum=1)
        self.embed = nn.Embedding(self.num_classes + 1, self.d_model)
        self.pos = SinusoidalPE(self.d_model)
        self.drop = nn.Dropout(dropout)
        self.layers = nn.ModuleList(
            AttentionDecoderLayer(self.d_model, num_heads, dim_feedforward, dropout)
            for _ in range(check_nonneg_int("num_layers", num_layers, minimum=1))
        )
        self.norm = nn.LayerNorm(self.d_model)
        self.out = nn.Linear(self.d_model, self.num_classes + 1)
        self.reset_parameters()

    @property
    def sos_eos(self) -> int:
        """Index of the start and end symbol, C."""
        return self.num_classes

    def reset_parameters(self) -> None:
        self.embed.reset_parameters()
        for layer in self.layers:
            layer.reset_parameters()  # type: ignore[operator]
        self.norm.reset_parameters()
        self.out.reset_parameters()

    def teacher_inputs(self, targets: Tensor, target_lengths: Tensor) -> Tensor:
        r"""Decoder inputs (B, U + 1) for targets (B, U): ``<sos>`` then the labels; padding filled
        with ``<sos/eos>`` (read only by positions the loss ignores)."""
        keep = torch.arange(targets.size(1), device=targets.device) < target_lengths.view(-1, 1)  # (B, U)
        labels = torch.where(keep, targets, self.sos_eos)
        return torch.cat([labels.new_full((targets.size(0), 1), self.sos_eos), labels], 1)

    def teacher_targets(self, targets: Tensor, target_lengths: Tensor) -> Tensor:
        r"""Decoder outputs (B, U + 1) for targets (B, U): the labels then ``<eos>``, ``-100`` after."""
        U = targets.size(1)
        positions = torch.arange(U + 1, device=targets.device).unsqueeze(0)  # (1, U + 1)
        padded = torch.cat([targets, targets.new_full((targets.size(0), 1), -100)], 1)
        out = torch.where(positions < target_lengths.view(-1, 1), padded, -100)
        return out.masked_fill(positions == target_lengths.view(-1, 1), self.sos_eos)

    def forward(self, h: Tensor, tokens: Tokens, labels_in: Tensor) -> Tensor:
        memory_mask = None if tokens.lengths is None else Padding(tokens.lengths)
        y = self.drop(self.pos(self.embed(labels_in) * self.d_model**0.5))  # (B, U', D)
        for layer in self.layers:
            y = layer(y, h, memory_mask)
        return self.out(self.norm(y))  # (B, U', C + 1)

    def score(self, h: Tensor, tokens: Tokens, hypotheses: list[list[list[int]]]) -> list[list[float]]:
        r"""Log-probability :math:`\log p(y_1, .., y_U, \langle eos \rangle \mid \mathbf{H})` of each
        hypothesis (lists of classes) of each item, e.g. to rescore a CTC n-best list."""
        flat = [(b, hyp) for b, hyps in enumerate(hypotheses) for hyp in hyps]
        if not flat:
            return [[] for _ in hypotheses]
        index = torch.tensor([b for b, _ in flat], device=h.device)
        lengths = torch.tensor([len(hyp) for _, hyp in flat], device=h.device)
        targets = torch.full((len(flat), max(1, int(lengths.max()))), -100, dtype=torch.long, device=h.device)
        for i, (_, hyp) in enumerate(flat):
            targets[i, : len(hyp)] = torch.tensor(hyp, dtype=torch.long)
        member_lengths = None if tokens.lengths is None else tokens.lengths[index]
        logp = self(h[index], Tokens(h[index], lengths=member_lengths), self.teacher_inputs(targets, lengths))
        logp = logp.float().log_softmax(-1)  # (N, U + 1, C + 1)
        gold = self.teacher_targets(targets, lengths)  # (N, U + 1)
        picked = logp.gather(-1, gold.clamp(min=0).unsqueeze(-1)).squeeze(-1).masked_fill(gold < 0, 0.0)
        totals = picked.sum(1).tolist()
        out: list[list[float]] = [[] for _ in hypotheses]
        for (b, _), total in zip(flat, totals, strict=True):
            out[b].append(total)
        return out

    @torch.no_grad()
    def greedy(self, h: Tensor, tokens: Tokens, max_labels: int) -> list[list[int]]:
        r"""Greedy decoding: the most likely next label until ``<eos>`` or ``max_labels`` labels."""
        B = h.size(0)
        labels = torch.full((B, 1), self.sos_eos, dtype=torch.long, device=h.device)  # (B, 1)
        done = torch.zeros(B, dtype=torch.bool, device=h.device)
        for _ in range(max_labels):
            nxt = self(h, tokens, labels)[:, -1].argmax(-1)  # (B,)
            nxt = nxt.masked_fill(done, self.sos_eos)
            labels = torch.cat([labels, nxt.unsqueeze(1)], 1)
            done |= nxt == self.sos_eos
            if bool(done.all()):
                break
        return [row[: row.index(self.sos_eos)] if self.sos_eos in row else row for row in labels[:, 1:].tolist()]


__all__ = ["AttentionDecoder", "AttentionDecoderLayer"]
