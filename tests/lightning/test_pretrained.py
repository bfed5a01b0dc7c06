from __future__ import annotations

from pathlib import Path

import lightning as L
import pytest
import torch
from torch.utils.data import DataLoader

import attnmm.lightning.pretrained as pretrained
from attnmm.adapters import SpeechAdapter
from attnmm.lightning import ClassificationTask, Ensemble, Transfer
from attnmm.lightning.pretrained import backbone_state, export_backbone, load_backbone, resolve_backbone
from attnmm.nn import Encoder, PoolingClassifier


def task(
    num_classes: int = 12, d_model: int = 16, layers: int = 1, sample_rate: int = 8000, **kwargs
) -> ClassificationTask:
    torch.manual_seed(num_classes + d_model + layers)
    return ClassificationTask(
        SpeechAdapter(d_model=d_model, channels=4, sample_rate=sample_rate), Encoder(d_model, 2, layers, 32),
        PoolingClassifier(d_model, num_classes), num_classes, **kwargs,
    )


def save(model: ClassificationTask, path: Path) -> Path:
    torch.save({"state_dict": model.state_dict(), "hyper_parameters": {"adapter": {"d_model": 16}}}, path)
    return path


def _equal(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))


def test_loads_adapter_and_encoder_and_keeps_the_new_head(tmp_path: Path) -> None:
    source = task(12)
    path = save(source, tmp_path / "source.ckpt")
    target = task(10)
    head = {k: v.clone() for k, v in target.head.state_dict().items()}
    names = target.load_backbone(str(path))
    assert names and all(n.startswith(("adapter.", "encoder.")) for n in names)
    assert _equal(target.adapter, source.adapter) and _equal(target.encoder, source.encoder)
    assert all(torch.equal(head[k], v) for k, v in target.head.state_dict().items())  # 10 classes, fresh
    batch = SpeechAdapter.example_batch(2)
    assert target.eval()(batch).shape == (2, 10)
    assert set(backbone_state(path)) == set(names)


def test_a_mismatch_names_the_parameters(tmp_path: Path) -> None:
    path = save(task(12, d_model=16), tmp_path / "source.ckpt")
    shapes = r"19 of another shape.*adapter\.proj\.weight \(16, 36\) vs \(24, 36\)"
    with pytest.raises(ValueError, match=shapes) as info:
        task(10, d_model=24).load_backbone(str(path))
    assert "Build the adapter and encoder with the options of the model that was saved" in str(info.value)
    with pytest.raises(ValueError, match=r"missing from the file: encoder\.layers\.1\.") as info:
        task(10, layers=2).load_backbone(str(path))
    deeper = save(task(12, layers=2), tmp_path / "deeper.ckpt")
    with pytest.raises(ValueError, match=r"not in the model: encoder\.layers\.1\."):
        task(10, layers=1).load_backbone(str(deeper))
    # the mel filterbank of another sample rate is another shape: the rates must agree
    with pytest.raises(ValueError, match=r"adapter\.melspec\."):
        task(10, sample_rate=16000).load_backbone(str(path))
    # nothing was loaded by a refused call
    fresh = task(10, d_model=24)
    before = {k: v.clone() for k, v in fresh.state_dict().items()}
    with pytest.raises(ValueError):
        fresh.load_backbone(str(path))
    assert all(torch.equal(before[k], v) for k, v in fresh.state_dict().items())


def test_files_names_and_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(FileNotFoundError, match="neither a file .* nor the name of a backbone shipped"):
        resolve_backbone("no_such_backbone")
    (tmp_path / "junk.pt").write_text("not a checkpoint")
    with pytest.raises(RuntimeError, match="could not read .*junk.pt as a checkpoint"):
        backbone_state(tmp_path / "junk.pt")
    torch.save({"state_dict": {"head.linear.weight": torch.zeros(2, 2)}}, tmp_path / "headless.pt")
    with pytest.raises(ValueError, match="holds no adapter.* or encoder.* weights"):
        backbone_state(tmp_path / "headless.pt")
    # a shipped backbone is found by its name from any working directory
    shipped = tmp_path / "shipped"
    shipped.mkdir()
    monkeypatch.setattr(pretrained, "SHIPPED", shipped)
    source = task(12)
    export_backbone(save(source, tmp_path / "source.ckpt"), shipped / "tiny.pt")
    assert pretrained.shipped_backbones() == ["tiny"]
    monkeypatch.chdir(tmp_path / "shipped")
    assert resolve_backbone("tiny") == shipped / "tiny.pt"
    target = task(10)
    target.load_backbone("tiny")
    assert _equal(target.encoder, source.encoder)


