r"""What a task optimises and reports: its loss, its metrics and how a prediction is read from the logits,
one class per kind of target (one class per item, binary labels, per segment, a label sequence by CTC)."""

from __future__ import annotations

import math
from typing import Any, Literal, cast

import lightning as L
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torchmetrics import MeanMetric, Metric
from torchmetrics.classification import MulticlassAccuracy, MultilabelAccuracy, MultilabelAveragePrecision
from torchmetrics.text import WordErrorRate

from attnmm._checks import check_nonneg_int
from attnmm.nn.ctc import BLANK, check_ctc_targets, ctc_greedy_decode

Stage = Literal["train", "val", "test"]
IGNORE_INDEX = -100
Term = tuple[float, Tensor]  # a training term beside the loss: (weight, loss)

__all__ = ["CTC", "MultiClass", "MultiLabel", "Objective", "PerSegment"]


def _scored(batch: Any, stage: Stage, *tensors: Tensor) -> tuple[Tensor, ...]:
    """The rows of ``tensors`` that the batch's ``{stage}_mask`` keeps (all of them without one)."""
    key = f"{stage}_mask"
    if not (key in batch if isinstance(batch, dict) else hasattr(batch, key)):
        return tensors
    return tuple(t[batch[key].reshape(-1)] for t in tensors)


class Objective(nn.Module):
    r"""Base of the objectives: the loss of a task's logits against ``batch[target_key]``, the metrics it
    logs and the prediction it reads from the logits.

    A :class:`~attnmm.lightning.ClassificationTask` calls :meth:`setup` once with its class count and head
    (the head gives :meth:`num_logits` logits per prediction), :meth:`loss` on every step with the logits
    and the adapter's tokens (it returns the loss and the flat logits and targets it scored),
    :meth:`extra_losses` in training (weighted terms beside the loss, e.g. auxiliary heads), :meth:`log`
    for the step's metrics, and :meth:`predict` for predictions. Each member of an
    :class:`~attnmm.lightning.Ensemble` has its own copy.

    Args:
        target_key (str, optional): the batch key of the targets. (default: :obj:`"label"`)
    """

    #: whether an :class:`~attnmm.lightning.Ensemble` can average the members' predictions
    ensembles = True

    def __init__(self, target_key: str = "label") -> None:
        super().__init__()
        self.target_key = target_key
        self.metrics = nn.ModuleDict()
        self.checked: set[tuple[str, str]] = set()  # (stage, key) whose targets were checked

    def setup(self, num_classes: int, head: nn.Module | None) -> None:  # the metrics; refuse a head it cannot read
        raise NotImplementedError

    def num_logits(self, num_classes: int) -> int:  # per prediction
        return num_classes

    def loss(self, logits: Tensor, batch: Any, stage: Stage, tokens: Any = None) -> tuple[Tensor, Tensor, Tensor]:
        raise NotImplementedError  # the loss and the flat logits and targets it scored

    def extra_losses(self, h: Tensor, tokens: Any, head: nn.Module | None, batch: Any) -> dict[str, Term]:
        return {}  # by name: (weight, loss), logged as train_{name}_loss

    def count(self, target: Tensor) -> int:  # the batch size a step's metrics are weighted by
        return target.size(0)

    def log(self, task: L.LightningModule, loss: Tensor, logits: Tensor, target: Tensor, stage: Stage) -> None:
        task.log(f"{stage}_loss", loss, on_step=stage == "train", on_epoch=True, prog_bar=True,
                 batch_size=self.count(target), sync_dist=True)

    def predict(self, logits: Tensor, tokens: Any = None) -> Any:
        raise NotImplementedError

    def _log_metric(self, task: L.LightningModule, name: str, n: int, *values: Any) -> None:
        """Update the metric ``name`` with ``values`` and log it, computed over the epoch."""
        metric = cast(Metric, self.metrics[name])
        metric.update(*values)
        task.log(name, metric, on_step=False, on_epoch=True, prog_bar=True, batch_size=n)

    def _first(self, stage: Stage, key: str) -> bool:
        """True the first time a stage's targets under ``key`` are seen (they are checked then)."""
        first = (stage, key) not in self.checked
        self.checked.add((stage, key))
        return first


