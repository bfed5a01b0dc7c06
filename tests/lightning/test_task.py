from __future__ import annotations

import itertools
import re

import lightning as L
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader

from attnmm.adapters import Adapter, SpeechAdapter, Tokens
from attnmm.lightning import ClassificationTask, Ensemble, MultiClass, MultiLabel, PerSegment, warmup_cosine
from attnmm.masks import Window
from attnmm.nn import Encoder, PoolingClassifier, TokenClassifier
from attnmm.nn.heads import masked_mean


class ToyAudio(L.LightningDataModule):
    """Two classes: quiet noise vs a loud tone."""

    def __init__(self, n: int = 32) -> None:
        super().__init__()
        t = torch.arange(4000) / 8000
        items = []
        for i in range(n):
            label = i % 2
            wave = torch.sin(2 * torch.pi * 440 * t) if label else torch.randn(4000) * 0.01
            items.append({"waveform": wave, "lengths": torch.tensor(4000), "label": torch.tensor(label)})
        self.items = items

    def _loader(self) -> DataLoader:
        return DataLoader(self.items, batch_size=8)

    def train_dataloader(self) -> DataLoader:
        return self._loader()

    def val_dataloader(self) -> DataLoader:
        return self._loader()

    def test_dataloader(self) -> DataLoader:
        return self._loader()


def make_task(ensemble: int = 1) -> ClassificationTask | Ensemble:
    task = ClassificationTask(
        SpeechAdapter(d_model=16, channels=4, mask=Window(4, 1)),
        Encoder(16, 2, 1, 32, dropout=0.0),
        PoolingClassifier(16, 2),
        num_classes=2,
        lr=3e-3,
    )
    return task if ensemble == 1 else Ensemble(task, ensemble)


def members(task: ClassificationTask | Ensemble) -> list:
    """The (adapter, encoder, head, objective) of each model."""
    return [(m.adapter, m.encoder, m.head, m.objective) for m in getattr(task, "members", [task])]


@pytest.mark.slow  # trains for a while: the recipe tier
@pytest.mark.parametrize("ensemble", [1, 2])
def test_fit_learns_and_logs(tmp_path, ensemble: int) -> None:
    torch.manual_seed(0)
    task = make_task(ensemble)
    def weights(member: tuple) -> list[torch.Tensor]:
        return [p.detach().clone() for part in member if part is not None for p in part.parameters()]

    before = [weights(m) for m in members(task)]
    trainer = L.Trainer(
        max_epochs=6, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        default_root_dir=tmp_path, enable_model_summary=False,
    )
    trainer.fit(task, datamodule=ToyAudio())
    for old, member in zip(before, members(task), strict=True):  # every member trains on its own loss
        assert any(not torch.equal(a, b) for a, b in zip(old, weights(member), strict=True))
    (res,) = trainer.test(task, datamodule=ToyAudio(), verbose=False)
    assert set(res) >= {"test_acc", "test_loss"}
    assert res["test_acc"] == 1.0


@pytest.mark.parametrize("ensemble", [1, 2])
def test_checkpoint_round_trip(tmp_path, ensemble: int) -> None:
    task = make_task(ensemble)
    trainer = L.Trainer(max_steps=1, logger=False, default_root_dir=tmp_path, enable_progress_bar=False,
                        enable_model_summary=False, limit_val_batches=1)
    trainer.fit(task, datamodule=ToyAudio(8))
    path = tmp_path / "model.ckpt"
    trainer.save_checkpoint(path)
    fresh = make_task()
    loaded = ClassificationTask.load_from_checkpoint(  # modules built in Python are passed again
        path, adapter=fresh.adapter, encoder=fresh.encoder, head=fresh.head, weights_only=True,
    )
    assert type(loaded) is type(task)  # an ensemble run's checkpoint loads as the Ensemble
    batch = SpeechAdapter.example_batch(2)
    task.eval(), loaded.eval()
    torch.testing.assert_close(loaded(batch), task(batch))


def test_warmup_cosine() -> None:
    values = [warmup_cosine(s, 10, 100) for s in range(101)]
    assert values[0] == pytest.approx(0.1) and values[9] == pytest.approx(1.0)
    assert max(values) == pytest.approx(1.0) and values[-1] == pytest.approx(0.0)
    assert all(a >= b for a, b in itertools.pairwise(values[10:]))
    assert warmup_cosine(100, 10, 100, min_ratio=0.1) == pytest.approx(0.1)


