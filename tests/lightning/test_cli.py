from __future__ import annotations

import pytest
import torch.distributed as dist
import yaml
from lightning.pytorch.demos.boring_classes import BoringDataModule, BoringModel

from attnmm.lightning import RecipeCLI


def test_cli_tears_down_the_process_group(tmp_path) -> None:
    # a process group left to interpreter teardown can abort the process ("terminate called
    # without an active exception") after a successful DDP run; the CLI destroys it itself
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        args = ["fit", "--trainer.fast_dev_run=true", "--trainer.accelerator=cpu",
                f"--trainer.default_root_dir={tmp_path}", "--trainer.logger=false"]
        RecipeCLI(BoringModel, BoringDataModule, args=args, save_config_callback=None)
        assert not dist.is_initialized()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


class _Data(BoringDataModule):
    num_classes = 3


class _Model(BoringModel):
    def __init__(self, num_classes: int = 2, width: int = 8, out_width: int = 8) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.num_classes, self.width, self.out_width = num_classes, width, out_width


def _links() -> tuple:
    from attnmm.lightning.cli import Link

    return Link("data.num_classes", "model.num_classes", apply_on="instantiate"), Link("model.width", "model.out_width")


@pytest.mark.parametrize("subclass_mode", [False, True])
def test_links_fill_in_the_targets(tmp_path, subclass_mode: bool) -> None:
    config = tmp_path / "toy.yaml"
    config.write_text("model:\n  width: 5\n" if not subclass_mode else "model:\n  init_args:\n    width: 5\n")
    cli = RecipeCLI(
        _Model, _Data, subclass_mode_model=subclass_mode, default_model=_Model if subclass_mode else None,
        config=config, links=_links(), run=False, args=[],
    )
    assert (cli.model.num_classes, cli.model.width, cli.model.out_width) == (3, 5, 5)  # from the data; linked
    assert cli.model.hparams["num_classes"] == 3 and cli.model.hparams["out_width"] == 5


def test_print_config_shows_linked_values(tmp_path, capsys) -> None:
    args = ["fit", "--print_config", "--model.width=6", f"--trainer.default_root_dir={tmp_path}"]
    with pytest.raises(SystemExit) as exit_info:
        RecipeCLI(_Model, _Data, links=_links(), args=args)
    assert exit_info.value.code == 0
    model = yaml.safe_load(capsys.readouterr().out)["model"]
    assert model == {"num_classes": 3, "width": 6, "out_width": 6}


def test_cli_builds_on_public_api_only() -> None:
    """Every name RecipeCLI takes from Lightning or jsonargparse is public (no leading underscore), and it
    reaches into no private attribute of theirs."""
    import ast
    from pathlib import Path

    import attnmm.lightning.cli as cli_module

    tree = ast.parse(Path(cli_module.__file__).read_text())
    imported = [
        alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
        and (node.module or "").split(".")[0] in ("lightning", "jsonargparse") for alias in node.names
    ]
    assert imported and not [n for n in imported if n.startswith("_")]
    own = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.ClassDef)}
    private = {
        node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute) and node.attr.startswith("_")
        and not node.attr.startswith("__") and node.attr not in own
    }
    assert private <= {"_links", "_default_classes"}, private  # RecipeCLI's own attributes


class _Scored(BoringModel):
    def validation_step(self, batch, batch_idx):
        loss = super().validation_step(batch, batch_idx)["x"]
        self.log_dict({"val_acc": -loss, "val_loss": loss})

    def test_step(self, batch, batch_idx):
        self.log("test_acc", 0.5)


def _fit(tmp_path, *args: str) -> tuple[RecipeCLI, str]:
    import contextlib
    import io

    config = tmp_path / "my_variant.yaml"
    config.write_text("trainer:\n  max_epochs: 1\n  limit_train_batches: 2\n  limit_val_batches: 2\n"
                      "  limit_test_batches: 2\n  enable_progress_bar: false\n")
    out = io.StringIO()
    with contextlib.chdir(tmp_path), contextlib.redirect_stdout(out):
        cli = RecipeCLI(_Scored, BoringDataModule, args=["fit", f"--config={config}", *args])
    return cli, out.getvalue()


def test_run_directory_and_loggers_follow_the_config_name(tmp_path) -> None:
    cli, _ = _fit(tmp_path)
    trainer = cli.trainer
    assert trainer.default_root_dir == "runs/my_variant"
    assert [type(lg).__name__ for lg in trainer.loggers] == ["TensorBoardLogger", "CSVLogger"]
    assert {lg.save_dir for lg in trainer.loggers} == {"runs/my_variant"}
    assert (tmp_path / "runs" / "my_variant" / "version_0" / "metrics.json").is_file()
    # the trainer defaults said once: a best checkpoint by val_acc beside last.ckpt, the random state kept
    assert sorted(p.name.split("-")[0] for p in (tmp_path / "runs/my_variant/version_0/checkpoints").iterdir()) == [
        "best", "last.ckpt"]
    assert any(type(cb).__name__ == "RandomState" for cb in trainer.callbacks)


def test_test_after_fit_false_writes_validation_metrics_only(tmp_path) -> None:
    import json

    cli, printed = _fit(tmp_path, "--test_after_fit=false", "--checkpoint.monitor=val_loss", "--checkpoint.mode=min")
    metrics = json.loads((tmp_path / "runs/my_variant/version_0/metrics.json").read_text())
    assert set(metrics) == {"val_acc", "val_loss"}
    assert "test" not in printed.lower()
    assert not any(k.startswith("test") for k in cli.trainer.callback_metrics)
    (best,) = (tmp_path / "runs/my_variant/version_0/checkpoints").glob("best-*")
    assert best.name.startswith("best-epoch=0-val_loss=")  # the name follows the monitored metric
