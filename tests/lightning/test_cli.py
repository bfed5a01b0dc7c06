from __future__ import annotations

import torch.distributed as dist
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
