r"""The task LightningModule shared by every recipe: adapter -> encoder -> head, one shared step."""

from __future__ import annotations

import inspect
import math
import warnings
from typing import Any, Literal, cast

import lightning as L
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torchmetrics import Metric
from torchmetrics.classification import MulticlassAccuracy, MultilabelAccuracy, MultilabelAveragePrecision

from attnmm._checks import check_nonneg_int
from attnmm.adapters.base import Adapter, Tokens
from attnmm.lightning.schedule import WarmupCosine
from attnmm.nn.ensemble import Ensemble
from attnmm.nn.state import IncrementalState

Stage = Literal["train", "val", "test"]
Task = Literal["multiclass", "multilabel"]
IGNORE_INDEX = -100


class EncoderTask(L.LightningModule):
    r"""Base of the task modules: an adapter and an encoder, :math:`\mathbf{H} = \mathrm{encoder}(\mathbf{X};
    A)` with :math:`(\mathbf{X}, A) = \mathrm{adapter}(\text{batch})`, and what every task shares.

    Shared: the optimiser (AdamW, or Adam with an L2 penalty; no weight decay on biases and norms; fused
    where torch has the kernel) with linear warm-up and cosine decay over the run
    (:meth:`configure_optimizers`); the training, validation and test steps, which all call a
    subclass's ``_shared_step(batch, stage)``; and :meth:`_save_config`, which keeps the constructor's
    configs as hyperparameters (so ``load_from_checkpoint`` rebuilds a LightningCLI model). A subclass
    sets ``adapter`` and ``encoder``, calls ``_save_config()`` first in its ``__init__`` and implements
    ``_shared_step``: :class:`ClassificationTask` (one label per item, token or node) and
    :class:`~attnmm.lightning.SequenceTask` (label sequences, CTC and attention decoding).

    Starting from a trained model: with ``init_from``, ``fit`` begins by loading the adapter and encoder
    weights of a compatible model (a checkpoint, a backbone file, or the name of a backbone shipped in
    ``attnmm/pretrained/``; see :mod:`attnmm.lightning.pretrained`), before a resumed run restores its
    own checkpoint over them; the head (or heads) keep their fresh initialisation, so the new task may
    have other classes. A model built differently is refused with the mismatching entries named. With
    ``freeze_encoder_epochs`` = N, the adapter and encoder are frozen (no gradient, no update, no weight
    decay) for the first N epochs, so the new head learns on the loaded features before they change.
    With ``init_into``, the backbone goes into that part of the model instead (its dotted path, a module
    with ``adapter`` and ``encoder`` parts such as an :class:`~attnmm.adapters.EncodedAdapter`: one
    modality's tower of a multimodal model, e.g. ``"adapter.adapters.audio"``), and that part is what
    ``freeze_encoder_epochs`` freezes.

    Args:
        lr (float, optional): peak learning rate. (default: :obj:`1e-3`)
        weight_decay (float, optional): AdamW weight decay, or Adam's L2 penalty. (default: :obj:`0.01`)
        warmup_fraction (float, optional): share of the steps spent warming up. (default: :obj:`0.05`)
        min_lr_ratio (float, optional): final learning rate as a share of ``lr``. (default: :obj:`0.0`)
        optimizer (str, optional): ``"adamw"`` or ``"adam"``. (default: :obj:`"adamw"`)
        init_from (str, optional): the checkpoint or backbone file (or shipped name) whose adapter and
            encoder weights ``fit`` starts from. (default: :obj:`None`, a fresh initialisation)
        freeze_encoder_epochs (int, optional): epochs at the start of training during which the adapter
            and encoder are frozen; needs ``init_from``. (default: :obj:`0`)
        init_into (str, optional): the dotted path of the part that receives the backbone.
            (default: :obj:`None`, the task's own adapter and encoder)
    """

    adapter: Adapter
    encoder: nn.Module

    def __init__(
        self,
        lr: float = 1e-3,
        weight_decay: float = 0.01,
        warmup_fraction: float = 0.05,
        min_lr_ratio: float = 0.0,
        optimizer: Literal["adamw", "adam"] = "adamw",
        init_from: str | None = None,
        freeze_encoder_epochs: int = 0,
        init_into: str | None = None,
    ) -> None:
        super().__init__()
        if not 0.0 <= warmup_fraction < 1.0:
            raise ValueError(f"warmup_fraction must be in [0, 1), got {warmup_fraction}")
        self.lr, self.weight_decay = lr, weight_decay
        self.warmup_fraction, self.min_lr_ratio = warmup_fraction, min_lr_ratio
        if optimizer not in ("adamw", "adam"):
            raise ValueError(f"optimizer must be 'adamw' or 'adam', got {optimizer!r}")
        self.optimizer_name = optimizer
        self.freeze_encoder_epochs = check_nonneg_int("freeze_encoder_epochs", freeze_encoder_epochs)
        if self.freeze_encoder_epochs and init_from is None:
            raise ValueError(
                f"freeze_encoder_epochs={freeze_encoder_epochs} freezes loaded weights, but init_from is None: give "
                "init_from (a checkpoint to start from), or set freeze_encoder_epochs=0"
            )
        self.init_from = None if init_from is None else str(init_from)
        if init_into is not None and init_from is None:
            raise ValueError(f"init_into={init_into!r} names where a backbone goes, but init_from is None: give both")
        self.init_into = init_into
        self._backbone_loaded = False

    def _save_config(self) -> None:
        """Save the constructor arguments as hyperparameters, keeping only configs, never modules.

        Under LightningCLI the injected parts arrive as ``class_path`` configs, so
        ``load_from_checkpoint(path)`` rebuilds them; built in Python they are modules, which the
        state dict already holds: pass them again to ``load_from_checkpoint``.
        """
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*is an instance of `nn.Module`")
            self.save_hyperparameters(logger=False, frame=inspect.currentframe().f_back)  # type: ignore[union-attr]
        for store in (self._hparams, self._hparams_initial):
            for key in [k for k, v in store.items() if isinstance(v, nn.Module)]:
                del store[key]

    @staticmethod
    def _run_encoder(
        adapter: Adapter, encoder: nn.Module, batch: Any, return_weights: bool = False,
        state: IncrementalState | None = None,
    ) -> tuple[Tensor, Tokens, Any]:
        """``(h, tokens, weights)`` of ``encoder(adapter(batch))``; ``weights`` is ``None`` unless asked.

        Every encoder takes the one call ``encoder(x, mask, *, tokens, state, return_weights)`` and
        refuses by name the options it cannot honour."""
        tokens = adapter(batch)
        result = encoder(tokens.x, tokens.mask, tokens=tokens, state=state, return_weights=return_weights)
        if return_weights:
            h, weights = result
            return h, tokens, weights
        return result, tokens, None

    def encode(self, batch: Any, return_weights: bool = False) -> tuple[Tensor, Tokens, Any]:
        """Encoder output h, the adapter's tokens and (optionally) the attention weights per layer."""
        return self._run_encoder(self.adapter, self.encoder, batch, return_weights)

    def _shared_step(self, batch: Any, stage: Stage) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__} must implement _shared_step(batch, stage)")

    def training_step(self, batch: Any, batch_idx: int) -> Tensor:
        return self._shared_step(batch, "train")

    def validation_step(self, batch: Any, batch_idx: int) -> Tensor:
        return self._shared_step(batch, "val")

    def test_step(self, batch: Any, batch_idx: int) -> Tensor:
        return self._shared_step(batch, "test")

    def configure_optimizers(self) -> Any:
        decay: list[nn.Parameter] = []
        no_decay: list[nn.Parameter] = []
        for name, p in self.named_parameters():
            if p.requires_grad:
                (no_decay if p.dim() < 2 or "norm" in name else decay).append(p)
        params = decay + no_decay
        # the fused kernels (one pass over all parameters) where torch has them: float on CPU or CUDA;
        # not under fp16 loss scaling with gradient clipping (a fused step unscales inside, Lightning refuses)
        fused = bool(params) and all(p.is_floating_point() and p.device.type in ("cpu", "cuda") for p in params)
        if self.trainer.gradient_clip_val and str(self.trainer.precision).startswith("16"):
            fused = False
        optimizer = (torch.optim.AdamW if self.optimizer_name == "adamw" else torch.optim.Adam)(
            [{"params": decay, "weight_decay": self.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
            lr=self.lr,
            fused=fused or None,
        )
        # the run's length is set in on_train_start, after a resumed run has restored its checkpoint
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, WarmupCosine(self.warmup_fraction, self.min_lr_ratio))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    def setup(self, stage: str) -> None:
        if stage == "fit" and self.init_from is not None and not self._backbone_loaded:
            self.load_backbone(self.init_from)

    def load_backbone(self, source: str) -> list[str]:
        """Load the adapter and encoder weights of ``source`` (see :func:`~attnmm.lightning.pretrained.load_backbone`),
        as ``fit`` does with ``init_from``; returns the names loaded."""
        from attnmm.lightning.pretrained import load_backbone

        names = load_backbone(self._backbone_target(), source)
        self._backbone_loaded = True
        return names

    def _backbone_target(self) -> nn.Module:
        """The module whose ``adapter`` and ``encoder`` take the backbone: the task, or its part ``init_into``."""
        if self.init_into is None:
            return self
        try:
            return self.get_submodule(self.init_into)
        except AttributeError as err:
            raise ValueError(
                f"init_into={self.init_into!r} is not a part of the model ({err}); give the dotted path of a module "
                "with adapter and encoder parts, e.g. 'adapter.adapters.audio' for an EncodedAdapter named audio"
            ) from err

    def on_train_epoch_start(self) -> None:
        if self.freeze_encoder_epochs:
            frozen = self.current_epoch < self.freeze_encoder_epochs
            target = self._backbone_target()
            for part in (target.adapter, target.encoder):
                cast(nn.Module, part).requires_grad_(not frozen)

    def on_train_start(self) -> None:
        # Counting the steps sets up the training data; done here (not in configure_optimizers, which runs
        # before a resumed run's restore), the training loader gets its mid-epoch state back on resume.
        total = self.trainer.estimated_stepping_batches
        for config in self.trainer.lr_scheduler_configs:
            scheduler = config.scheduler
            for i, schedule in enumerate(getattr(scheduler, "lr_lambdas", ())):
                if isinstance(schedule, WarmupCosine):
                    schedule.start(int(total))
                    group = scheduler.optimizer.param_groups[i]
                    group["lr"] = scheduler.base_lrs[i] * schedule(scheduler.last_epoch)


class ClassificationTask(EncoderTask):
    r"""Classification with a masked-attention encoder between an adapter and a head.

    .. math::
        \hat{y} = \mathrm{head}(\mathrm{encoder}(\mathbf{X}; A)), \quad
        (\mathbf{X}, A) = \mathrm{adapter}(\text{batch})

    The adapter, encoder and head are injected (LightningCLI picks them by ``class_path``), so one
    task serves speech, image, text and graph recipes. Targets are ``batch[target_key]``: (B,) for
    one label per item, (B, L) or (N,) for one per token or node, where ``-100`` marks tokens to
    ignore. Loss: cross-entropy; metric: accuracy (torchmetrics), both logged as ``{stage}_loss`` and
    ``{stage}_acc``. Optimiser: AdamW (or Adam with an L2 penalty), fused where torch has the kernel,
    with linear warm-up and cosine decay over the run.

    With ``task="multilabel"`` each item (graph, node) has ``num_classes`` independent binary labels
    (e.g. the 10 functions of a Peptides-func peptide): targets are (B, C) of 0/1 (``NaN`` marks a
    label not known for that item, as in OGB's molecule sets), the loss is binary cross-entropy with
    logits, averaged over the known labels,

    .. math::
        \mathcal{L} = -\frac{1}{|K|} \sum_{(b, c) \in K} y_{bc} \log \sigma(z_{bc})
        + (1 - y_{bc}) \log (1 - \sigma(z_{bc})),

    and besides ``{stage}_loss`` it logs ``val_ap`` and ``test_ap``, the average precision of each
    label averaged over the labels (torchmetrics' ``MultilabelAveragePrecision``, exact, over the whole
    epoch: the predictions of every batch are kept and the metric is computed at the epoch's end; a
    label without a positive in the epoch counts as 0), the metric of LRGB's Peptides-func, and
    ``{stage}_acc``, the share of label decisions (probability > 0.5) that are right. Predictions
    (:meth:`predict_step`) are then the 0/1 decisions per label. The recipes link ``task`` to the
    DataModule's ``task``, so it follows the data.

    With an injected :class:`~attnmm.nn.Ensemble` of size n, the task holds n independently
    initialised copies of the adapter, encoder and head (``members``; the first is
    ``adapter``/``encoder``/``head``). They train side by side on the same batches, each on its own
    loss (the mean of their losses is minimised), and predict together: the logits are the log of the
    members' mean probabilities (:meth:`Ensemble.combine <attnmm.nn.Ensemble.combine>`), on which the
    validation and test losses and accuracies are computed.

    Args:
        adapter (Adapter): raw batch -> :class:`~attnmm.adapters.Tokens`.
        encoder (nn.Module): ``encoder(x, mask, *, tokens, state, return_weights) -> h``, the call
            every encoder takes, e.g. :class:`~attnmm.nn.Encoder`; ``tokens`` is the adapter's
            :class:`~attnmm.adapters.Tokens` (e.g. :class:`~attnmm.nn.GPSEncoder` reads the edges).
        head (nn.Module, optional): ``head(h, tokens) -> logits``; ``None`` when the encoder's output
            already is the logits (e.g. a GAT whose last layer has one output per class).
        num_classes (int): number of classes C.
        lr (float, optional): peak learning rate. (default: :obj:`1e-3`)
        weight_decay (float, optional): AdamW weight decay, or Adam's L2 penalty. (default: :obj:`0.01`)
        warmup_fraction (float, optional): share of the steps spent warming up. (default: :obj:`0.05`)
        min_lr_ratio (float, optional): final learning rate as a share of ``lr``. (default: :obj:`0.0`)
        label_smoothing (float, optional): cross-entropy label smoothing. (default: :obj:`0.0`)
        target_key (str, optional): key of the targets in the batch. (default: :obj:`"label"`)
        optimizer (str, optional): ``"adamw"`` (decoupled weight decay) or ``"adam"`` (weight decay as
            an L2 penalty in the gradient, as GAT trains on Cora). (default: :obj:`"adamw"`)
        ensemble (Ensemble, optional): train and predict with an ensemble of independently
            initialised copies of the model, e.g. ``Ensemble(2)``; ``None`` for one model.
            (default: :obj:`None`)
        aux_heads (dict[str, nn.Module] or nn.ModuleDict, optional): auxiliary heads, keyed by the
            batch key of their targets (e.g. :class:`~attnmm.nn.TokenHeads`): in training each reads
            the encoder output like ``head`` and adds ``aux_weight`` times its cross-entropy to the
            loss (multi-task learning, e.g. XPOS tags beside UPOS); each is logged as
            ``train_{key}_loss``, and ``train_loss`` is the total minimised. They are not used to
            predict, and every ensemble member has its own. (default: :obj:`None`)
        aux_weight (float, optional): weight of each auxiliary loss. (default: :obj:`0.5`)
        task (str, optional): ``"multiclass"`` (one class of ``num_classes`` per item, cross-entropy)
            or ``"multilabel"`` (``num_classes`` binary labels per item, binary cross-entropy; no
            ``label_smoothing`` or ``ensemble``). (default: :obj:`"multiclass"`)
        init_from (str, optional): a checkpoint, backbone file or shipped backbone name whose adapter
            and encoder weights ``fit`` starts from, with this task's own (new) head, e.g. a model of
            other classes (see :class:`EncoderTask`). (default: :obj:`None`)
        freeze_encoder_epochs (int, optional): epochs during which the loaded adapter and encoder are
            frozen, at the start of training. (default: :obj:`0`)
        init_into (str, optional): the dotted path of the part that receives the ``init_from``
            backbone, e.g. ``"adapter.adapters.audio"`` (see :class:`EncoderTask`). (default: :obj:`None`)
        segment_loss_weight (float, optional): with a head that predicts per segment (its
            ``segment_logits(h, tokens)``, e.g. :class:`~attnmm.nn.SegmentPoolingClassifier`), the weight
            :math:`\lambda` of the segments' own losses in training: each segment an item has (each
            modality of a multimodal item) adds its cross-entropy, averaged over the present segments,
            :math:`\mathcal{L} = \mathcal{L}_\text{fused} + \lambda \cdot \mathrm{mean}_{(b, k)\,
            \text{present}}\, \mathrm{CE}(\mathbf{z}_{b,k}, y_b)`, logged as ``train_segment_loss``.
            Each modality so learns to predict alone, not only through the fused prediction.
            (default: :obj:`0.0`, none)

    Examples:
        >>> import torch
        >>> from attnmm.adapters import SpeechAdapter
        >>> from attnmm.nn import Encoder
        >>> from attnmm.lightning import ClassificationTask
        >>> from attnmm.nn import PoolingClassifier
        >>> task = ClassificationTask(SpeechAdapter(d_model=32), Encoder(32, 4, 1, 64), PoolingClassifier(32, 10), 10)
        >>> task(SpeechAdapter.example_batch(2)).shape
        torch.Size([2, 10])

        Multi-label graph classification (three binary labels per graph):

        >>> from attnmm.adapters import GraphAdapter
        >>> from attnmm.nn import GPSEncoder
        >>> task = ClassificationTask(GraphAdapter(16, 32), GPSEncoder(32), PoolingClassifier(32, 3), 3,
        ...                           target_key="y", task="multilabel")
        >>> batch = GraphAdapter.example_batch(2)
        >>> batch.y = torch.tensor([[1.0, 0.0, 1.0], [0.0, 0.0, 1.0]])  # (B, C): 0/1 per label
        >>> task(batch).shape, task.predict_step(batch, 0).shape
        (torch.Size([2, 3]), torch.Size([2, 3]))
    """

    def __init__(
        self,
        adapter: Adapter,
        encoder: nn.Module,
        head: nn.Module | None,
        num_classes: int,
        lr: float = 1e-3,
        weight_decay: float = 0.01,
        warmup_fraction: float = 0.05,
        min_lr_ratio: float = 0.0,
        label_smoothing: float = 0.0,
        target_key: str = "label",
        optimizer: Literal["adamw", "adam"] = "adamw",
        ensemble: Ensemble | None = None,
        aux_heads: nn.ModuleDict | dict[str, nn.Module] | None = None,
        aux_weight: float = 0.5,
        task: Task = "multiclass",
        init_from: str | None = None,
        freeze_encoder_epochs: int = 0,
        init_into: str | None = None,
        segment_loss_weight: float = 0.0,
    ) -> None:
        super().__init__(
            lr, weight_decay, warmup_fraction, min_lr_ratio, optimizer, init_from, freeze_encoder_epochs, init_into
        )
        self._save_config()
        self.adapter = adapter
        self.encoder = encoder
        self.head = head
        self.aux_heads = aux_heads if isinstance(aux_heads, nn.ModuleDict) else nn.ModuleDict(aux_heads)
        if target_key in self.aux_heads:
            raise ValueError(f"an auxiliary head is keyed by the main target {target_key!r}; key it by its own targets")
        if not (aux_weight >= 0.0 and math.isfinite(aux_weight)):
            raise ValueError(f"aux_weight must be a finite weight >= 0, got {aux_weight}")
        self.aux_weight = float(aux_weight)
        if not (segment_loss_weight >= 0.0 and math.isfinite(segment_loss_weight)):
            raise ValueError(f"segment_loss_weight must be a finite weight >= 0, got {segment_loss_weight}")
        if segment_loss_weight and not callable(getattr(head, "segment_logits", None)):
            raise ValueError(
                f"segment_loss_weight={segment_loss_weight} trains each segment's own prediction, but the head "
                f"{type(head).__name__} has no segment_logits(h, tokens); use a SegmentPoolingClassifier, or set 0"
            )
        if segment_loss_weight and task == "multilabel":
            raise ValueError("segment_loss_weight takes one class per item (task='multiclass')")
        self.segment_loss_weight = float(segment_loss_weight)
        if task not in ("multiclass", "multilabel"):
            raise ValueError(f"task must be 'multiclass' or 'multilabel', got {task!r}")
        if task == "multilabel" and ensemble is not None:
            raise ValueError(
                "an Ensemble averages the members' class probabilities (softmax over classes), which does not fit "
                "task='multilabel'; train one model (ensemble=None)"
            )
        if task == "multilabel" and label_smoothing:
            raise ValueError(
                f"label_smoothing smooths cross-entropy over classes (task='multiclass'); task='multilabel' takes "
                f"binary cross-entropy without it: set label_smoothing=0.0, got {label_smoothing}"
            )
        self.task = task
        if ensemble is not None and init_from is not None:
            raise ValueError(
                "init_from loads one backbone, but an Ensemble's members are independently initialised copies: "
                "train one model from the checkpoint (ensemble=None), or an ensemble without init_from"
            )
        self.ensemble = ensemble
        if ensemble is not None:  # the other members: fresh copies of these parts
            parts: dict[str, nn.Module | None] = {"adapter": adapter, "encoder": encoder, "head": head}
            if self.aux_heads:
                parts["aux_heads"] = self.aux_heads
            ensemble.build(parts)
        self.num_classes = check_nonneg_int("num_classes", num_classes, minimum=2 if task == "multiclass" else 1)
        self.label_smoothing, self.target_key = label_smoothing, target_key
        if task == "multiclass":
            self.accuracy = nn.ModuleDict(
                {
                    f"{stage}_acc": MulticlassAccuracy(num_classes, average="micro", ignore_index=IGNORE_INDEX)
                    for stage in ("train", "val", "test")
                }
            )
        else:
            self.accuracy = nn.ModuleDict(
                {
                    f"{stage}_acc": MultilabelAccuracy(num_classes, average="micro", ignore_index=IGNORE_INDEX)
                    for stage in ("train", "val", "test")
                }
            )
            self.average_precision = nn.ModuleDict(
                {
                    f"{stage}_ap": MultilabelAveragePrecision(num_classes, average="macro", ignore_index=IGNORE_INDEX)
                    for stage in ("val", "test")
                }
            )

    @property
    def members(self) -> list[tuple[Adapter, nn.Module, nn.Module | None]]:
        """The ``(adapter, encoder, head)`` of every ensemble member, the task's own first."""
        members: list[tuple[Adapter, nn.Module, nn.Module | None]] = [(self.adapter, self.encoder, self.head)]
        for m in self.ensemble.members if self.ensemble is not None else []:
            parts = cast(nn.ModuleDict, m)
            members.append((cast(Adapter, parts["adapter"]), parts["encoder"], parts["head"]))
        return members

    def encode(
        self, batch: Any, return_weights: bool = False, member: int = 0, state: IncrementalState | None = None
    ) -> tuple[Tensor, Tokens, Any]:
        """Encoder output h, the adapter's tokens and (optionally) the attention weights per layer
        (of ensemble member ``member``); with ``state``, read incrementally (see :meth:`forward`)."""
        adapter, encoder, _ = self.members[member]
        return self._run_encoder(adapter, encoder, batch, return_weights, state)

    def member_logits(self, batch: Any, member: int = 0, state: IncrementalState | None = None) -> Tensor:
        """The logits of one ensemble member."""
        return self._member_outputs(batch, member, state=state)[0]

    def _member_aux_heads(self, member: int) -> nn.ModuleDict:
        if member == 0 or not self.aux_heads or self.ensemble is None:
            return self.aux_heads
        return cast(nn.ModuleDict, cast(nn.ModuleDict, self.ensemble.members[member - 1])["aux_heads"])

    def _member_outputs(
        self, batch: Any, member: int, aux: bool = False, state: IncrementalState | None = None
    ) -> tuple[Tensor, dict[str, Tensor], tuple[Tensor, Tensor] | None]:
        """One member's logits and, with ``aux``, its auxiliary heads' logits by target key and (with a
        ``segment_loss_weight``) its segments' own logits (B, K, C) and which are present (B, K)."""
        h, tokens, _ = self.encode(batch, member=member, state=state)
        head = self.members[member][2]
        gate_only = batch.get("gate_only") if isinstance(batch, dict) else None
        if head is None:
            logits = h
        elif gate_only is not None:  # pairs that train a gated head's gate alone (AVDigitsDataModule(gate_voices))
            if "gate_only" not in inspect.signature(head.forward).parameters:
                raise ValueError(
                    "the batch marks items gate_only (they train a gate alone), but the head, a "
                    f"{type(head).__name__}, takes no gate_only: use a gated SegmentPoolingClassifier, or data "
                    "without gate voices"
                )
            logits = head(h, tokens, gate_only=gate_only)
        else:
            logits = head(h, tokens)
        segments = head.segment_logits(h, tokens) if aux and self.segment_loss_weight and head is not None else None
        if segments is not None and gate_only is not None:  # a gate-only item trains no segment's classifier
            segments = (segments[0], segments[1] & ~gate_only.to(segments[1].device).view(-1, 1))
        if logits.size(-1) != self.num_classes:
            raise ValueError(
                f"the model gives {logits.size(-1)} logits per prediction but the task has num_classes="
                f"{self.num_classes}: make the head's num_classes (or the encoder's output width) and the "
                "task's num_classes the same, the number of classes in the data"
            )
        aux_logits = {key: m(h, tokens) for key, m in self._member_aux_heads(member).items()} if aux else {}
        return logits, aux_logits, segments

    def forward(self, batch: Any, state: IncrementalState | None = None) -> Tensor:
        """The logits; for an ensemble, the log of the members' mean probabilities.

        With ``state`` (an :class:`~attnmm.nn.IncrementalState`), a causal model reads its
        tokens incrementally: the batch holds only the tokens after those already read (and
        ``offset``, their first position), and the encoder's caches carry the rest (see
        :func:`~attnmm.lightning.generate`)."""
        if self.ensemble is None:
            return self.member_logits(batch, state=state)
        return Ensemble.combine([self.member_logits(batch, i, state) for i in range(self.ensemble.size)])

    def _shared_step(self, batch: Any, stage: Stage) -> Tensor:
        target = batch[self.target_key]
        member_losses: list[Tensor] = []
        aux_losses: dict[str, list[Tensor]] = {}
        segment_losses: list[Tensor] = []
        if stage == "train" and (self.ensemble is not None or self.aux_heads or self.segment_loss_weight):
            missing = [key for key in self.aux_heads if key not in batch]
            if missing:
                has = f", which has {sorted(batch)}" if isinstance(batch, dict) else ""
                raise ValueError(
                    f"the auxiliary heads {missing} need their targets in the batch{has}; "
                    "make the data add them (e.g. UDPOSDataModule(aux_columns=...))"
                )
            aux_losses = {key: [] for key in self.aux_heads}
            outputs = [self._member_outputs(batch, i, aux=True) for i in range(len(self.members))]
            per_member = [logits for logits, _, _ in outputs]
            if self.ensemble is None:  # its loss is the one computed from ``logits`` below
                logits = per_member[0]
            else:
                logits = Ensemble.combine([m.detach() for m in per_member])  # for the accuracy only
                member_losses = [self._loss(m, target, batch, stage)[0] for m in per_member]
            for _, aux, segments in outputs:
                for key, aux_logits in aux.items():
                    aux_losses[key].append(self._loss(aux_logits, batch[key], batch, stage, key)[0])
                if segments is not None:
                    segment_losses.append(self._segment_loss(*segments, target))
        else:
            logits = self(batch)
        loss, flat_logits, flat_target = self._loss(logits, target, batch, stage)
        if member_losses:
            loss = torch.stack(member_losses).mean()
        if self.task == "multilabel":
            return self._log_multilabel(loss, flat_logits, flat_target, stage)
        n = int((flat_target != IGNORE_INDEX).sum())
        for key, losses in aux_losses.items():
            aux_loss = torch.stack(losses).mean()
            self.log(f"train_{key}_loss", aux_loss, on_step=False, on_epoch=True, batch_size=n, sync_dist=True)
            loss = loss + self.aux_weight * aux_loss
        if segment_losses:
            segment_loss = torch.stack(segment_losses).mean()
            self.log("train_segment_loss", segment_loss, on_step=False, on_epoch=True, batch_size=n, sync_dist=True)
            loss = loss + self.segment_loss_weight * segment_loss
        acc = self.accuracy[f"{stage}_acc"]
        acc(flat_logits.detach(), flat_target)
        on_step = stage == "train"
        self.log(f"{stage}_loss", loss, on_step=on_step, on_epoch=True, prog_bar=True, batch_size=n, sync_dist=True)
        self.log(f"{stage}_acc", acc, on_step=False, on_epoch=True, prog_bar=True, batch_size=n)
        return loss

    def _segment_loss(self, logits: Tensor, present: Tensor, target: Tensor) -> Tensor:
        """Cross-entropy of every present segment's own logits (B, K, C) against its item's class (B,)."""
        if target.dim() != 1:
            raise ValueError(
                f"segment_loss_weight takes one class per item, targets (B,); got {tuple(target.shape)}"
            )
        targets = target.view(-1, 1).expand(-1, logits.size(1))  # (B, K)
        keep = present.to(logits.device) & (targets != IGNORE_INDEX)
        if not keep.any():
            return logits.sum() * 0.0
        return F.cross_entropy(logits[keep].float(), targets[keep], label_smoothing=self.label_smoothing)

    def _log_multilabel(self, loss: Tensor, flat_logits: Tensor, flat_target: Tensor, stage: Stage) -> Tensor:
        """Log the loss, the label accuracy and (validation, test) the average precision of a multi-label step."""
        n = flat_target.size(0)
        probs = flat_logits.detach().float().sigmoid()  # (R, C); probabilities, never read as logits
        scored = torch.where(torch.isnan(flat_target), IGNORE_INDEX, flat_target).long()  # (R, C)
        acc = cast(Metric, self.accuracy[f"{stage}_acc"])
        acc(probs, scored)
        on_step = stage == "train"
        self.log(f"{stage}_loss", loss, on_step=on_step, on_epoch=True, prog_bar=True, batch_size=n, sync_dist=True)
        self.log(f"{stage}_acc", acc, on_step=False, on_epoch=True, prog_bar=True, batch_size=n)
        if stage != "train":  # updated per batch, computed over the whole epoch
            ap = cast(Metric, self.average_precision[f"{stage}_ap"])
            ap.update(probs, scored)
            self.log(f"{stage}_ap", ap, on_step=False, on_epoch=True, prog_bar=True, batch_size=n)
        return loss

    def _multilabel_loss(
        self, logits: Tensor, target: Tensor, batch: Any, stage: Stage
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Binary cross-entropy over the known labels of the items the stage scores, with the flat
        logits and targets (R, C) used."""
        if target.shape != logits.shape:
            raise ValueError(
                f"task='multilabel' needs batch[{self.target_key!r}] of the logits' shape {tuple(logits.shape)} "
                f"(0/1 per label), got {tuple(target.shape)}; for one class per item use task='multiclass' "
                "(the recipes link it to data.task)"
            )
        C = logits.size(-1)
        flat_logits, flat_target = logits.reshape(-1, C), target.reshape(-1, C).float()  # (R, C)
        checked: set[tuple[str, str]] = self.__dict__.setdefault("_checked_targets", set())
        if (stage, self.target_key) not in checked:
            checked.add((stage, self.target_key))
            known = flat_target[~torch.isnan(flat_target)]
            if ((known != 0) & (known != 1)).any():
                raise ValueError(
                    f"task='multilabel' needs 0/1 targets per label (NaN: unknown), but batch[{self.target_key!r}] "
                    f"holds {sorted(set(known.unique().tolist()))[:5]}; for class ids use task='multiclass'"
                )
        mask_key = f"{stage}_mask"
        if (isinstance(batch, dict) and mask_key in batch) or hasattr(batch, mask_key):
            keep = batch[mask_key].reshape(-1)
            flat_logits, flat_target = flat_logits[keep], flat_target[keep]
        known = ~torch.isnan(flat_target)
        loss = F.binary_cross_entropy_with_logits(flat_logits.float()[known], flat_target[known])
        return loss, flat_logits, flat_target

    def _loss(
        self, logits: Tensor, target: Tensor, batch: Any, stage: Stage, key: str | None = None
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Cross-entropy over the targets the stage scores, with the flat logits and targets used
        (``key``: the batch key of the targets, the main ``target_key`` by default); binary
        cross-entropy per label for the main targets of a multi-label task."""
        if key is None and self.task == "multilabel":
            return self._multilabel_loss(logits, target, batch, stage)
        if key is None and target.is_floating_point() and target.shape == logits.shape:
            raise ValueError(
                f"batch[{self.target_key!r}] holds one value per class {tuple(target.shape)}, as multi-label targets "
                "do, but the task is 'multiclass' (one class id per item): set task='multilabel' (the recipes "
                "link it to data.task)"
            )
        if logits.dim() == 3 and target.dim() == 2 and target.size(1) != logits.size(1):
            raise ValueError(f"per-token targets {tuple(target.shape)} do not match logits {tuple(logits.shape)}")
        flat_logits, flat_target = logits.reshape(-1, logits.size(-1)), target.reshape(-1)
        self._check_targets(flat_target, logits.size(-1), stage, key or self.target_key)
        mask_key = f"{stage}_mask"
        if (isinstance(batch, dict) and mask_key in batch) or hasattr(batch, mask_key):
            keep = batch[mask_key].reshape(-1)
            flat_logits, flat_target = flat_logits[keep], flat_target[keep]
        loss = F.cross_entropy(
            flat_logits.float(), flat_target, ignore_index=IGNORE_INDEX, label_smoothing=self.label_smoothing
        )
        return loss, flat_logits, flat_target

    def _check_targets(self, target: Tensor, num_classes: int, stage: Stage, key: str) -> None:
        """On the first batch of each stage and target key: every target is a class of the model (or
        ``-100``), else an error naming the setting (cross-entropy would only say "out of bounds")."""
        checked: set[tuple[str, str]] = self.__dict__.setdefault("_checked_targets", set())
        if (stage, key) in checked:
            return
        checked.add((stage, key))
        real = target[target != IGNORE_INDEX]
        if real.numel() and (int(real.min()) < 0 or int(real.max()) >= num_classes):
            what = "the task's num_classes" if key == self.target_key else f"the auxiliary head {key!r}'s num_classes"
            raise ValueError(
                f"batch[{key!r}] holds classes {int(real.min())}..{int(real.max())} but the model predicts "
                f"{num_classes} ({what}): set it to the data's number of classes (the recipes link it to "
                "data.num_classes)"
            )

    def predict_step(self, batch: Any, batch_idx: int) -> Tensor:
        """The predicted class per item; for ``task="multilabel"``, the 0/1 decision per label."""
        logits = self(batch)
        return (logits > 0).long() if self.task == "multilabel" else logits.argmax(-1)
