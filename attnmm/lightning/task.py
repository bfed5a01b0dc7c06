r"""The task LightningModule shared by every recipe: adapter -> encoder -> head, one shared step."""

from __future__ import annotations

import inspect
import io
import math
import warnings
from copy import deepcopy
from typing import Any

import lightning as L
import torch
from torch import Tensor, nn

from attnmm._checks import check_nonneg_int
from attnmm.adapters.base import Adapter, Tokens
from attnmm.lightning.objectives import IGNORE_INDEX, MultiClass, MultiLabel, Objective, PerSegment, Stage
from attnmm.lightning.schedule import Optimization, WarmupCosine
from attnmm.nn.state import IncrementalState

__all__ = ["IGNORE_INDEX", "ClassificationTask", "EncoderTask", "Ensemble", "Stage"]


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
    :class:`ClassificationTask` (what its objective says), :class:`Ensemble` (copies of one, together) and
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

    def encode(
        self, batch: Any, return_weights: bool = False, state: IncrementalState | None = None
    ) -> tuple[Tensor, Tokens, Any]:
        """Encoder output h, the adapter's tokens and (optionally, else ``None``) the attention weights per
        layer; with ``state``, read incrementally (see ``ClassificationTask.forward``). Every encoder takes
        the one call ``encoder(x, mask, *, tokens, state, return_weights)`` and refuses by name the options
        it cannot honour."""
        tokens = self.adapter(batch)
        result = self.encoder(tokens.x, tokens.mask, tokens=tokens, state=state, return_weights=return_weights)
        return (result[0], tokens, result[1]) if return_weights else (result, tokens, None)

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
    :class:`~attnmm.lightning.MultiLabel` (binary labels per item; ``val_ap``/``test_ap`` too),
    :class:`~attnmm.lightning.PerSegment` (each segment of an item trained to predict it alone too) or
    :class:`~attnmm.lightning.CTC` (a label sequence per item from a :class:`~attnmm.nn.CTCHead`'s
    per-frame logits). The recipes link the objective to the data's ``task`` where the data decides it.
    Optimiser: :class:`~attnmm.lightning.Optimization` (AdamW with warm-up and cosine decay) at peak rate
    ``lr``. Starting from a trained model: the :class:`~attnmm.lightning.Transfer` callback; several
    independently initialised copies trained and predicting together: :class:`Ensemble`.

    ``load_from_checkpoint`` also reads the checkpoint of an ensemble run (it returns the
    :class:`Ensemble`) and of the former task that took its objective's, optimiser's, transfer's and
    ensemble's options itself (``task``, ``aux_heads``, ``weight_decay``, ``ensemble``, ...).

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
    ) -> None:
        super().__init__(lr, optimizer)
        self._save_config()
        self.adapter, self.encoder, self.head = adapter, encoder, head
        self.objective = MultiClass() if objective is None else objective
        if not isinstance(self.objective, Objective):
            raise TypeError(
                f"objective must be an attnmm.lightning Objective (MultiClass, MultiLabel, PerSegment, CTC), got "
                f"{objective!r}; for binary labels per item give MultiLabel() (task='multilabel')"
            )
        self.num_classes = check_nonneg_int("num_classes", num_classes, minimum=1)
        self.objective.setup(self.num_classes, head)

    def outputs(
        self, batch: Any, extra: bool = False, state: IncrementalState | None = None
    ) -> tuple[Tensor, Tokens, dict[str, tuple[float, Tensor]]]:
        """The logits, the adapter's tokens and, with ``extra``, the objective's training terms beside the loss."""
        h, tokens, _ = self.encode(batch, state=state)
        head = self.head
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
        width = self.objective.num_logits(self.num_classes)
        if logits.size(-1) != width:
            raise ValueError(
                f"the model gives {logits.size(-1)} logits per prediction but the task has num_classes="
                f"{self.num_classes} ({width} logits for {type(self.objective).__name__}): make the head's "
                "num_classes (or the encoder's output width) and the task's num_classes the same, the number of "
                "classes in the data"
            )
        return logits, tokens, self.objective.extra_losses(h, tokens, head, batch) if extra else {}

    def forward(self, batch: Any, state: IncrementalState | None = None) -> Tensor:
        """The logits.

        With ``state`` (an :class:`~attnmm.nn.IncrementalState`), a causal model reads its
        tokens incrementally: the batch holds only the tokens after those already read (and
        ``offset``, their first position), and the encoder's caches carry the rest (see
        :func:`~attnmm.lightning.generate`)."""
        return self.outputs(batch, state=state)[0]

    def _shared_step(self, batch: Any, stage: Stage) -> Tensor:
        return self.step(batch, stage, [self], self)

    def step(self, batch: Any, stage: Stage, members: list[ClassificationTask], module: L.LightningModule) -> Tensor:
        """One step of ``members`` (this task, or the copies of an :class:`Ensemble`, this one first), logged
        through ``module``: each member trains on its own loss (their mean is minimised, with the mean of
        their training terms), and the metrics read their combined logits (``Ensemble.combine``)."""
        train = stage == "train"
        outputs = [m.outputs(batch, extra=train) for m in members]
        logits, tokens = outputs[0][0], outputs[0][1]
        if len(outputs) > 1:
            logits = Ensemble.combine([o[0].detach() if train else o[0] for o in outputs])
        loss, flat_logits, flat_target = self.objective.loss(logits, batch, stage, tokens)
        if train and len(outputs) > 1:
            loss = torch.stack([m.objective.loss(o[0], batch, stage, o[1])[0] for m, o in zip(members, outputs)]).mean()
        n = self.objective.count(flat_target)
        for name, (weight, _) in outputs[0][2].items():  # (the members are copies: the same terms)
            value = torch.stack([terms[name][1] for _, _, terms in outputs]).mean()
            module.log(f"train_{name}_loss", value, on_step=False, on_epoch=True, batch_size=n, sync_dist=True)
            loss = loss + weight * value
        self.objective.log(module, loss, flat_logits, flat_target, stage)
        return loss

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        _renamed(checkpoint.get("state_dict", {}))

    def predict_step(self, batch: Any, batch_idx: int) -> Any:
        """The prediction per item read by the objective: the class, the 0/1 decision per label, the labels."""
        logits, tokens, _ = self.outputs(batch)
        return self.objective.predict(logits, tokens)

    @classmethod
    def load_from_checkpoint(  # type: ignore[override]
        cls, checkpoint_path: Any, map_location: Any = None, hparams_file: Any = None, strict: bool | None = None,
        weights_only: bool | None = None, **kwargs: Any,
    ) -> Any:
        """Lightning's ``load_from_checkpoint``, which also reads an ensemble run's checkpoint (returning the
        :class:`Ensemble`) and the former task's options (see the class docstring)."""
        checkpoint = torch.load(checkpoint_path, map_location="cpu", weights_only=weights_only)
        state = checkpoint["state_dict"]
        size = _renamed(state)
        hparams = checkpoint.get("hyper_parameters") or {}
        if isinstance(hparams.get("model"), dict) and "init_args" in hparams["model"]:  # an Ensemble's
            hparams = {**hparams["model"]["init_args"], "_instantiator": hparams.get("_instantiator")}
        args = _composed({k: v for k, v in {**hparams, **kwargs}.items() if k not in ("size", "ensemble")}, state)
        checkpoint["hyper_parameters"] = {}
        if size > 1:
            checkpoint["state_dict"] = {k: v for k, v in state.items() if not k.startswith("ensemble.")}
        buffer = io.BytesIO()
        torch.save(checkpoint, buffer)
        buffer.seek(0)
        task = super().load_from_checkpoint(buffer, map_location, hparams_file, strict, weights_only, **args)
        if size == 1:
            return task
        ensemble = Ensemble(task, size)
        ensemble.load_state_dict(state, strict=strict is not False)
        return ensemble.to(task.device)


