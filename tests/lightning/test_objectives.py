"""The objectives against losses and metrics computed by hand, and the task's constructor size."""

from __future__ import annotations

import inspect
import math
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from attnmm.lightning import CTC, ClassificationTask, MultiClass, MultiLabel, PerSegment
from attnmm.nn.ctc import ctc_greedy_decode


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


def _ctc_batch(seed: int = 0) -> tuple[torch.Tensor, dict[str, torch.Tensor], torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(3, 9, 5, generator=g)  # B = 3, L = 9, C = 4 and the blank
    targets = torch.tensor([[0, 3, 3], [2, -100, -100], [1, 1, -100]])
    batch = {"targets": targets, "target_lengths": torch.tensor([3, 1, 2])}
    return logits, batch, torch.tensor([9, 4, 6])  # each item's real frames


def test_ctc_is_torchs_ctc_loss_over_each_items_frames() -> None:
    logits, batch, lengths = _ctc_batch()
    objective = CTC()
    objective.setup(4, None)
    assert objective.num_logits(4) == 5
    tokens = SimpleNamespace(lengths=lengths)
    loss, scored, target = objective.loss(logits, batch, "val", tokens)
    labels = torch.tensor([[1, 4, 4], [3, 0, 0], [2, 2, 0]])  # class c is index c + 1; blank 0
    expected = F.ctc_loss(logits.log_softmax(-1).transpose(0, 1), labels, lengths, batch["target_lengths"])
    torch.testing.assert_close(loss, expected)
    by_item = [F.ctc_loss(logits[b, : lengths[b]].log_softmax(-1), labels[b, : batch["target_lengths"][b]],
                          lengths[b : b + 1], batch["target_lengths"][b : b + 1], reduction="sum")
               / batch["target_lengths"][b] for b in range(3)]
    torch.testing.assert_close(loss, torch.stack(by_item).mean())  # mean over items of the per-label loss
    # what log reads: every frame after an item's end a certain blank; labels after its length ignored
    assert ctc_greedy_decode(scored) == ctc_greedy_decode(logits, lengths) == objective.predict(logits, tokens)
    assert target.tolist() == [[0, 3, 3], [2, -100, -100], [1, 1, -100]]
    without = objective.loss(logits, batch, "val")[0]  # no tokens: every frame is real
    torch.testing.assert_close(without, F.ctc_loss(logits.log_softmax(-1).transpose(0, 1), labels,
                                                   torch.full((3,), 9), batch["target_lengths"]))


def test_ctc_logs_the_label_error_rate_and_exact_strings() -> None:
    logits, batch, lengths = _ctc_batch(1)
    objective = CTC()
    objective.setup(4, None)
    loss, scored, target = objective.loss(logits, batch, "val", SimpleNamespace(lengths=lengths))
    logs = _Logs()
    objective.log(logs, loss, scored, target, "val", hyps=[[0, 3], [2], [1, 2, 0]])  # type: ignore[arg-type]
    # one deletion, exact, a substitution and an insertion: 3 edits over 6 reference labels
    assert logs.values["val_der"].compute().item() == pytest.approx(3 / 6)
    assert logs.values["val_string_acc"].compute().item() == pytest.approx(1 / 3)
    assert logs.values["val_loss"] is loss
    logs = _Logs()
    objective.log(logs, loss, scored, target, "train")  # type: ignore[arg-type]
    assert set(logs.values) == {"train_loss"}
    assert not CTC.ensembles
    with pytest.raises(ValueError, match=r"targets must be classes 0..3 \(num_classes=4\)"):
        objective.loss(logits, {**batch, "targets": batch["targets"] + 1}, "val", SimpleNamespace(lengths=lengths))
    with pytest.raises(KeyError, match=r"CTC needs the targets \['target_lengths'\]"):
        objective.loss(logits, {"targets": batch["targets"]}, "val")


def test_a_classification_task_trains_a_ctc_head() -> None:
    from attnmm.adapters import SpeechAdapter
    from attnmm.lightning import Ensemble
    from attnmm.nn import CTCHead, Encoder

    torch.manual_seed(0)
    task = ClassificationTask(SpeechAdapter(d_model=16, channels=4, freq_mask=0, time_mask=0, dropout=0.0),
                              Encoder(16, 2, 1, 32, dropout=0.0), CTCHead(16, 10), 10, CTC())
    logs = _Logs()
    task.log = logs.log  # type: ignore[method-assign]
    batch = {**SpeechAdapter.example_batch(2), "targets": torch.tensor([[4, 2], [7, -100]]),
             "target_lengths": torch.tensor([2, 1])}
    h, tokens, _ = task.encode(batch)
    log_probs = task.head(h, tokens).log_softmax(-1).transpose(0, 1)  # (L, B, C + 1)
    expected = F.ctc_loss(log_probs, torch.tensor([[5, 3], [8, 0]]), tokens.lengths, batch["target_lengths"])
    loss = task.training_step(batch, 0)
    torch.testing.assert_close(loss, expected)
    loss.backward()
    assert task.head.linear.weight.grad.abs().sum() > 0
    task.eval()
    torch.testing.assert_close(task.validation_step(batch, 0), expected)
    assert {"val_loss", "val_der", "val_string_acc"} <= set(logs.values)
    assert task.predict_step(batch, 0) == ctc_greedy_decode(task(batch), tokens.lengths)
    with pytest.raises(ValueError, match=r"gives 10 logits per prediction.*\(11 logits for CTC\)"):
        ClassificationTask(SpeechAdapter(d_model=16), Encoder(16, 2, 1, 32), CTCHead(16, 9), 10, CTC()).training_step(
            batch, 0)
    with pytest.raises(ValueError, match="does not fit CTC"):
        Ensemble(task, 2)