def test_export_keeps_the_backbone_only(tmp_path: Path) -> None:
    source = task(12)
    ckpt = save(source, tmp_path / "source.ckpt")
    full, half = export_backbone(ckpt, tmp_path / "full.pt"), export_backbone(ckpt, tmp_path / "half.pt", torch.float16)
    data = torch.load(full, weights_only=True)
    assert set(data) == {"state_dict", "hyper_parameters"} and data["hyper_parameters"] == {"adapter": {"d_model": 16}}
    assert not any(k.startswith("head.") for k in data["state_dict"])
    assert half.stat().st_size < 0.7 * full.stat().st_size
    target = task(10)
    load_backbone(target, half)  # float16 weights, loaded into the float32 model
    assert target.encoder.layers[0].ffn[0].weight.dtype == torch.float32
    torch.testing.assert_close(target.encoder.layers[0].ffn[0].weight, source.encoder.layers[0].ffn[0].weight,
                               atol=1e-3, rtol=1e-3)
    pretrained.main([str(ckpt), str(tmp_path / "cli.pt"), "--half"])
    assert torch.load(tmp_path / "cli.pt", weights_only=True)["state_dict"].keys() == data["state_dict"].keys()


def test_options_are_checked() -> None:
    with pytest.raises(ValueError, match="freeze_encoder_epochs=2 freezes loaded weights, but init_from is None"):
        Transfer(freeze_encoder_epochs=2)
    with pytest.raises(ValueError, match="init_from loads one backbone"):
        Transfer(init_from="x.ckpt").setup(None, Ensemble(task(10), 2), "fit")  # type: ignore[arg-type]


class _Record(L.Callback):
    """The adapter's, encoder's and head's weights at the end of each training epoch."""

    def __init__(self) -> None:
        self.states: list[dict[str, dict[str, torch.Tensor]]] = []

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.states.append({
            part: {k: v.clone() for k, v in getattr(pl_module, part).state_dict().items()}
            for part in ("adapter", "encoder", "head")
        })