def test_heads() -> None:
    x = torch.tensor([[[1.0], [3.0], [100.0]], [[2.0], [4.0], [6.0]]])
    torch.testing.assert_close(masked_mean(x, torch.tensor([2, 3])), torch.tensor([[2.0], [4.0]]))
    torch.testing.assert_close(masked_mean(x, torch.tensor([0, 3])), torch.tensor([[0.0], [4.0]]))
    assert TokenClassifier(1, 3)(x).shape == (2, 3, 3)
    with pytest.raises(ValueError, match="pooling must be 'mean', 'max' or 'sum', got 'median'"):
        PoolingClassifier(4, 2, pooling="median")  # type: ignore[arg-type]


class ToyTokens(Adapter):
    """A toy adapter defined in the test: the batch's features, full attention."""

    out_dim = 4

    def forward(self, batch: dict) -> Tokens:
        return Tokens(batch["x"], None, lengths=torch.tensor([3, 4]))


def test_per_token_targets_with_ignore_index() -> None:
    task = ClassificationTask(ToyTokens(), Encoder(4, 1, 1, 8, dropout=0.0), TokenClassifier(4, 3), 3)
    batch = {"x": torch.randn(2, 5, 4), "label": torch.tensor([[0, 1, 2, -100, -100], [1, 1, 1, 1, -100]])}
    logits = task(batch)
    assert logits.shape == (2, 5, 3)
    keep = batch["label"] != -100
    expected = torch.nn.functional.cross_entropy(logits[keep], batch["label"][keep])
    task.log = lambda *args, **kwargs: None  # type: ignore[method-assign]
    torch.testing.assert_close(task._shared_step(batch, "val"), expected)


def test_ensemble_members_are_fresh_and_averaged_in_probability() -> None:
    torch.manual_seed(0)
    task = make_task(3).eval()
    assert len(task.members) == 3 and members(task)[0][0] is task.adapter
    parts = [nn.ModuleDict({"adapter": m.adapter, "encoder": m.encoder, "head": m.head}) for m in task.members]
    own, first, second = (dict(m.named_parameters()) for m in parts)
    assert own.keys() == first.keys()
    # every weight matrix is drawn afresh (norm scales and zero biases may coincide by design)
    for name, p in own.items():
        if p.dim() >= 2:
            assert not torch.equal(p, first[name]) and not torch.equal(first[name], second[name]), name
    batch = SpeechAdapter.example_batch(2)
    probs = torch.stack([task.members[i](batch).softmax(-1) for i in range(3)]).mean(0)
    torch.testing.assert_close(task(batch).exp(), probs)
    assert task(batch).exp().sum(-1).sub(1).abs().max() < 1e-5


def test_single_model_state_dict_is_unchanged_and_bad_sizes_fail() -> None:
    assert not any(k.startswith("ensemble") for k in make_task().state_dict())
    assert any(k.startswith("ensemble.members.0.encoder.") for k in make_task(2).state_dict())
    with pytest.raises(ValueError, match="size must be an int >= 2"):
        make_task(0)
    parts = (SpeechAdapter(d_model=16, channels=4), Encoder(16, 2, 1, 32), PoolingClassifier(16, 2))
    assert len(Ensemble(ClassificationTask(*parts, 2)).members) == 2
    with pytest.raises(TypeError, match="copies of a ClassificationTask"):  # the task, not its parts
        Ensemble(parts[1])  # type: ignore[arg-type]


def make_tagger(ensemble: int = 1, aux_weight: float = 0.5) -> ClassificationTask | Ensemble:
    from attnmm.adapters import TextAdapter

    task = ClassificationTask(
        TextAdapter(vocab_size=256, d_model=16, dropout=0.0),
        Encoder(16, 2, 1, 32, dropout=0.0),
        TokenClassifier(16, 17),
        num_classes=17,
        objective=MultiClass(target_key="tags", aux_heads={"xpos": TokenClassifier(16, 40)}, aux_weight=aux_weight),
    )
    return task if ensemble == 1 else Ensemble(task, ensemble)


def _tagged_batch() -> dict[str, torch.Tensor]:
    from attnmm.adapters import TextAdapter

    batch = TextAdapter.example_batch(3)
    batch["xpos"] = torch.randint(0, 40, batch["tags"].shape).masked_fill(batch["tags"] == -100, -100)
    return batch


