"""AttentionDecoder: each label attends the labels before it and the real frames of its utterance."""

from __future__ import annotations

import torch

from attnmm.adapters import Tokens
from attnmm.nn import AttentionDecoder


def test_a_label_reads_only_earlier_labels_and_real_frames() -> None:
    torch.manual_seed(0)
    dec = AttentionDecoder(16, num_classes=10, num_heads=2, num_layers=2, dim_feedforward=32, dropout=0.0).eval()
    h = torch.randn(2, 9, 16)
    tokens = Tokens(h, lengths=torch.tensor([9, 5]))
    labels = torch.tensor([[10, 3, 1, 4], [10, 4, 1, 5]])
    logits = dec(h, tokens, labels)
    assert logits.shape == (2, 4, 11)
    later = labels.clone()
    later[:, 2:] = torch.tensor([7, 7])
    torch.testing.assert_close(dec(h, tokens, later)[:, :2], logits[:, :2])  # causal over the labels
    padded = h.clone()
    padded[1, 5:] = 100.0  # the second utterance's padding frames: never read
    torch.testing.assert_close(dec(padded, Tokens(padded, lengths=tokens.lengths), labels)[1], logits[1])