def _changed(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return any(not torch.equal(a[k], b[k]) for k in a if a[k].is_floating_point())


def test_fit_starts_from_the_backbone_and_freezes_it_first(tmp_path: Path) -> None:
    source = task(12)
    path = save(source, tmp_path / "source.ckpt")
    batches = [dict(SpeechAdapter.example_batch(4), label=torch.tensor([0, 1, 2, 3])) for _ in range(3)]
    loader = DataLoader(batches, batch_size=None)
    model = task(10, lr=1e-2)
    record, transfer = _Record(), Transfer(init_from=str(path), freeze_encoder_epochs=1)
    trainer = L.Trainer(max_epochs=2, callbacks=[transfer, record], logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path)
    trainer.fit(model, loader)
    loaded = {part: getattr(source, part).state_dict() for part in ("adapter", "encoder")}
    first, second = record.states
    # epoch 0: the backbone is the file's, untouched; only the new head learns
    assert not _changed(first["adapter"], loaded["adapter"]) and not _changed(first["encoder"], loaded["encoder"])
    assert _changed(second["head"], first["head"])
    # epoch 1: everything learns
    assert _changed(second["encoder"], first["encoder"]) and _changed(second["adapter"], first["adapter"])
    # a second fit (or a resume, whose checkpoint is restored after setup) does not load the file again
    assert transfer.loaded


def test_only_fit_reads_init_from(tmp_path: Path) -> None:
    model = task(10)
    transfer = Transfer(init_from=str(tmp_path / "gone.ckpt"))  # e.g. a config run where the file is not
    batches = [dict(SpeechAdapter.example_batch(2), label=torch.tensor([0, 1]))]
    trainer = L.Trainer(logger=False, enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path,
                        callbacks=[transfer])
    trainer.validate(model, DataLoader(batches, batch_size=None), verbose=False)
    trainer = L.Trainer(max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, default_root_dir=tmp_path, callbacks=[transfer])
    with pytest.raises(FileNotFoundError, match="gone.ckpt"):
        trainer.fit(model, DataLoader(batches, batch_size=None))


def _tower_task(**kwargs) -> ClassificationTask:
    from attnmm.adapters import EncodedAdapter, ImageAdapter, MultimodalAdapter
    from attnmm.masks import Grid

    torch.manual_seed(1)
    tower = EncodedAdapter(SpeechAdapter(d_model=16, channels=4), Encoder(16, 2, 1, 32))
    adapter = MultimodalAdapter({"audio": tower, "image": ImageAdapter(d_model=8, mask=Grid(7, 7, kernel=3))},
                                d_model=8, fusion="late")
    from attnmm.nn import SegmentPoolingClassifier

    return ClassificationTask(adapter, Encoder(8, 2, 1, 16), SegmentPoolingClassifier(8, 4, num_segments=2), 4,
                              **kwargs)


def test_init_into_loads_a_backbone_into_one_modalitys_tower(tmp_path: Path) -> None:
    source = task(12)  # a speech task: SpeechAdapter(16, channels=4) + Encoder(16, 2, 1, 32)
    path = save(source, tmp_path / "speech.ckpt")
    model = _tower_task(lr=1e-2)
    transfer = Transfer(init_from=str(path), init_into="adapter.adapters.audio", freeze_encoder_epochs=1)
    before = {k: v.clone() for k, v in model.state_dict().items() if not k.startswith("adapter.adapters.audio.")}
    batches = [dict(SpeechAdapter.example_batch(4), image=torch.rand(4, 1, 28, 28), label=torch.tensor([0, 1, 2, 3]))]
    record = _Record()
    trainer = L.Trainer(max_epochs=1, callbacks=[transfer, record], logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path)
    transfer.setup(trainer, model, "fit")
    tower = model.adapter.adapters["audio"]
    assert _equal(tower.adapter, source.adapter) and _equal(tower.encoder, source.encoder)
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())  # nothing else loaded
    trainer.fit(model, DataLoader(batches, batch_size=None))
    # the first epoch freezes the tower only: it keeps the backbone, the shared encoder learns
    assert _equal(tower.encoder, source.encoder) and _equal(tower.adapter, source.adapter)
    assert not torch.equal(model.encoder.layers[0].attn.q_proj.weight, before["encoder.layers.0.attn.q_proj.weight"])
    with pytest.raises(ValueError, match="init_into='adapter.adapters.speech' is not a part of the model"):
        Transfer(init_from=str(path), init_into="adapter.adapters.speech").setup(trainer, _tower_task(), "fit")
    with pytest.raises(ValueError, match="init_from is None"):
        Transfer(init_into="adapter.adapters.audio")


def test_an_ensemble_runs_backbone_is_its_first_models(tmp_path) -> None:
    ensemble = Ensemble(task(10), 2)
    config = {"adapter": {"d_model": 16}, "encoder": {"d_model": 16}}
    hparams = {"model": {"class_path": "attnmm.lightning.ClassificationTask", "init_args": config}, "size": 2}
    torch.save({"state_dict": ensemble.state_dict(), "hyper_parameters": hparams}, tmp_path / "ensemble.ckpt")
    data = torch.load(export_backbone(tmp_path / "ensemble.ckpt", tmp_path / "b.pt"), weights_only=True)
    assert data["hyper_parameters"] == config  # the task's own configs, under the ensemble's model
    assert set(data["state_dict"]) == set(backbone_state(save(ensemble.members[0], tmp_path / "first.ckpt")))
    target = task(3)
    load_backbone(target, tmp_path / "b.pt")
    torch.testing.assert_close(target.encoder.state_dict(), ensemble.encoder.state_dict())