@pytest.mark.parametrize("ensemble", [1, 2])
def test_aux_heads_add_their_weighted_loss_and_leave_predictions_alone(ensemble: int) -> None:
    torch.manual_seed(0)
    task, batch = make_tagger(ensemble, aux_weight=0.3), _tagged_batch()
    ce = torch.nn.functional.cross_entropy
    main, aux = [], []
    for member in getattr(task, "members", [task]):
        h, tokens, _ = member.encode(batch)
        head = member.head
        aux_head = member.objective.aux_heads["xpos"]
        main.append(ce(head(h, tokens).reshape(-1, 17), batch["tags"].reshape(-1)))
        aux.append(ce(aux_head(h, tokens).reshape(-1, 40), batch["xpos"].reshape(-1)))
    expected = torch.stack(main).mean() + 0.3 * torch.stack(aux).mean()
    loss = task.training_step(batch, 0)
    torch.testing.assert_close(loss, expected)
    loss.backward()
    heads = [objective.aux_heads for _, _, _, objective in members(task)]
    assert all(h["xpos"].linear.weight.grad.abs().sum() > 0 for h in heads)  # every member's head trains
    if ensemble == 2:  # each member has its own, freshly drawn head
        assert not torch.equal(heads[0]["xpos"].linear.weight, heads[1]["xpos"].linear.weight)
    first = getattr(task, "members", [task])[0]
    plain = ClassificationTask(first.adapter, first.encoder, first.head, 17, MultiClass(target_key="tags"))
    torch.testing.assert_close(first(batch), plain(batch))  # prediction ignores the aux heads
    task.eval()
    val_loss = ce(task(batch).reshape(-1, 17), batch["tags"].reshape(-1))
    torch.testing.assert_close(task.validation_step(batch, 0), val_loss)


def test_aux_heads_refuse_bad_settings() -> None:
    with pytest.raises(ValueError, match="keyed by the main target 'tags'"):
        ClassificationTask(
            SpeechAdapter(d_model=16), Encoder(16, 2, 1, 32), TokenClassifier(16, 17), 17,
            MultiClass(target_key="tags", aux_heads={"tags": TokenClassifier(16, 17)}),
        )
    with pytest.raises(ValueError, match="aux_weight must be a finite weight >= 0"):
        make_tagger(aux_weight=-1.0)
    batch = _tagged_batch()
    del batch["xpos"]
    with pytest.raises(ValueError, match=r"auxiliary heads \['xpos'\] need their targets in the batch"):
        make_tagger().training_step(batch, 0)


@pytest.mark.parametrize(
    ("clip", "precision", "fused"),
    [(None, "32-true", True), (1.0, "bf16-mixed", True), (1.0, "16-mixed", False), (None, "16-mixed", True)],
)
def test_optimizer_is_fused_unless_fp16_scaling_clips(clip, precision, fused: bool) -> None:
    from types import SimpleNamespace

    task = make_task()
    task._trainer = SimpleNamespace(gradient_clip_val=clip, precision=precision, estimated_stepping_batches=10)
    optimizer = task.configure_optimizers()["optimizer"]
    assert bool(optimizer.defaults["fused"]) is fused


def test_a_head_of_another_class_count_is_named() -> None:
    task = ClassificationTask(
        SpeechAdapter(d_model=16, channels=4), Encoder(16, 2, 1, 32), PoolingClassifier(16, 3), num_classes=2
    )
    batch = {**SpeechAdapter.example_batch(2), "label": torch.tensor([0, 1])}
    with pytest.raises(ValueError, match="gives 3 logits per prediction but the task has num_classes=2"):
        task.training_step(batch, 0)


def test_token_heads_are_the_aux_heads_dict_in_one_module() -> None:
    from attnmm.adapters import TextAdapter
    from attnmm.nn import TokenHeads

    torch.manual_seed(0)
    parts = (TextAdapter(vocab_size=256, d_model=16), Encoder(16, 2, 1, 32), TokenClassifier(16, 17))
    heads = TokenHeads(16, ["xpos", "deprel"], 40)
    task = ClassificationTask(*parts, 17, MultiClass(target_key="tags", aux_heads=heads))
    torch.manual_seed(0)
    parts = (TextAdapter(vocab_size=256, d_model=16), Encoder(16, 2, 1, 32), TokenClassifier(16, 17))
    as_dict = {"xpos": TokenClassifier(16, 40), "deprel": TokenClassifier(16, 40)}
    same = ClassificationTask(*parts, 17, MultiClass(target_key="tags", aux_heads=as_dict))
    for (k1, v1), (k2, v2) in zip(task.state_dict().items(), same.state_dict().items(), strict=True):
        assert k1 == k2 and torch.equal(v1, v2), k1
    with pytest.raises(ValueError, match="keys must be distinct"):
        TokenHeads(16, ["xpos", "xpos"], 40)