class MultiClass(Objective):
    r"""One class of C per item, token or node: cross-entropy (with label smoothing :math:`\epsilon`),
    accuracy as ``{stage}_acc``, and the arg-max as the prediction.

    Targets are ``batch[target_key]``: (B,), or (B, L) / (N,) for one per token or node, where ``-100``
    marks targets to ignore; a batch's ``{stage}_mask`` (a node mask) keeps the nodes a stage scores.
    With ``aux_heads`` (keyed by the batch key of their targets, e.g. :class:`~attnmm.nn.TokenHeads`),
    each reads the encoder output like the head in training and adds ``aux_weight`` times its
    cross-entropy to the loss (multi-task learning, e.g. XPOS tags beside UPOS), logged as
    ``train_{key}_loss``; they are not used to predict.

    Args:
        label_smoothing (float, optional): :math:`\epsilon`. (default: :obj:`0.0`)
        target_key (str, optional): the batch key of the targets. (default: :obj:`"label"`)
        aux_heads (dict[str, nn.Module] or nn.ModuleDict, optional): auxiliary heads ``head(h, tokens)``.
            (default: :obj:`None`)
        aux_weight (float, optional): the weight of each auxiliary loss. (default: :obj:`0.5`)

    Examples:
        >>> import torch
        >>> objective = MultiClass()
        >>> objective.setup(3, None)
        >>> loss, _, _ = objective.loss(torch.zeros(2, 3), {"label": torch.tensor([0, 2])}, "val")
        >>> round(loss.item(), 4)  # log 3
        1.0986
    """

    def __init__(
        self,
        label_smoothing: float = 0.0,
        target_key: str = "label",
        aux_heads: nn.ModuleDict | dict[str, nn.Module] | None = None,
        aux_weight: float = 0.5,
    ) -> None:
        super().__init__(target_key)
        self.label_smoothing = float(label_smoothing)
        self.aux_heads = aux_heads if isinstance(aux_heads, nn.ModuleDict) else nn.ModuleDict(aux_heads)
        if target_key in self.aux_heads:
            raise ValueError(f"an auxiliary head is keyed by the main target {target_key!r}; key it by its own targets")
        if not (aux_weight >= 0.0 and math.isfinite(aux_weight)):
            raise ValueError(f"aux_weight must be a finite weight >= 0, got {aux_weight}")
        self.aux_weight = float(aux_weight)

    def setup(self, num_classes: int, head: nn.Module | None) -> None:
        if num_classes < 2:
            raise ValueError(f"num_classes must be an int >= 2, got {num_classes}")
        self.metrics = nn.ModuleDict({
            f"{stage}_acc": MulticlassAccuracy(num_classes, average="micro", ignore_index=IGNORE_INDEX)
            for stage in ("train", "val", "test")
        })

    def cross_entropy(self, logits: Tensor, target: Tensor, batch: Any, stage: Stage, key: str) -> tuple[Tensor, ...]:
        """Cross-entropy of ``logits`` against ``target`` (``batch[key]``), with the flat logits and targets."""
        if logits.dim() == 3 and target.dim() == 2 and target.size(1) != logits.size(1):
            raise ValueError(f"per-token targets {tuple(target.shape)} do not match logits {tuple(logits.shape)}")
        flat_logits, flat_target = logits.reshape(-1, logits.size(-1)), target.reshape(-1)
        if self._first(stage, key):
            real = flat_target[flat_target != IGNORE_INDEX]
            C = logits.size(-1)
            if real.numel() and (int(real.min()) < 0 or int(real.max()) >= C):
                what = "the task's" if key == self.target_key else f"the auxiliary head {key!r}'s"
                raise ValueError(
                    f"batch[{key!r}] holds classes {int(real.min())}..{int(real.max())} but the model predicts "
                    f"{C} ({what} num_classes): set it to the data's number of classes (the recipes link it to "
                    "data.num_classes)"
                )
        flat_logits, flat_target = _scored(batch, stage, flat_logits, flat_target)
        loss = F.cross_entropy(flat_logits.float(), flat_target, ignore_index=IGNORE_INDEX,
                               label_smoothing=self.label_smoothing)
        return loss, flat_logits, flat_target

    def loss(self, logits: Tensor, batch: Any, stage: Stage, tokens: Any = None) -> tuple[Tensor, Tensor, Tensor]:
        target = batch[self.target_key]
        if target.is_floating_point() and target.shape == logits.shape:
            raise ValueError(
                f"batch[{self.target_key!r}] holds one value per class {tuple(target.shape)}, as multi-label targets "
                "do, but the objective is MultiClass (one class id per item): set task='multilabel' (the objective "
                "MultiLabel; the recipes link it to data.task)"
            )
        return self.cross_entropy(logits, target, batch, stage, self.target_key)  # type: ignore[return-value]

    def extra_losses(self, h: Tensor, tokens: Any, head: nn.Module | None, batch: Any) -> dict[str, Term]:
        missing = [key for key in self.aux_heads if key not in batch]
        if missing:
            has = f", which has {sorted(batch)}" if isinstance(batch, dict) else ""
            raise ValueError(
                f"the auxiliary heads {missing} need their targets in the batch{has}; "
                "make the data add them (e.g. UDPOSDataModule(aux_columns=...))"
            )
        return {key: (self.aux_weight, self.cross_entropy(m(h, tokens), batch[key], batch, "train", key)[0])
                for key, m in self.aux_heads.items()}

    def count(self, target: Tensor) -> int:
        return int((target != IGNORE_INDEX).sum())

    def log(self, task: L.LightningModule, loss: Tensor, logits: Tensor, target: Tensor, stage: Stage) -> None:
        super().log(task, loss, logits, target, stage)
        self._log_metric(task, f"{stage}_acc", self.count(target), logits.detach(), target)

    def predict(self, logits: Tensor, tokens: Any = None) -> Tensor:
        return logits.argmax(-1)