#: The former task's own options, now its objective's, its optimiser's, the Transfer callback's or an Ensemble's.
_FORMER = ("weight_decay", "warmup_fraction", "min_lr_ratio", "label_smoothing", "target_key", "aux_heads",
           "aux_weight", "task", "init_from", "freeze_encoder_epochs", "init_into", "segment_loss_weight")


def _composed(args: dict[str, Any], state: dict[str, Tensor]) -> dict[str, Any]:
    """``args`` of the task with the former task's options (:data:`_FORMER`) as the objective and optimiser
    they now are: configs (``class_path``) when ``args`` are a recorded config, else objects."""
    if args.get("_instantiator", 0) is None:
        del args["_instantiator"]
    old = {k: args.pop(k) for k in _FORMER if k in args}
    if not old and not isinstance(args.get("optimizer"), str):
        return args
    as_config = "_instantiator" in args
    transfer = {k: old.pop(k, None) for k in ("init_from", "freeze_encoder_epochs", "init_into")}
    if any(transfer.values()):
        warnings.warn(f"the checkpoint's run started with {transfer} (the Transfer callback's options now); the "
                      "loaded task holds the trained weights and needs none of them", UserWarning, stacklevel=3)
    optim: dict[str, Any] = {k: old.pop(k) for k in ("weight_decay", "warmup_fraction", "min_lr_ratio") if k in old}
    if isinstance(args.get("optimizer"), str):
        optim["kind"] = args.pop("optimizer")
    if optim and args.get("optimizer") is None:
        args["optimizer"] = optim if as_config else Optimization(**optim)
    if old.get("aux_heads") is None:
        old.pop("aux_heads", None)
        if not any("aux_heads." in k for k in state):
            old.pop("aux_weight", None)  # (the former default, beside no auxiliary head)
        elif args.get("objective") is None:
            raise ValueError("the checkpoint holds auxiliary heads (aux_heads.*) built in Python: pass them again, "
                             "as load_from_checkpoint(path, objective=MultiClass(aux_heads=...), ...)")
    if not old or args.get("objective") is not None:
        return args
    kind, weight = old.pop("task", "multiclass"), old.pop("segment_loss_weight", 0.0)
    if not old.get("label_smoothing"):
        old.pop("label_smoothing", None)
    objective, allowed = {"multiclass": (MultiClass, {"label_smoothing", "target_key", "aux_heads", "aux_weight"}),
                          "multilabel": (MultiLabel, {"target_key"})}.get(kind, (None, set()))
    if weight and kind == "multiclass":
        objective, allowed, old["weight"] = PerSegment, {"weight", "label_smoothing", "target_key"}, weight
    refused = sorted(set(old) - allowed) + (["task"] if objective is None else [])
    if refused:
        raise ValueError(
            f"the checkpoint's task option(s) {', '.join(f'{k}={old.get(k, kind)!r}' for k in refused)} fit no "
            f"objective beside task={kind!r}, segment_loss_weight={weight}: load it with the attnmm version that "
            "wrote it, or pass objective=... to load_from_checkpoint"
        )
    assert objective is not None
    config = {"class_path": f"attnmm.lightning.{objective.__name__}", "init_args": old}
    args["objective"] = config if as_config else objective(**old)
    return args