def test_targets_outside_num_classes_name_the_setting() -> None:
    task = make_task()  # two classes
    batch = SpeechAdapter.example_batch(2)
    batch["label"] = torch.tensor([1, 7])
    with pytest.raises(ValueError, match=r"classes 1\.\.7 but the model predicts 2 \(the task's num_classes\)"):
        task.validation_step(batch, 0)


# ------------------------------------------------------------------ multi-label


class ToyPooled(Adapter):
    """A toy adapter defined in the test: the batch's features (B, L, 4), every token real."""

    out_dim = 4

    def forward(self, batch: dict) -> Tokens:
        x = batch["x"]
        return Tokens(x, None, lengths=torch.full((x.size(0),), x.size(1)))


def make_multilabel(labels: int = 3, **kwargs) -> ClassificationTask:
    return ClassificationTask(
        ToyPooled(), Encoder(4, 1, 1, 8, dropout=0.0), PoolingClassifier(4, labels), labels, MultiLabel(), **kwargs
    )


def _multilabel_batches(n: int = 4, size: int = 6, labels: int = 3, seed: int = 0) -> list[dict]:
    g = torch.Generator().manual_seed(seed)
    return [
        {"x": torch.randn(size, 5, 4, generator=g), "label": torch.randint(0, 2, (size, labels), generator=g).float()}
        for _ in range(n)
    ]


def _reference_ap(scores: torch.Tensor, targets: torch.Tensor) -> float:
    """Average precision of each label, averaged over labels: for one label, the precision at the rank of
    each positive (scores sorted high to low, no ties), averaged over the positives."""
    per_label = []
    for c in range(scores.size(1)):
        order = torch.argsort(scores[:, c], descending=True)
        hits = targets[order, c]
        precision = hits.cumsum(0) / torch.arange(1, hits.numel() + 1)
        per_label.append(float(precision[hits == 1].sum() / hits.sum()))
    return sum(per_label) / len(per_label)


def test_multilabel_loss_is_binary_cross_entropy_over_the_known_labels() -> None:
    torch.manual_seed(0)
    task = make_multilabel()
    task.log = lambda *args, **kwargs: None  # type: ignore[method-assign]
    (batch,) = _multilabel_batches(1)
    bce = torch.nn.functional.binary_cross_entropy_with_logits
    torch.testing.assert_close(task._shared_step(batch, "val"), bce(task(batch), batch["label"]))
    batch["label"][0, 1] = batch["label"][3, 2] = float("nan")  # unknown labels are left out
    known = ~batch["label"].isnan()
    torch.testing.assert_close(task._shared_step(batch, "val"), bce(task(batch)[known], batch["label"][known]))
    assert task.predict_step(batch, 0).tolist() == (task(batch) > 0).long().tolist()  # 0/1 per label


def test_multilabel_average_precision_is_computed_over_the_whole_epoch(tmp_path) -> None:
    torch.manual_seed(0)
    task = make_multilabel()
    batches = _multilabel_batches(4)
    trainer = L.Trainer(logger=False, enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path)
    (res,) = trainer.validate(task, dataloaders=DataLoader(batches, batch_size=None), verbose=False)
    assert set(res) == {"val_loss", "val_acc", "val_ap"}
    task.eval()
    with torch.no_grad():
        scores = [task(b) for b in batches]
    whole = _reference_ap(torch.cat(scores), torch.cat([b["label"] for b in batches]))
    per_batch = sum(_reference_ap(s, b["label"]) for s, b in zip(scores, batches)) / len(batches)
    assert res["val_ap"] == pytest.approx(whole, abs=1e-6)
    assert abs(whole - per_batch) > 1e-3  # a mean of per-batch values would be another number
    right = (torch.cat(scores) > 0) == torch.cat([b["label"] for b in batches])  # decisions at probability 0.5
    assert res["val_acc"] == pytest.approx(float(right.float().mean()))


