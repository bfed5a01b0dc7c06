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
