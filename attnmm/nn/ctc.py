r"""Connectionist temporal classification: a per-frame head, its targets' check, greedy and prefix beam search
decoding (the loss is the objective :class:`~attnmm.lightning.CTC`).

Conventions shared by everything here (and by streaming recognisers built on it): the head gives
(B, L, C + 1) logits per frame, index 0 is the blank, and class c (e.g. digit c) is index c + 1.
Decoders return class indices 0..C-1.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import torch
from torch import Tensor

from attnmm._checks import check_nonneg_int
from attnmm.nn.heads import TokenClassifier

__all__ = ["BLANK", "CTCHead", "check_ctc_targets", "ctc_greedy_decode", "ctc_prefix_beam_search", "nbest_labels"]

#: Index of the CTC blank in the head's outputs; class c is index c + 1.
BLANK = 0


def _frame_lengths(log_probs: Tensor, lengths: Tensor | None) -> list[int]:
    if log_probs.dim() != 3:
        raise ValueError(f"log_probs must be (B, L, C + 1), got shape {tuple(log_probs.shape)}")
    B, L = log_probs.shape[:2]
    if lengths is None:
        return [L] * B
    if lengths.shape != (B,) or (B and int(lengths.max()) > L):
        raise ValueError(f"lengths must be (B,) = ({B},) frame counts of at most L = {L}, got {lengths.tolist()}")
    return [int(n) for n in lengths]


def ctc_greedy_decode(log_probs: Tensor, lengths: Tensor | None = None) -> list[list[int]]:
    r"""Best-path CTC decoding: the most likely token of every frame, repeats merged, blanks removed.

    .. math::
        \hat{\mathbf{y}} = \mathcal{B}\big(\arg\max_k p_t(k)\big)_{t = 1}^{n_b}

    with :math:`\mathcal{B}` the CTC collapse (merge repeats, then drop blanks).

    Args:
        log_probs (Tensor): per-frame scores (B, L, C + 1), blank at index 0 (any monotone scores
            work: logits or log-probabilities).
        lengths (LongTensor, optional): real frames of each item (B,). (default: all L)

    Returns:
        list[list[int]]: the class indices (0..C-1) of each item.

    Examples:
        >>> import torch
        >>> frames = torch.tensor([[0, 3, 3, 0, 3, 1, 1, 0]])  # blank, 2, 2, blank, 2, 0, 0, blank
        >>> ctc_greedy_decode(torch.nn.functional.one_hot(frames, 11).float())
        [[2, 2, 0]]
    """
    best = zip(log_probs.argmax(-1).tolist(), _frame_lengths(log_probs, lengths), strict=True)  # (B, L), (B,)
    return [[k - 1 for k, _ in itertools.groupby(frames[:n]) if k != BLANK] for frames, n in best]  # repeats merged


def _logadd(a: float, b: float) -> float:
    m = max(a, b)
    return m if m == -math.inf else m + math.log1p(math.exp(-abs(a - b)))


def _add(table: dict[tuple[int, ...], list[float]], prefix: tuple[int, ...], slot: int, value: float) -> None:
    """Add probability ``exp(value)`` to slot 0 (paths ending in blank) or 1 (in the last label) of ``prefix``."""
    entry = table.setdefault(prefix, [-math.inf, -math.inf])
    entry[slot] = _logadd(entry[slot], value)


def ctc_prefix_beam_search(
    log_probs: Tensor, lengths: Tensor | None = None, beam_width: int = 8
) -> list[list[tuple[list[int], float]]]:
    r"""CTC prefix beam search (Hannun et al., 2014, "First-Pass Large Vocabulary Continuous Speech
    Recognition using Bi-Directional Recurrent DNNs"): the ``beam_width`` most likely label prefixes,
    each scored by the total probability of all frame paths that collapse to it.

    .. math::
        p(\mathbf{y} \mid \mathbf{X}) = \sum_{\pi \,:\, \mathcal{B}(\pi) = \mathbf{y}} \prod_t p_t(\pi_t)

    Each prefix keeps two log-probabilities, of its paths ending in a blank and in its last label;
    after every frame the prefixes are merged and the ``beam_width`` best kept. With
    ``beam_width=1`` it agrees with :func:`ctc_greedy_decode` wherever one path dominates each frame.

    Args:
        log_probs (Tensor): per-frame log-probabilities (B, L, C + 1), blank at index 0.
        lengths (LongTensor, optional): real frames of each item (B,). (default: all L)
        beam_width (int, optional): prefixes kept after each frame, >= 1. (default: :obj:`8`)

    Returns:
        list[list[tuple[list[int], float]]]: per item, up to ``beam_width`` ``(classes, log-probability)``
        pairs, best first; classes are 0..C-1.

    Examples:
        >>> import torch
        >>> p = torch.tensor([[[0.6, 0.4], [0.6, 0.4]]]).log()  # blank or class 0, twice
        >>> [(y, round(s, 2)) for y, s in ctc_prefix_beam_search(p, beam_width=2)[0]]
        [([0], -0.45), ([], -1.02)]
        >>> ctc_greedy_decode(p)  # the best path is blank, blank; the best labelling is [0] (p = 0.64)
        [[]]
    """
    check_nonneg_int("beam_width", beam_width, minimum=1)
    scores = log_probs.detach().float().cpu()
    results = []
    for b, n in enumerate(_frame_lengths(log_probs, lengths)):
        # prefix -> (log p of its paths ending in blank, ... ending in its last label)
        beams: dict[tuple[int, ...], tuple[float, float]] = {(): (0.0, -math.inf)}
        for frame in scores[b, :n].tolist():
            blank = frame[BLANK]
            nxt: dict[tuple[int, ...], list[float]] = {}
            for prefix, (p_b, p_nb) in beams.items():
                total = _logadd(p_b, p_nb)
                _add(nxt, prefix, 0, total + blank)
                last = prefix[-1] if prefix else None
                for k in range(1, len(frame)):
                    if frame[k] == -math.inf:
                        continue
                    if k == last:  # a repeat extends only after a blank; else it merges into the prefix
                        _add(nxt, (*prefix, k), 1, p_b + frame[k])
                        _add(nxt, prefix, 1, p_nb + frame[k])
                    else:
                        _add(nxt, (*prefix, k), 1, total + frame[k])
            ranked = sorted(nxt.items(), key=lambda item: _logadd(*item[1]), reverse=True)[:beam_width]
            beams = {prefix: (p_b, p_nb) for prefix, (p_b, p_nb) in ranked}
        ranked_final = sorted(beams.items(), key=lambda item: _logadd(*item[1]), reverse=True)
        results.append([([k - 1 for k in prefix], _logadd(*lp)) for prefix, lp in ranked_final])
    return results


class CTCHead(TokenClassifier):
    r"""Per-frame CTC classifier (Graves et al., 2006, "Connectionist Temporal Classification"):
    :math:`\mathbf{z}_t = \mathbf{W} \mathbf{h}_t + \mathbf{b} \in \mathbb{R}^{C + 1}`, blank at index 0.

    Trained by the objective :class:`~attnmm.lightning.CTC` (:func:`torch.nn.functional.ctc_loss`, the
    negative log of :math:`p(\mathbf{y} \mid \mathbf{X})` summed over all alignments), e.g. in a
    :class:`~attnmm.lightning.SequenceTask`.

    Args:
        d_model (int): token width D.
        num_classes (int): number of classes C (the blank is extra).
        dropout (float, optional): dropout before the linear layer. (default: :obj:`0.0`)

    Shapes:
        - **input:** h (B, L, D) and the adapter's :class:`~attnmm.adapters.Tokens`
        - **output:** logits (B, L, C + 1)

    Examples:
        >>> import torch
        >>> head = CTCHead(8, num_classes=10)
        >>> head(torch.randn(2, 5, 8)).shape
        torch.Size([2, 5, 11])
    """

    def __init__(self, d_model: int, num_classes: int, dropout: float = 0.0) -> None:
        super().__init__(d_model, check_nonneg_int("num_classes", num_classes, minimum=1) + 1, dropout)  # + the blank
        self.num_classes = self.linear.out_features - 1


def check_ctc_targets(targets: Tensor, target_lengths: Tensor, lengths: Tensor, num_classes: int) -> None:
    r"""Refuse targets CTC cannot score: classes outside 0..C-1, or an item with fewer frames than
    :math:`U + r` (its labels plus one blank between each of its :math:`r` repeated neighbours)."""
    B = targets.size(0)
    if targets.dim() != 2 or target_lengths.shape != (B,) or lengths.shape != (B,):
        raise ValueError(
            f"targets must be (B, U) with target_lengths and frame lengths (B,), got {tuple(targets.shape)}, "
            f"{tuple(target_lengths.shape)}, {tuple(lengths.shape)}"
        )
    if B and int(target_lengths.max()) > targets.size(1):
        raise ValueError(f"target_lengths {target_lengths.tolist()} exceed the targets' width U = {targets.size(1)}")
    keep = torch.arange(targets.size(1), device=targets.device) < target_lengths.view(-1, 1)  # (B, U)
    real = targets[keep]
    if real.numel() and (int(real.min()) < 0 or int(real.max()) >= num_classes):
        raise ValueError(
            f"targets must be classes 0..{num_classes - 1} (num_classes={num_classes}), got values from "
            f"{int(real.min())} to {int(real.max())}: make the head's num_classes cover the data's labels"
        )
    repeats = ((targets[:, 1:] == targets[:, :-1]) & keep[:, 1:]).sum(1)  # (B,)
    need = target_lengths.to(repeats.device) + repeats
    short = (lengths.to(need.device) < need).nonzero().flatten().tolist()
    if short:
        b = short[0]
        raise ValueError(
            f"CTC needs at least as many frames as target labels (plus one between repeated labels): item {b} "
            f"has {int(lengths[b])} frames for {int(target_lengths[b])} labels with {int(repeats[b])} repeats "
            f"({len(short)} such items); give each label more frames (a smaller hop_ms of the adapter) or use "
            "shorter targets (the DataModule's max_digits)"
        )


def nbest_labels(nbest: Sequence[Sequence[tuple[list[int], float]]]) -> list[list[int]]:
    """The best hypothesis of each item of an n-best list from :func:`ctc_prefix_beam_search`."""
    return [hyps[0][0] if hyps else [] for hyps in nbest]