def test_multilabel_refuses_what_does_not_fit() -> None:
    with pytest.raises(TypeError, match="objective must be an attnmm.lightning Objective"):
        ClassificationTask(ToyPooled(), Encoder(4, 1, 1, 8), PoolingClassifier(4, 3), 3, "binary")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="Ensemble averages the members' class probabilities"):
        Ensemble(make_multilabel(), 2)
    with pytest.raises(TypeError, match="label_smoothing"):  # binary cross-entropy takes no label smoothing
        MultiLabel(label_smoothing=0.1)  # type: ignore[call-arg]
    (batch,) = _multilabel_batches(1)
    with pytest.raises(ValueError, match=r"holds one value per class \(6, 3\).*set task='multilabel'"):
        ClassificationTask(ToyPooled(), Encoder(4, 1, 1, 8), PoolingClassifier(4, 3), 3).validation_step(batch, 0)
    with pytest.raises(ValueError, match=r"needs batch\['label'\] of the logits' shape \(6, 3\).*task='multiclass'"):
        make_multilabel().validation_step({**batch, "label": torch.tensor([0, 1, 2, 0, 1, 2])}, 0)
    batch["label"][0, 0] = 2.0
    with pytest.raises(ValueError, match="needs 0/1 targets per label"):
        make_multilabel().validation_step(batch, 0)


def _fusion_task(weight: float) -> ClassificationTask:
    from attnmm.adapters import ImageAdapter, MultimodalAdapter
    from attnmm.masks import Grid
    from attnmm.nn import SegmentPoolingClassifier

    torch.manual_seed(0)
    adapter = MultimodalAdapter(
        {"audio": SpeechAdapter(d_model=16, mask=Window(4, 1), dropout=0.0, freq_mask=0, time_mask=0),
         "image": ImageAdapter(d_model=16, mask=Grid(7, 7, kernel=3))}, d_model=16, fusion="late")
    head = SegmentPoolingClassifier(16, 4, num_segments=2, gate=True)
    return ClassificationTask(adapter, Encoder(16, 2, 1, 32, dropout=0.0), head, 4, PerSegment(weight, 0.1))


def test_segment_loss_trains_each_modality_beside_the_fused_prediction() -> None:
    task = _fusion_task(0.7)
    batch = {**SpeechAdapter.example_batch(4), "image": torch.rand(4, 1, 28, 28),
             "audio_present": torch.tensor([True, True, False, True]),
             "image_present": torch.tensor([True, False, True, True]), "label": torch.tensor([0, 1, 2, 3])}
    ce = torch.nn.functional.cross_entropy
    h, tokens, _ = task.encode(batch)
    fused = ce(task.head(h, tokens), batch["label"], label_smoothing=0.1)
    logits, present = task.head.segment_logits(h, tokens)
    own = [ce(logits[b, k], batch["label"][b], label_smoothing=0.1)
           for b in range(4) for k in range(2) if present[b, k]]
    assert len(own) == 6  # two items lack one modality
    loss = task.training_step(batch, 0)
    torch.testing.assert_close(loss, fused + 0.7 * torch.stack(own).mean())
    task.eval()  # validation and prediction: the fused prediction alone
    torch.testing.assert_close(task.validation_step(batch, 0), ce(task(batch), batch["label"], label_smoothing=0.1))
    plain = _fusion_task(0.0)
    plain.load_state_dict(task.state_dict())
    plain.train()
    torch.testing.assert_close(plain.training_step(batch, 0), fused)


