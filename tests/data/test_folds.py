"""Stratified folds and hold-outs: every item in exactly one test fold, class ratios kept, their own seed."""

from __future__ import annotations

import pytest
import torch

from attnmm.data.folds import stratified_folds, stratified_holdout

LABELS = torch.tensor([0] * 50 + [1] * 30 + [2] * 17)  # 97 items, unbalanced


def test_every_item_is_in_exactly_one_fold_with_the_class_ratios() -> None:
    fold = stratified_folds(LABELS, num_folds=10, seed=3)
    assert fold.shape == LABELS.shape and set(fold.tolist()) == set(range(10))
    sizes = torch.bincount(fold, minlength=10)
    assert int(sizes.sum()) == 97 and int(sizes.max() - sizes.min()) <= 1
    for c, count in enumerate((50, 30, 17)):
        per_fold = torch.bincount(fold[LABELS == c], minlength=10)
        assert int(per_fold.min()) >= count // 10 and int(per_fold.max()) <= -(-count // 10)


def test_folds_follow_their_seed_not_the_global_one() -> None:
    torch.manual_seed(0)
    a = stratified_folds(LABELS, seed=1)
    torch.manual_seed(123)  # seed_everything moves the global generator only
    torch.rand(10)
    assert torch.equal(a, stratified_folds(LABELS, seed=1))
    assert not torch.equal(a, stratified_folds(LABELS, seed=2))


def test_holdout_is_stratified_and_seeded() -> None:
    held = stratified_holdout(LABELS, fraction=0.1, seed=0)
    assert int(held.sum()) == 10
    assert [int(held[LABELS == c].sum()) for c in range(3)] == [5, 3, 2]
    torch.manual_seed(7)
    assert torch.equal(held, stratified_holdout(LABELS, fraction=0.1, seed=0))
    assert not torch.equal(held, stratified_holdout(LABELS, fraction=0.1, seed=1))
    assert int(stratified_holdout([0, 1, 1], fraction=0.01).sum()) == 1  # at least one held out


def test_bad_arguments_are_named() -> None:
    with pytest.raises(ValueError, match="num_folds = 10 is more than the 4 items"):
        stratified_folds([0, 1, 0, 1])
    with pytest.raises(ValueError, match="one integer class per item"):
        stratified_folds(torch.rand(20))
    with pytest.raises(ValueError, match=r"fraction must be in \(0, 1\)"):
        stratified_holdout(LABELS, fraction=1.0)