class MultiLabel(Objective):
    r"""C independent binary labels per item (e.g. the 10 functions of a Peptides-func peptide).

    Targets are (B, C) of 0/1 (``NaN`` marks a label not known for that item, as in OGB's molecule sets);
    the loss is binary cross-entropy with logits, averaged over the known labels K,

    .. math::
        \mathcal{L} = -\frac{1}{|K|} \sum_{(b, c) \in K} y_{bc} \log \sigma(z_{bc})
        + (1 - y_{bc}) \log (1 - \sigma(z_{bc})),

    and besides ``{stage}_loss`` it logs ``val_ap`` and ``test_ap``, the average precision of each label
    averaged over the labels (torchmetrics' ``MultilabelAveragePrecision``, exact over the epoch; a label
    without a positive in the epoch counts as 0), the metric of LRGB's Peptides-func, and ``{stage}_acc``,
    the share of label decisions (probability > 0.5) that are right. The prediction is the 0/1 decision
    per label. An ensemble (which averages class probabilities) does not fit it.

    Args:
        target_key (str, optional): the batch key of the targets. (default: :obj:`"label"`)

    Examples:
        >>> import torch
        >>> objective = MultiLabel()
        >>> objective.setup(2, None)
        >>> batch = {"label": torch.tensor([[1.0, float("nan")]])}
        >>> round(objective.loss(torch.zeros(1, 2), batch, "val")[0].item(), 4)  # log 2, the known label only
        0.6931
    """

    ensembles = False

    def setup(self, num_classes: int, head: nn.Module | None) -> None:
        if num_classes < 1:
            raise ValueError(f"num_classes must be an int >= 1, got {num_classes}")
        self.metrics = nn.ModuleDict({
            **{f"{stage}_acc": MultilabelAccuracy(num_classes, average="micro", ignore_index=IGNORE_INDEX)
               for stage in ("train", "val", "test")},
            **{f"{stage}_ap": MultilabelAveragePrecision(num_classes, average="macro", ignore_index=IGNORE_INDEX)
               for stage in ("val", "test")},
        })

    def loss(self, logits: Tensor, batch: Any, stage: Stage, tokens: Any = None) -> tuple[Tensor, Tensor, Tensor]:
        target = batch[self.target_key]
        if target.shape != logits.shape:
            raise ValueError(
                f"task='multilabel' needs batch[{self.target_key!r}] of the logits' shape {tuple(logits.shape)} "
                f"(0/1 per label), got {tuple(target.shape)}; for one class per item use task='multiclass' "
                "(the objective MultiClass; the recipes link it to data.task)"
            )
        C = logits.size(-1)
        flat_logits, flat_target = logits.reshape(-1, C), target.reshape(-1, C).float()  # (R, C)
        if self._first(stage, self.target_key):
            known = flat_target[~torch.isnan(flat_target)]
            if ((known != 0) & (known != 1)).any():
                raise ValueError(
                    f"task='multilabel' needs 0/1 targets per label (NaN: unknown), but batch[{self.target_key!r}] "
                    f"holds {sorted(set(known.unique().tolist()))[:5]}; for class ids use task='multiclass'"
                )
        flat_logits, flat_target = _scored(batch, stage, flat_logits, flat_target)
        known = ~torch.isnan(flat_target)
        loss = F.binary_cross_entropy_with_logits(flat_logits.float()[known], flat_target[known])
        return loss, flat_logits, flat_target

    def log(self, task: L.LightningModule, loss: Tensor, logits: Tensor, target: Tensor, stage: Stage) -> None:
        n = target.size(0)
        probs = logits.detach().float().sigmoid()  # (R, C); probabilities, never read as logits
        scored = torch.where(torch.isnan(target), IGNORE_INDEX, target).long()  # (R, C)
        super().log(task, loss, logits, target, stage)
        self._log_metric(task, f"{stage}_acc", n, probs, scored)
        if stage != "train":  # updated per batch, computed over the whole epoch
            self._log_metric(task, f"{stage}_ap", n, probs, scored)

    def predict(self, logits: Tensor, tokens: Any = None) -> Tensor:
        return (logits > 0).long()