def test_gate_only_items_leave_the_segment_losses_and_reach_the_gate_alone() -> None:
    """Pairs marked gate_only (AVDigitsDataModule(gate_voices)): the fused loss counts them, through the gate
    alone; the segment losses leave them out; the encoder and the classifiers learn nothing from them."""
    task = _fusion_task(0.5)
    batch = {**SpeechAdapter.example_batch(4), "image": torch.rand(4, 1, 28, 28),
             "audio_present": torch.ones(4, dtype=torch.bool), "image_present": torch.ones(4, dtype=torch.bool),
             "label": torch.tensor([0, 1, 2, 3]), "gate_only": torch.tensor([False, True, False, True])}
    with torch.no_grad():
        task.head.gate.weight.normal_()
    ce = torch.nn.functional.cross_entropy
    h, tokens, _ = task.encode(batch)
    fused = ce(task.head(h, tokens), batch["label"], label_smoothing=0.1)
    logits, _ = task.head.segment_logits(h, tokens)
    own = [ce(logits[b, k], batch["label"][b], label_smoothing=0.1) for b in (0, 2) for k in range(2)]
    loss = task.training_step(batch, 0)
    torch.testing.assert_close(loss, fused + 0.5 * torch.stack(own).mean())
    # only the gate-only items: the gate learns, nothing else does
    only = {k: v[[1, 3]] for k, v in batch.items()}
    task.zero_grad()
    task.training_step(only, 0).backward()
    learnt = {n for n, p in task.named_parameters() if p.grad is not None and p.grad.abs().sum() > 0}
    assert learnt == {"head.gate.weight", "head.gate.bias"}
    plain = ClassificationTask(SpeechAdapter(d_model=16), Encoder(16, 2, 1, 32), PoolingClassifier(16, 4), 4)
    with pytest.raises(ValueError, match="takes no gate_only"):
        plain.training_step({**SpeechAdapter.example_batch(2), "gate_only": torch.tensor([True, False])}, 0)


def test_segment_loss_needs_a_head_that_predicts_per_segment() -> None:
    with pytest.raises(ValueError, match="has no segment_logits"):
        ClassificationTask(SpeechAdapter(d_model=16), Encoder(16, 2, 1, 32), PoolingClassifier(16, 4), 4,
                           PerSegment(1.0))
    with pytest.raises(ValueError, match="segment_loss_weight must be a finite weight"):
        _fusion_task(-1.0)


def test_a_checkpoint_of_the_task_held_aux_heads_loads_into_the_objective() -> None:
    task = make_tagger(ensemble=2)
    state = task.state_dict()
    old = {k.replace("objective.aux_heads.", "aux_heads."): v for k, v in state.items()}  # the former names
    assert "aux_heads.xpos.linear.weight" in old and "ensemble.members.0.aux_heads.xpos.linear.weight" in old
    checkpoint = {"state_dict": old}
    task.on_load_checkpoint(checkpoint)
    assert checkpoint["state_dict"].keys() == state.keys()


# ------------------------------------------------------------------ checkpoints of the former task


#: What the former task (adapter, encoder, head, num_classes and 15 options of its own) recorded under the
#: recipe CLI: its whole config, the ensemble and auxiliary heads among its arguments.
FORMER_CONFIG = {
    "adapter": {"class_path": "attnmm.adapters.TextAdapter", "init_args": {"vocab_size": 256, "d_model": 16,
                                                                          "dropout": 0.0}},
    "encoder": {"class_path": "attnmm.nn.Encoder", "init_args": {"d_model": 16, "num_heads": 2, "num_layers": 1,
                                                                "dim_feedforward": 32, "dropout": 0.0}},
    "head": {"class_path": "attnmm.nn.TokenClassifier", "init_args": {"d_model": 16, "num_classes": 17}},
    "num_classes": 17, "lr": 2e-3, "weight_decay": 0.05, "warmup_fraction": 0.1, "min_lr_ratio": 0.0,
    "label_smoothing": 0.1, "target_key": "tags", "optimizer": "adamw",
    "ensemble": {"class_path": "attnmm.nn.Ensemble", "init_args": {"size": 2}},
    "aux_heads": {"class_path": "attnmm.nn.TokenHeads", "init_args": {"d_model": 16, "keys": ["xpos"],
                                                                     "num_classes": 40}},
    "aux_weight": 1.0, "task": "multiclass", "init_from": None, "freeze_encoder_epochs": 0, "init_into": None,
    "segment_loss_weight": 0.0, "_instantiator": "lightning.pytorch.cli.instantiate_module",
}


def _former_state(model: ClassificationTask | Ensemble) -> dict[str, torch.Tensor]:
    """``model``'s state dict under the former task's names (it held the auxiliary heads itself)."""
    return {k.replace("objective.aux_heads.", "aux_heads."): v for k, v in model.state_dict().items()}


def _write(path, hparams: dict, state: dict) -> None:
    # as Lightning writes a checkpoint: the state dict and the recorded hyperparameters
    torch.save({"state_dict": state, "hyper_parameters": hparams, "pytorch-lightning_version": L.__version__}, path)