def _renamed(state: dict[str, Tensor]) -> int:
    """Give, in place, a state dict's auxiliary heads the name they have since they are the objective's (the
    former task held them); returns the number of models (an ensemble's copies are ``ensemble.members.i``)."""
    for key in [k for k in state if "aux_heads." in k and "objective.aux_heads." not in k]:
        state[key.replace("aux_heads.", "objective.aux_heads.", 1)] = state.pop(key)
    copies = {int(k.split(".")[2]) for k in state if k.startswith("ensemble.members.")}
    return max(copies, default=-1) + 2


class Ensemble(EncoderTask):
    r"""A deep ensemble of a task: ``size`` independently initialised copies of it, trained side by side on
    the same batches and predicting together.

    The first member is ``model``, whose parts are the ensemble's ``adapter``, ``encoder``, ``head`` and
    ``objective``; the others (``ensemble.members``) are deep copies of it, every part initialised afresh
    (``reset_parameters``); :attr:`members` lists them all. Each trains on its own loss (their mean is
    minimised), and the ensemble predicts with :meth:`combine`, the log of the members' mean probabilities,

    .. math::
        \log \frac{1}{n} \sum_{k=1}^{n} \mathrm{softmax}(\mathbf{z}_k),

    on which the validation and test metrics are computed: ``size`` times the compute (a few tenths of a
    point in tagging). Its optimiser is the task's. The recipes build it from the ``ensemble:`` key
    (``--ensemble 2``); ``ClassificationTask.load_from_checkpoint`` returns it for such a run.

    Args:
        model (ClassificationTask): the task whose copies the ensemble trains (its objective must average
            class probabilities: not :class:`~attnmm.lightning.MultiLabel` or :class:`~attnmm.lightning.CTC`).
        size (int, optional): number of models n, >= 2. (default: :obj:`2`)

    Examples:
        >>> import torch
        >>> from attnmm.adapters import SpeechAdapter
        >>> from attnmm.nn import Encoder, PoolingClassifier
        >>> task = ClassificationTask(SpeechAdapter(d_model=16), Encoder(16, 2, 1, 32), PoolingClassifier(16, 3), 3)
        >>> ensemble = Ensemble(task, 2)
        >>> log_p = ensemble(SpeechAdapter.example_batch(2))  # (B, C): log of the mean probabilities
        >>> ensemble.members[0] is task, torch.allclose(log_p.exp().sum(-1), torch.ones(2))
        (True, True)
    """

    def __init__(self, model: ClassificationTask, size: int = 2) -> None:
        if not isinstance(model, ClassificationTask):
            raise TypeError(f"an Ensemble trains copies of a ClassificationTask, got {type(model).__name__}")
        super().__init__(model.lr, model.optimization)
        self.size = check_nonneg_int("size", size, minimum=2)
        cls = type(model)  # the task's own plain arguments, as Ensemble(model, size) is configured
        self.save_hyperparameters({"model": {"class_path": f"{cls.__module__}.{cls.__qualname__}",
                                             "init_args": dict(model.hparams)}, "size": self.size}, logger=False)
        if not model.objective.ensembles:
            raise ValueError(
                "an Ensemble averages the members' class probabilities (softmax over classes), which does not fit "
                f"{type(model.objective).__name__} (e.g. task='multilabel'); train one model (ensemble=None)"
            )
        copies = [deepcopy(model) for _ in range(self.size - 1)]
        for sub in (sub for copy in copies for sub in copy.modules()):
            reset = getattr(sub, "reset_parameters", None)
            if callable(reset):
                reset()
        # the first member's parts are the ensemble's own (a backbone, attention maps), the copies beside them
        self.adapter, self.encoder, self.head = model.adapter, model.encoder, model.head
        self.objective = model.objective
        self.ensemble = nn.Module()
        self.ensemble.members = nn.ModuleList(copies)
        self.members: tuple[ClassificationTask, ...] = (model, *copies)  # (a tuple: registered above)

    @staticmethod
    def combine(logits: list[Tensor]) -> Tensor:
        """``log(mean_k softmax(logits_k))``, computed stably in float32."""
        logp = torch.stack([x.float().log_softmax(-1) for x in logits])
        return torch.logsumexp(logp, 0) - math.log(len(logits))

    def forward(self, batch: Any, state: IncrementalState | None = None) -> Tensor:
        """The log of the members' mean probabilities (with ``state``, every member reads incrementally)."""
        return self.combine([m(batch, state) for m in self.members])

    def _shared_step(self, batch: Any, stage: Stage) -> Tensor:
        return self.members[0].step(batch, stage, list(self.members), self)

    def predict_step(self, batch: Any, batch_idx: int) -> Any:
        return self.objective.predict(self(batch))

    on_load_checkpoint = ClassificationTask.on_load_checkpoint

    @classmethod
    def load_from_checkpoint(cls, checkpoint_path: Any, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        """An ensemble run's checkpoint, as ``ClassificationTask.load_from_checkpoint`` reads it."""
        loaded = ClassificationTask.load_from_checkpoint(checkpoint_path, *args, **kwargs)
        if not isinstance(loaded, Ensemble):
            raise ValueError(f"{checkpoint_path} holds one model: load it with ClassificationTask.load_from_checkpoint")
        return loaded