class PerSegment(MultiClass):
    r"""One class per item, and each segment of the item (each modality of a multimodal item) trained to
    predict it alone too: with a head that scores every segment (its ``segment_logits(h, tokens)``, e.g.
    :class:`~attnmm.nn.SegmentPoolingClassifier`), training minimises

    .. math::
        \mathcal{L} = \mathcal{L}_\text{fused} + \lambda \cdot \mathrm{mean}_{(b, k)\,\text{present}}\,
        \mathrm{CE}(\mathbf{z}_{b,k}, y_b),

    the segments' term logged as ``train_segment_loss``. Items marked ``gate_only`` in the batch train no
    segment's classifier. Otherwise as :class:`MultiClass`.

    Args:
        weight (float, optional): :math:`\lambda`. (default: :obj:`1.0`)
        label_smoothing (float, optional): cross-entropy label smoothing. (default: :obj:`0.0`)
        target_key (str, optional): the batch key of the targets (B,). (default: :obj:`"label"`)
    """

    def __init__(self, weight: float = 1.0, label_smoothing: float = 0.0, target_key: str = "label") -> None:
        super().__init__(label_smoothing, target_key)
        if not (weight >= 0.0 and math.isfinite(weight)):
            raise ValueError(f"segment_loss_weight must be a finite weight >= 0, got {weight}")
        self.weight = float(weight)

    def setup(self, num_classes: int, head: nn.Module | None) -> None:
        if not callable(getattr(head, "segment_logits", None)):
            raise ValueError(
                f"PerSegment(weight={self.weight}) trains each segment's own prediction, but the head "
                f"{type(head).__name__} has no segment_logits(h, tokens); use a SegmentPoolingClassifier, or MultiClass"
            )
        super().setup(num_classes, head)

    def extra_losses(self, h: Tensor, tokens: Any, head: nn.Module | None, batch: Any) -> dict[str, Term]:
        if not self.weight or head is None:
            return {}
        logits, present = head.segment_logits(h, tokens)  # type: ignore[operator]  # (B, K, C), (B, K)
        gate_only = batch.get("gate_only") if isinstance(batch, dict) else None
        if gate_only is not None:  # a gate-only item trains no segment's classifier
            present = present & ~gate_only.to(present.device).view(-1, 1)
        target = batch[self.target_key]
        if target.dim() != 1:
            raise ValueError(f"PerSegment takes one class per item, targets (B,); got {tuple(target.shape)}")
        targets = target.view(-1, 1).expand(-1, logits.size(1))  # (B, K)
        keep = present.to(logits.device) & (targets != IGNORE_INDEX)
        if not keep.any():
            return {"segment": (self.weight, logits.sum() * 0.0)}
        loss = F.cross_entropy(logits[keep].float(), targets[keep], label_smoothing=self.label_smoothing)
        return {"segment": (self.weight, loss)}