def test_a_former_ensemble_run_with_auxiliary_heads_loads_as_the_ensemble(tmp_path) -> None:
    from lightning.pytorch.cli import instantiate_module

    from attnmm.lightning import Optimization

    torch.manual_seed(0)
    task = instantiate_module(ClassificationTask, {
        **{k: FORMER_CONFIG[k] for k in ("adapter", "encoder", "head", "num_classes", "lr")},
        "objective": {"class_path": "attnmm.lightning.MultiClass", "init_args": {
            "label_smoothing": 0.1, "target_key": "tags", "aux_weight": 1.0, "aux_heads": FORMER_CONFIG["aux_heads"]}},
    })
    source = Ensemble(task, 2).eval()
    old = _former_state(source)
    assert "ensemble.members.0.aux_heads.xpos.linear.weight" in old and "encoder.norm.weight" in old
    _write(tmp_path / "former.ckpt", FORMER_CONFIG, old)
    loaded = ClassificationTask.load_from_checkpoint(tmp_path / "former.ckpt", weights_only=True).eval()
    assert isinstance(loaded, Ensemble) and loaded.size == 2
    objective = loaded.objective
    assert isinstance(objective, MultiClass) and list(objective.aux_heads) == ["xpos"]
    assert (objective.label_smoothing, objective.target_key, objective.aux_weight) == (0.1, "tags", 1.0)
    assert loaded.optimization == Optimization(weight_decay=0.05, warmup_fraction=0.1) and loaded.lr == 2e-3
    batch = _tagged_batch()
    torch.testing.assert_close(loaded(batch), source(batch))
    torch.testing.assert_close(loaded.validation_step(batch, 0), source.validation_step(batch, 0))
    assert Ensemble.load_from_checkpoint(tmp_path / "former.ckpt", weights_only=True).size == 2


def test_a_former_multilabel_task_built_in_python_loads_with_its_parts_given(tmp_path) -> None:
    torch.manual_seed(0)
    source = make_multilabel().eval()
    hparams = {"head": None, "num_classes": 3, "lr": 1e-3, "weight_decay": 0.0, "warmup_fraction": 0.05,
               "min_lr_ratio": 0.1, "label_smoothing": 0.0, "target_key": "label", "optimizer": "adam",
               "aux_weight": 0.5, "task": "multilabel", "init_from": "x.ckpt", "freeze_encoder_epochs": 2,
               "init_into": None, "segment_loss_weight": 0.0}  # the modules built in Python are not recorded
    _write(tmp_path / "former.ckpt", hparams, _former_state(source))
    with pytest.warns(UserWarning, match="the Transfer callback's options now"):
        loaded = ClassificationTask.load_from_checkpoint(
            tmp_path / "former.ckpt", weights_only=True, adapter=ToyPooled(), encoder=Encoder(4, 1, 1, 8, dropout=0.0),
            head=PoolingClassifier(4, 3))
    assert isinstance(loaded.objective, MultiLabel) and loaded.optimization.kind == "adam"
    assert loaded.optimization.min_lr_ratio == 0.1
    (batch,) = _multilabel_batches(1)
    torch.testing.assert_close(loaded.eval()(batch), source(batch))


@pytest.mark.parametrize(("change", "refused"), [
    ({"task": "multilabel"}, "aux_heads="),  # binary labels take no auxiliary heads
    ({"segment_loss_weight": 0.5}, "aux_heads="),  # nor do the segments' own losses
    ({"task": "ranking"}, "task='ranking'"),
])
def test_former_options_no_objective_takes_are_named(tmp_path, change: dict, refused: str) -> None:
    _write(tmp_path / "former.ckpt", {**FORMER_CONFIG, **change}, {})
    with pytest.raises(ValueError, match=rf"checkpoint's task option\(s\) .*{re.escape(refused)}.* fit no objective"):
        ClassificationTask.load_from_checkpoint(tmp_path / "former.ckpt", weights_only=True)
    state = _former_state(make_tagger())  # auxiliary heads built in Python: not in the hyperparameters
    _write(tmp_path / "python.ckpt", {k: v for k, v in FORMER_CONFIG.items() if k != "_instantiator"
                                      and not isinstance(v, dict)}, state)
    with pytest.raises(ValueError, match=r"pass them again, as load_from_checkpoint\(path, objective=MultiClass"):
        ClassificationTask.load_from_checkpoint(tmp_path / "python.ckpt", weights_only=True)
