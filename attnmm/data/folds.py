r"""Stratified k-fold cross-validation and stratified hold-out splits, seeded by their own generator.

The protocol of Errica et al. ("A Fair Comparison of Graph Neural Networks for Graph Classification",
ICLR 2020) for the TU graph classification sets: :func:`stratified_folds` assigns every graph to one of
k test folds with the class proportions of the whole set; for each fold, :func:`stratified_holdout`
holds out a stratified share of the remaining graphs for validation (model selection), and the rest
trains. Both draw from a ``torch.Generator`` seeded by their ``seed`` argument alone, so the folds do
not move with ``seed_everything`` (the training seed).
"""

from __future__ import annotations

import torch
from torch import Tensor

from attnmm._checks import check_nonneg_int

__all__ = ["stratified_folds", "stratified_holdout"]


def _labels(labels: Tensor | list[int]) -> Tensor:
    y = torch.as_tensor(labels)
    if y.dim() != 1 or y.is_floating_point() or y.is_complex():
        raise ValueError(f"labels must be one integer class per item, shape (n,), got {y.dtype} {tuple(y.shape)}")
    return y


def stratified_folds(labels: Tensor | list[int], num_folds: int = 10, seed: int = 0) -> Tensor:
    r"""The test fold (0 to ``num_folds - 1``) of every item, stratified by class.

    The items of each class are shuffled and dealt to the folds in turn, the deal going on from one
    class to the next where the last stopped, so every fold holds each class's count divided by
    ``num_folds`` (give or take one) and the folds' sizes differ by at most one.

    Args:
        labels (Tensor or list[int]): the class of each item, shape (n,).
        num_folds (int, optional): number of folds k, at least 2 and at most n. (default: :obj:`10`)
        seed (int, optional): seed of the shuffle; the same labels and seed give the same folds.
            (default: :obj:`0`)

    Returns:
        LongTensor: the fold of each item, shape (n,).

    Examples:
        >>> fold = stratified_folds([0, 0, 0, 0, 1, 1, 1, 1], num_folds=2)
        >>> [[int(c) for c in torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])[fold == k]] for k in range(2)]
        [[0, 0, 1, 1], [0, 0, 1, 1]]
    """
    y = _labels(labels)
    check_nonneg_int("num_folds", num_folds, minimum=2)
    if num_folds > y.numel():
        raise ValueError(f"num_folds = {num_folds} is more than the {y.numel()} items: every fold needs one")
    g = torch.Generator().manual_seed(seed)
    fold = torch.empty(y.numel(), dtype=torch.long)
    dealt = 0
    for c in y.unique(sorted=True):
        members = (y == c).nonzero().view(-1)
        members = members[torch.randperm(members.numel(), generator=g)]
        fold[members] = (dealt + torch.arange(members.numel())) % num_folds
        dealt += members.numel()
    return fold


def stratified_holdout(labels: Tensor | list[int], fraction: float, seed: int = 0) -> Tensor:
    r"""A mask of the items held out (e.g. for validation): ``round(fraction * n)`` of them (at least one),
    shared among the classes in proportion to their counts (largest remainders), drawn at random within
    each class.

    Args:
        labels (Tensor or list[int]): the class of each item, shape (n,).
        fraction (float): the share held out, in (0, 1).
        seed (int, optional): seed of the draw. (default: :obj:`0`)

    Returns:
        BoolTensor: True for the items held out, shape (n,).

    Examples:
        >>> held = stratified_holdout([0] * 8 + [1] * 2, fraction=0.5)
        >>> int(held.sum()), int(held[:8].sum()), int(held[8:].sum())
        (5, 4, 1)
    """
    y = _labels(labels)
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"fraction must be in (0, 1), got {fraction}")
    n = y.numel()
    if n < 2:
        raise ValueError(f"need at least 2 items to hold some out and keep some, got {n}")
    classes, counts = y.unique(sorted=True, return_counts=True)
    total = min(max(1, round(fraction * n)), n - 1)
    quota = counts.double() * total / n
    take = quota.floor().long()
    rest = total - int(take.sum())
    if rest > 0:  # the largest remainders get one more (ties: the smaller class id)
        order = torch.argsort(-(quota - take), stable=True)
        take[order[:rest]] += 1
    g = torch.Generator().manual_seed(seed)
    held = torch.zeros(n, dtype=torch.bool)
    for c, k in zip(classes.tolist(), take.tolist()):
        members = (y == c).nonzero().view(-1)
        held[members[torch.randperm(members.numel(), generator=g)[:k]]] = True
    return held