class CTC(Objective):
    r"""A label sequence per item from per-frame logits (B, L, C + 1), blank at index 0 and class c at c + 1
    (a :class:`~attnmm.nn.CTCHead`'s), by connectionist temporal classification (Graves et al., 2006):

    .. math::
        \mathcal{L} = -\frac{1}{B} \sum_b \frac{1}{U_b} \log \sum_{\pi \,:\, \mathcal{B}(\pi) = \mathbf{y}_b}
        \prod_{t \le n_b} p_t(\pi_t)

    over the :math:`n_b` real frames of item b (its tokens' ``lengths``), :math:`\mathcal{B}` the collapse
    (merge repeats, drop blanks); :func:`torch.nn.functional.ctc_loss`. Targets: ``batch[target_key]`` (B, U)
    of classes 0..C-1, ``batch[length_key]`` (B,) long, checked first (:func:`~attnmm.nn.ctc.check_ctc_targets`).
    Logged: ``{stage}_loss`` and, in validation and test, the label error rate ``{stage}_der`` (edit distance
    over the reference labels, summed over the epoch) and ``{stage}_string_acc`` (items decoded exactly) of
    the greedy decoding, the prediction, or of the hypotheses a task gives :meth:`log`. Not for an ensemble.

    Args:
        target_key (str, optional): the batch key of the targets. (default: :obj:`"targets"`)
        length_key (str, optional): the batch key of the target lengths. (default: :obj:`"target_lengths"`)

    Examples:
        >>> import torch
        >>> objective = CTC()
        >>> objective.setup(2, None)
        >>> batch = {"targets": torch.tensor([[1]]), "target_lengths": torch.tensor([1])}
        >>> round(objective.loss(torch.zeros(1, 1, 3), batch, "val")[0].item(), 4)  # one frame: log 3
        1.0986
    """

    ensembles = False

    def __init__(self, target_key: str = "targets", length_key: str = "target_lengths") -> None:
        super().__init__(target_key)
        self.length_key = length_key

    def num_logits(self, num_classes: int) -> int:
        return num_classes + 1  # and the blank

    def setup(self, num_classes: int, head: nn.Module | None) -> None:
        self.num_classes = check_nonneg_int("num_classes", num_classes, minimum=1)
        self.metrics = nn.ModuleDict({
            **{f"{stage}_der": WordErrorRate() for stage in ("val", "test")},
            **{f"{stage}_string_acc": MeanMetric() for stage in ("val", "test")},
        })

    @staticmethod
    def frame_lengths(logits: Tensor, tokens: Any = None) -> Tensor:
        """The real frames of each item (B,): the tokens' ``lengths``, else all L."""
        lengths = getattr(tokens, "lengths", None)
        return torch.full(logits.shape[:1], logits.size(1), device=logits.device) if lengths is None else lengths

    def loss(self, logits: Tensor, batch: Any, stage: Stage, tokens: Any = None) -> tuple[Tensor, Tensor, Tensor]:
        missing = [key for key in (self.target_key, self.length_key) if key not in batch]
        if missing:
            raise KeyError(
                f"CTC needs the targets {missing} in the batch, which has {sorted(batch)}; set target_key/"
                "length_key or use a DataModule that adds them (e.g. FSDDStringsDataModule)"
            )
        targets, target_lengths = batch[self.target_key], batch[self.length_key]
        lengths = self.frame_lengths(logits, tokens)
        check_ctc_targets(targets, target_lengths, lengths, self.num_classes)
        log_probs = logits.float().log_softmax(-1)  # (B, L, C + 1)
        labels = (targets.clamp(min=-1) + 1).clamp(min=0)  # class c -> c + 1; padding -> 0, never read
        loss = F.ctc_loss(log_probs.transpose(0, 1), labels, lengths, target_lengths, blank=BLANK, reduction="mean")
        # what log reads: each item's frames (a certain blank after its end) and its labels (then IGNORE_INDEX)
        frames = torch.arange(logits.size(1), device=logits.device) < lengths.to(logits.device).view(-1, 1)
        scored = log_probs.detach().masked_fill(~frames.unsqueeze(-1), -math.inf)
        scored[..., BLANK] = scored[..., BLANK].masked_fill(~frames, 0.0)
        keep = torch.arange(targets.size(1), device=targets.device) < target_lengths.to(targets.device).view(-1, 1)
        return loss, scored, targets.masked_fill(~keep, IGNORE_INDEX)

    def log(self, task: L.LightningModule, loss: Tensor, logits: Tensor, target: Tensor, stage: Stage,
            hyps: list[list[int]] | None = None) -> None:
        """Log the loss and, but in training, the error rates of ``hyps`` (default: the greedy decoding)."""
        super().log(task, loss, logits, target, stage)
        if stage == "train":
            return
        hyps = ctc_greedy_decode(logits) if hyps is None else hyps
        refs = [[y for y in row if y != IGNORE_INDEX] for row in target.tolist()]
        texts = [[" ".join(map(str, y)) for y in ys] for ys in (hyps, refs)]  # what WordErrorRate reads
        self._log_metric(task, f"{stage}_der", len(refs), *texts)
        exact = torch.tensor([float(y == r) for y, r in zip(hyps, refs, strict=True)])
        self._log_metric(task, f"{stage}_string_acc", len(refs), exact)

    def predict(self, logits: Tensor, tokens: Any = None) -> list[list[int]]:
        return ctc_greedy_decode(logits, self.frame_lengths(logits, tokens))
