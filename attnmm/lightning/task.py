r"""The task LightningModule shared by every recipe: adapter -> encoder -> head, one shared step."""

from __future__ import annotations

import inspect
from typing import Any, cast

import lightning as L
import torch
from torch import Tensor, nn

from attnmm._checks import check_nonneg_int
from attnmm.adapters.base import Adapter, Tokens
from attnmm.lightning.objectives import IGNORE_INDEX, MultiClass, Objective, Stage
from attnmm.lightning.schedule import Optimization, WarmupCosine
from attnmm.nn.ensemble import Ensemble
from attnmm.nn.state import IncrementalState

__all__ = ["IGNORE_INDEX", "ClassificationTask", "EncoderTask", "Stage"]


class EncoderTask(L.LightningModule):
    r"""Base of the task modules: an adapter and an encoder, :math:`\mathbf{H} = \mathrm{encoder}(\mathbf{X};
    A)` with :math:`(\mathbf{X}, A) = \mathrm{adapter}(\text{batch})`, and what every task shares.

    Shared: the optimiser (:class:`~attnmm.lightning.Optimization`: AdamW, or Adam with an L2 penalty; no
    weight decay on biases and norms; fused where torch has the kernel; linear warm-up and cosine decay
    over the run); the training, validation and test steps, which all call a subclass's
    ``_shared_step(batch, stage)``; and :meth:`_save_config`, which keeps the constructor's plain
    arguments as hyperparameters (under LightningCLI the recipe records the whole config, so
    ``load_from_checkpoint`` rebuilds the model). A subclass sets ``adapter`` and ``encoder``, calls
    ``_save_config()`` first in its ``__init__`` and implements ``_shared_step``:
    :class:`ClassificationTask` (one label per item, token or node) and
    :class:`~attnmm.lightning.SequenceTask` (label sequences, CTC and attention decoding). Starting from a
    trained model is the :class:`~attnmm.lightning.Transfer` callback's.

    Args:
        lr (float, optional): peak learning rate. (default: :obj:`1e-3`)
        optimizer (Optimization, optional): the rest of the optimisation. (default: :obj:`None`,
            ``Optimization()``)
    """

    adapter: Adapter
    encoder: nn.Module

    def __init__(self, lr: float = 1e-3, optimizer: Optimization | None = None) -> None:
        super().__init__()
        self.lr = lr
        self.optimization = Optimization() if optimizer is None else optimizer
        if not isinstance(self.optimization, Optimization):
            raise TypeError(f"optimizer must be an attnmm.lightning.Optimization, got {type(optimizer).__name__}")

    def _save_config(self) -> None:
        """Save the constructor's plain arguments as hyperparameters, leaving out the parts (modules and
        other objects): built in Python, the state dict holds them; pass them again to ``load_from_checkpoint``."""
        frame = inspect.currentframe().f_back  # type: ignore[union-attr]
        values = inspect.getargvalues(frame)  # type: ignore[arg-type]
        parts = [k for k in values.args[1:] if not isinstance(values.locals[k], bool | int | float | str | type(None))]
        self.save_hyperparameters(ignore=parts, logger=False, frame=frame)

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
        # not fused under fp16 loss scaling with gradient clipping (a fused step unscales inside, Lightning refuses);
        # the run's length is set in on_train_start, after a resumed run has restored its checkpoint
        fp16_clip = bool(self.trainer.gradient_clip_val) and str(self.trainer.precision).startswith("16")
        return self.optimization.build(self, self.lr, fused_ok=not fp16_clip)

    def load_backbone(self, source: str) -> list[str]:
        """Load the adapter and encoder weights of ``source`` (see :func:`~attnmm.lightning.pretrained.load_backbone`,
        and :class:`~attnmm.lightning.Transfer` to do it when ``fit`` begins); returns the names loaded."""
        from attnmm.lightning.pretrained import load_backbone

        return load_backbone(self, source)

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

    The adapter, encoder, head and objective are injected (LightningCLI picks them by ``class_path``), so
    one task serves speech, image, text and graph recipes. The objective says what is optimised and
    logged and how predictions are read: :class:`~attnmm.lightning.MultiClass` (the default: one class
    per item, token or node; cross-entropy, ``{stage}_loss`` and ``{stage}_acc``),
    :class:`~attnmm.lightning.MultiLabel` (binary labels per item; ``val_ap``/``test_ap`` too) or
    :class:`~attnmm.lightning.PerSegment` (each segment of an item trained to predict it alone too).
    The recipes link the objective to the data's ``task`` where the data decides it. Optimiser:
    :class:`~attnmm.lightning.Optimization` (AdamW with warm-up and cosine decay) at peak rate ``lr``.
    Starting from a trained model: the :class:`~attnmm.lightning.Transfer` callback.

    With an injected :class:`~attnmm.nn.Ensemble` of size n, the task holds n independently
    initialised copies of the adapter, encoder and head (and of the objective's auxiliary heads)
    (``members``; the first is ``adapter``/``encoder``/``head``). They train side by side on the same
    batches, each on its own loss (the mean of their losses is minimised), and predict together: the
    logits are the log of the members' mean probabilities (:meth:`Ensemble.combine
    <attnmm.nn.Ensemble.combine>`), on which the validation and test losses and accuracies are computed.

    Args:
        adapter (Adapter): raw batch -> :class:`~attnmm.adapters.Tokens`.
        encoder (nn.Module): ``encoder(x, mask, *, tokens, state, return_weights) -> h``, the call
            every encoder takes, e.g. :class:`~attnmm.nn.Encoder`; ``tokens`` is the adapter's
            :class:`~attnmm.adapters.Tokens` (e.g. :class:`~attnmm.nn.GPSEncoder` reads the edges).
        head (nn.Module, optional): ``head(h, tokens) -> logits``; ``None`` when the encoder's output
            already is the logits (e.g. a GAT whose last layer has one output per class).
        num_classes (int): number of classes C.
        objective (Objective, optional): loss, metrics and predictions. (default: :obj:`None`,
            ``MultiClass()``)
        lr (float, optional): peak learning rate. (default: :obj:`1e-3`)
        optimizer (Optimization, optional): weight decay, warm-up, final rate, Adam or AdamW.
            (default: :obj:`None`, ``Optimization()``)
        ensemble (Ensemble, optional): train and predict with an ensemble of independently
            initialised copies of the model, e.g. ``Ensemble(2)``; ``None`` for one model.
            (default: :obj:`None`)

    Examples:
        >>> import torch
        >>> from attnmm.adapters import SpeechAdapter
        >>> from attnmm.nn import Encoder
        >>> from attnmm.lightning import ClassificationTask, MultiLabel
        >>> from attnmm.nn import PoolingClassifier
        >>> task = ClassificationTask(SpeechAdapter(d_model=32), Encoder(32, 4, 1, 64), PoolingClassifier(32, 10), 10)
        >>> task(SpeechAdapter.example_batch(2)).shape
        torch.Size([2, 10])

        Multi-label graph classification (three binary labels per graph):

        >>> from attnmm.adapters import GraphAdapter
        >>> from attnmm.nn import GPSEncoder
        >>> task = ClassificationTask(GraphAdapter(16, 32), GPSEncoder(32), PoolingClassifier(32, 3), 3,
        ...                           MultiLabel(target_key="y"))
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
        objective: Objective | None = None,
        lr: float = 1e-3,
        optimizer: Optimization | None = None,
        ensemble: Ensemble | None = None,
    ) -> None:
        super().__init__(lr, optimizer)
        self._save_config()
        self.adapter, self.encoder, self.head = adapter, encoder, head
        self.objective = MultiClass() if objective is None else objective
        if not isinstance(self.objective, Objective):
            raise TypeError(
                f"objective must be an attnmm.lightning Objective (MultiClass, MultiLabel, PerSegment), got "
                f"{objective!r}; for binary labels per item give MultiLabel() (task='multilabel')"
            )
        self.num_classes = check_nonneg_int("num_classes", num_classes, minimum=1)
        self.objective.setup(self.num_classes, head)
        if ensemble is not None and not self.objective.ensembles:
            raise ValueError(
                "an Ensemble averages the members' class probabilities (softmax over classes), which does not fit "
                f"{type(self.objective).__name__} (task='multilabel'); train one model (ensemble=None)"
            )
        self.ensemble = ensemble
        if ensemble is not None:  # the other members: fresh copies of these parts
            parts: dict[str, nn.Module | None] = {"adapter": adapter, "encoder": encoder, "head": head}
            if any(True for _ in self.objective.parameters()):  # its own auxiliary heads
                parts["objective"] = self.objective
            ensemble.build(parts)

    @property
    def members(self) -> list[tuple[Adapter, nn.Module, nn.Module | None, Objective]]:
        """The ``(adapter, encoder, head, objective)`` of every ensemble member, the task's own first."""
        members = [(self.adapter, self.encoder, self.head, self.objective)]
        for m in self.ensemble.members if self.ensemble is not None else []:
            parts = cast(nn.ModuleDict, m)
            objective = cast(Objective, parts["objective"]) if "objective" in parts else self.objective
            members.append((cast(Adapter, parts["adapter"]), parts["encoder"], parts["head"], objective))
        return members

    def encode(
        self, batch: Any, return_weights: bool = False, member: int = 0, state: IncrementalState | None = None
    ) -> tuple[Tensor, Tokens, Any]:
        """Encoder output h, the adapter's tokens and (optionally) the attention weights per layer
        (of ensemble member ``member``); with ``state``, read incrementally (see :meth:`forward`)."""
        adapter, encoder, _, _ = self.members[member]
        return self._run_encoder(adapter, encoder, batch, return_weights, state)

    def member_logits(self, batch: Any, member: int = 0, state: IncrementalState | None = None) -> Tensor:
        """The logits of one ensemble member."""
        return self._member_outputs(batch, member, state=state)[0]

    def _member_outputs(
        self, batch: Any, member: int, extra: bool = False, state: IncrementalState | None = None
    ) -> tuple[Tensor, dict[str, tuple[float, Tensor]]]:
        """One member's logits and, with ``extra``, its objective's training terms beside the loss."""
        h, tokens, _ = self.encode(batch, member=member, state=state)
        _, _, head, objective = self.members[member]
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
        if logits.size(-1) != self.num_classes:
            raise ValueError(
                f"the model gives {logits.size(-1)} logits per prediction but the task has num_classes="
                f"{self.num_classes}: make the head's num_classes (or the encoder's output width) and the "
                "task's num_classes the same, the number of classes in the data"
            )
        return logits, objective.extra_losses(h, tokens, head, batch) if extra else {}

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
        objective = self.objective
        extras: dict[str, tuple[float, list[Tensor]]] = {}
        member_losses: list[Tensor] = []
        if stage == "train":
            outputs = [self._member_outputs(batch, i, extra=True) for i in range(len(self.members))]
            for _, terms in outputs:
                for name, (weight, value) in terms.items():
                    extras.setdefault(name, (weight, []))[1].append(value)
            if self.ensemble is None:
                logits = outputs[0][0]
            else:
                logits = Ensemble.combine([m.detach() for m, _ in outputs])  # for the accuracy only
                member_losses = [objective.loss(m, batch, stage)[0] for m, _ in outputs]
        else:
            logits = self(batch)
        loss, flat_logits, flat_target = objective.loss(logits, batch, stage)
        if member_losses:
            loss = torch.stack(member_losses).mean()
        n = objective.count(flat_target)
        for name, (weight, values) in extras.items():
            value = torch.stack(values).mean()
            self.log(f"train_{name}_loss", value, on_step=False, on_epoch=True, batch_size=n, sync_dist=True)
            loss = loss + weight * value
        objective.log(self, loss, flat_logits, flat_target, stage)
        return loss

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        # a checkpoint written when the task held the auxiliary heads (now its objective's)
        state = checkpoint.get("state_dict", {})
        for key in [k for k in state if "aux_heads." in k and "objective.aux_heads." not in k]:
            state[key.replace("aux_heads.", "objective.aux_heads.", 1)] = state.pop(key)

    def predict_step(self, batch: Any, batch_idx: int) -> Tensor:
        """The prediction per item read by the objective: the class, or the 0/1 decision per label."""
        return self.objective.predict(self(batch))
