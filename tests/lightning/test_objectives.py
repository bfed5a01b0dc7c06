"""The objectives against losses and metrics computed by hand, and the task's constructor size."""

from __future__ import annotations

import inspect
import math

import pytest
import torch
from torch import nn

from attnmm.lightning import ClassificationTask, MultiClass, MultiLabel, PerSegment


class _Logs:
    """A stand-in for a LightningModule's ``log``: the values logged, by name."""

    def __init__(self) -> None:
        self.values: dict[str, object] = {}

    def log(self, name: str, value: object, **kwargs: object) -> None:
        self.values[name] = value


def _nll(row: list[float], target: int) -> float:
    """-log softmax(row)[target], written out."""
    return math.log(sum(math.exp(z) for z in row)) - row[target]


def test_multiclass_is_cross_entropy_with_smoothing_ignore_and_accuracy() -> None:
    rows, targets = [[2.0, 0.0, 0.0], [0.0, 1.0, 0.0], [5.0, 1.0, 2.0]], [0, 2, -100]
    objective = MultiClass(label_smoothing=0.1)
    objective.setup(3, None)
    loss, flat_logits, flat_target = objective.loss(torch.tensor(rows), {"label": torch.tensor(targets)}, "val")
    # (1 - eps) * nll(target) + eps * mean over classes of nll(c), over the two targets not ignored
    by_hand = [0.9 * _nll(r, t) + 0.1 * sum(_nll(r, c) for c in range(3)) / 3 for r, t in zip(rows[:2], targets)]
    assert loss.item() == pytest.approx(sum(by_hand) / 2, rel=1e-6)
    logs = _Logs()
    objective.log(logs, loss, flat_logits, flat_target, "val")  # type: ignore[arg-type]
    assert logs.values["val_acc"].compute().item() == pytest.approx(0.5)  # right on the first, not the second
    assert objective.count(flat_target) == 2
    assert objective.predict(torch.tensor(rows)).tolist() == [0, 1, 0]


def test_multiclass_scores_only_the_stage_mask() -> None:
    objective = MultiClass()
    objective.setup(2, None)
    batch = {"label": torch.tensor([0, 1, 1]), "train_mask": torch.tensor([True, False, True])}
    rows = [[1.0, 0.0], [0.0, 3.0], [2.0, 0.0]]
    loss, _, kept = objective.loss(torch.tensor(rows), batch, "train")
    assert kept.tolist() == [0, 1]
    assert loss.item() == pytest.approx((_nll(rows[0], 0) + _nll(rows[2], 1)) / 2, rel=1e-6)


def test_auxiliary_heads_are_weighted_terms_beside_the_loss() -> None:
    head = nn.Linear(2, 3, bias=False)
    with torch.no_grad():
        head.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]))
    objective = MultiClass(aux_heads={"pos": _Apply(head)}, aux_weight=0.3)
    h = torch.tensor([[1.0, 2.0], [0.0, -1.0]])  # aux logits: [1, 2, 3] and [0, -1, -1]
    terms = objective.extra_losses(h, None, None, {"pos": torch.tensor([2, 0])})
    weight, value = terms["pos"]
    assert weight == 0.3
    assert value.item() == pytest.approx((_nll([1.0, 2.0, 3.0], 2) + _nll([0.0, -1.0, -1.0], 0)) / 2, rel=1e-6)


class _Apply(nn.Module):
    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.linear = linear

    def forward(self, h: torch.Tensor, tokens: object) -> torch.Tensor:
        return self.linear(h)


def test_multilabel_is_binary_cross_entropy_over_known_labels_and_decides_at_zero() -> None:
    objective = MultiLabel()
    objective.setup(2, None)
    logits = torch.tensor([[1.0, 2.0], [-1.0, -3.0]])
    target = torch.tensor([[1.0, 0.0], [float("nan"), 1.0]])
    loss, _, _ = objective.loss(logits, {"label": target}, "val")
    # the known labels: -log sigma(1) (y=1), -log(1 - sigma(2)) (y=0), -log sigma(-3) (y=1)
    by_hand = (math.log(1 + math.exp(-1.0)) + math.log(1 + math.exp(2.0)) + math.log(1 + math.exp(3.0))) / 3
    assert loss.item() == pytest.approx(by_hand, rel=1e-6)
    assert objective.predict(logits).tolist() == [[1, 1], [0, 0]]
    logs = _Logs()
    objective.log(logs, loss, logits, target, "val")  # type: ignore[arg-type]
    assert logs.values["val_acc"].compute().item() == pytest.approx(1 / 3)  # one of the three known decisions
    assert not MultiLabel.ensembles


class _SegmentHead(nn.Module):
    """A head with fixed per-segment logits (B=2, K=2, C=2): the second item lacks its second segment."""

    def segment_logits(self, h: torch.Tensor, tokens: object) -> tuple[torch.Tensor, torch.Tensor]:
        logits = torch.tensor([[[2.0, 0.0], [0.0, 1.0]], [[1.0, 1.0], [9.0, 9.0]]])
        return logits, torch.tensor([[True, True], [True, False]])


def test_per_segment_adds_each_present_segments_cross_entropy() -> None:
    objective = PerSegment(weight=0.7)
    objective.setup(2, _SegmentHead())
    terms = objective.extra_losses(torch.zeros(2, 1), None, _SegmentHead(), {"label": torch.tensor([0, 1])})
    weight, value = terms["segment"]
    by_hand = (_nll([2.0, 0.0], 0) + _nll([0.0, 1.0], 0) + _nll([1.0, 1.0], 1)) / 3
    assert weight == 0.7 and value.item() == pytest.approx(by_hand, rel=1e-6)
    gated = objective.extra_losses(torch.zeros(2, 1), None, _SegmentHead(),
                                   {"label": torch.tensor([0, 1]), "gate_only": torch.tensor([False, True])})
    assert gated["segment"][1].item() == pytest.approx((_nll([2.0, 0.0], 0) + _nll([0.0, 1.0], 0)) / 2, rel=1e-6)
    with pytest.raises(ValueError, match="has no segment_logits"):
        PerSegment().setup(2, nn.Linear(2, 2))


def test_the_task_takes_at_most_eight_constructor_arguments() -> None:
    parameters = list(inspect.signature(ClassificationTask.__init__).parameters)[1:]
    assert len(parameters) <= 8, parameters
    assert parameters[:4] == ["adapter", "encoder", "head", "num_classes"] and "lr" in parameters
