"""Attention maps of briefly trained recipe models, for the gallery (used by docs/make_figures.py).

Each model is the one its recipe's YAML config builds, through the recipe CLI, trained for a few
deterministic steps (seed 0, one thread): on the real data under ``$ATTNMM_DATA`` when it is there,
else on generated data of the same shape, so the docs build never downloads anything. The figures
say which data they saw. A few steps do not make a good model; the maps show the mask at work and
the first structure the heads pick up, not the recipe's final result (see docs/results.md).
"""

from __future__ import annotations

import importlib.util
import math
import os
from pathlib import Path
from typing import Any

import lightning as L
import torch
from matplotlib.figure import Figure
from torch import Tensor
from torch.utils.data import DataLoader

from attnmm.data import collate_audio
from attnmm.lightning import ClassificationTask, RecipeCLI
from attnmm.viz import plot_attention, plot_mask

RECIPES = Path(__file__).resolve().parents[1] / "recipes"


def _data_root() -> Path | None:
    value = os.environ.get("ATTNMM_DATA", "").strip()
    return Path(value).expanduser() if value else None


def _recipe_model(recipe: str, overrides: list[str]) -> RecipeCLI:
    """The model and data of ``recipes/<recipe>.py``, built by its own CLI (config and links; nothing is trained)."""
    spec = importlib.util.spec_from_file_location(f"{recipe}_recipe", RECIPES / f"{recipe}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main([f"--torch_threads={torch.get_num_threads()}", *overrides], run=False)


def _train(task: ClassificationTask, data: L.LightningDataModule | DataLoader[Any], steps: int) -> None:
    """``steps`` optimiser steps on a DataModule (its augmentation hooks included) or a loader."""
    trainer = L.Trainer(
        max_steps=steps, accelerator="cpu", logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0,
    )
    if isinstance(data, L.LightningDataModule):
        trainer.fit(task, datamodule=data)
    else:
        trainer.fit(task, train_dataloaders=data)
    task.eval()


def _weights(task: ClassificationTask, batch: Any) -> tuple[Any, list[Tensor]]:
    """The tokens of ``batch`` and each layer's dense weights (B, H, L, S)."""
    with torch.no_grad():
        _, tokens, weights = task.encode(batch, return_weights=True)
    B, L_ = tokens.x.shape[:2]
    return tokens, [w.to_dense(L_, L_, B) for w in weights]


# ------------------------------------------------------------------------------------- speech


def _tones(num: int, seed: int) -> list[tuple[Tensor, int]]:
    """Generated stand-in for spoken digits: 0.5-1 s tones at 8 kHz, class k at 300 + 250 k Hz."""
    g = torch.Generator().manual_seed(seed)
    items = []
    for _ in range(num):
        label = int(torch.randint(0, 10, (), generator=g))
        t = torch.arange(int(torch.randint(4000, 8001, (), generator=g))) / 8000
        wave = torch.sin(2 * math.pi * (300 + 250 * label) * t + 6.3 * float(torch.rand((), generator=g)))
        items.append((0.5 * wave + 0.1 * torch.randn(t.numel(), generator=g), label))
    return items


def speech(steps: int = 60, use_data: bool = True) -> Figure:
    """recipes/speech_truncated.py's model (Window(16, 4) & Padding): mask, first and last layer."""
    L.seed_everything(0, verbose=False)
    root = _data_root()
    real = use_data and root is not None and (root / "fsdd" / "recordings").is_dir()
    cli = _recipe_model("speech_truncated", [f"--data.root={root}"] if real else [])
    task = cli.model
    if real:
        train: Any = cli.datamodule
        source = "FSDD spoken digits"
    else:
        train = DataLoader(_tones(512, 0), batch_size=32, shuffle=True, collate_fn=collate_audio)
        val = DataLoader(_tones(4, 1), batch_size=4, collate_fn=collate_audio)
        source = "generated tones (no FSDD under $ATTNMM_DATA)"
    _train(task, train, steps)
    batch = next(iter(cli.datamodule.val_dataloader() if real else val))
    tokens, dense = _weights(task, batch)
    b = int(tokens.lengths.argmax())  # the longest utterance of the batch
    n = int(tokens.lengths[b])
    fig = Figure(figsize=(13.5, 4.4), layout="constrained")
    axes = fig.subplots(1, 3)
    plot_mask(tokens.mask, n, n, b=b, ax=axes[0], title="mask: Padding & Window(16, 4)")
    plot_attention(dense[0][b, 0, :n, :n], ax=axes[1], title="layer 1, head 1")
    plot_attention(dense[-1][b, 0, :n, :n], ax=axes[2], title=f"layer {len(dense)}, head 1")
    fig.suptitle(f"speech recipe after {steps} steps on {source}: one utterance, {n} frames of 40 ms")
    return fig


# -------------------------------------------------------------------------------------- image


def _bars(num: int, seed: int) -> list[tuple[Tensor, Tensor]]:
    """Generated stand-in for digits: 28 x 28 images of a bar in one of 10 positions/orientations."""
    g = torch.Generator().manual_seed(seed)
    items = []
    for _ in range(num):
        label = int(torch.randint(0, 10, (), generator=g))
        image = 0.1 * torch.rand(1, 28, 28, generator=g)
        pos = 4 + 4 * (label % 5)
        if label < 5:
            image[0, pos : pos + 3, 2:26] = 1.0
        else:
            image[0, 2:26, pos : pos + 3] = 1.0
        items.append((image, torch.tensor(label)))
    return items


def _stack(items: list[tuple[Tensor, Tensor]]) -> dict[str, Tensor]:
    return {"image": torch.stack([x for x, _ in items]), "label": torch.stack([y for _, y in items])}


def image(steps: int = 40, use_data: bool = True) -> Figure:
    """recipes/image_patches.py's model (Grid(7, 7, kernel=3)): the digit, a layer map, one patch's weights."""
    L.seed_everything(0, verbose=False)
    root = _data_root()
    real = use_data and root is not None and (root / "MNIST" / "raw").is_dir()
    cli = _recipe_model("image_patches", [f"--data.init_args.root={root}"] if real else [])
    task = cli.model
    if real:
        train: Any = cli.datamodule
        source = "MNIST"
    else:
        train = DataLoader(_bars(1024, 0), batch_size=64, shuffle=True, collate_fn=_stack)
        val = DataLoader(_bars(4, 1), batch_size=4, collate_fn=_stack)
        source = "generated bars (no MNIST under $ATTNMM_DATA)"
    _train(task, train, steps)
    batch = next(iter(cli.datamodule.val_dataloader() if real else val))
    tokens, dense = _weights(task, batch)
    centre = 3 * 7 + 3  # patch (3, 3) of the 7 x 7 grid
    fig = Figure(figsize=(14, 3.8), layout="constrained")
    axes = fig.subplots(1, 4)
    axes[0].imshow(batch["image"][0, 0].float(), cmap="gray")
    axes[0].set_title(f"input (label {int(batch['label'][0])})", fontsize="medium")
    axes[0].set_axis_off()
    plot_mask(tokens.mask, 49, 49, ax=axes[1], title=f"mask: {tokens.mask!r}")
    plot_attention(dense[0][0, 0], ax=axes[2], title="layer 1, head 1: 49 x 49 patches")
    grid = dense[0][0, :, centre].mean(0).view(7, 7)  # (7, 7): the centre patch's weights, mean over heads
    shown = axes[3].imshow(grid, cmap="viridis")
    axes[3].set_title("layer 1: patch (3, 3) attends (mean of heads)", fontsize="medium")
    fig.colorbar(shown, ax=axes[3])
    fig.suptitle(f"image recipe after {steps} steps on {source}")
    return fig


# --------------------------------------------------------------------------------------- text

WORDS = ["to ", "be ", "or ", "not ", "that ", "is ", "the ", "question, ", "whether ", "tis ", "nobler "]


def _words(num: int, length: int, seed: int) -> tuple[list[dict[str, Tensor]], str]:
    """Generated stand-in for Tiny Shakespeare: windows of random words, as character ids."""
    g = torch.Generator().manual_seed(seed)
    text = "".join(WORDS[int(i)] for i in torch.randint(0, len(WORDS), (num * length // 3,), generator=g))
    chars = sorted(set(text))
    ids = torch.tensor([2 + chars.index(c) for c in text])  # 0 pads, 1 is unknown, as in the recipe's vocabulary
    starts = torch.randint(0, ids.numel() - length - 1, (num,), generator=g)
    items = [{"tokens": ids[s : s + length], "targets": ids[s + 1 : s + length + 1]} for s in starts.tolist()]
    return items, "".join(chars)


def text(steps: int = 50, use_data: bool = True) -> Figure:
    """recipes/text_lm.py's model (Causal, rotary positions): weights over the first 40 characters."""
    L.seed_everything(0, verbose=False)
    root = _data_root()
    real = use_data and root is not None and (root / "tinyshakespeare" / "input.txt").is_file()
    # the recipe's model; shorter windows and smaller batches (and fp32) keep these steps to seconds
    small = ["--trainer.precision=32-true", "--data.block_size=64", "--data.batch_size=16", "--data.eval_stride=64"]
    cli = _recipe_model("text_lm", small + ([f"--data.root={root}"] if real else []))
    task = cli.model
    if real:
        _train(task, cli.datamodule, steps)
        batch = next(iter(cli.datamodule.val_dataloader()))
        decode = cli.datamodule.decode
        source = "Tiny Shakespeare"
    else:
        items, chars = _words(512, 64, 0)
        _train(task, DataLoader(items, batch_size=16, shuffle=True, collate_fn=_stack_text), steps)
        batch = _stack_text(_words(1, 64, 1)[0])

        def decode(ids: Tensor) -> str:
            return "".join(chars[i - 2] if i >= 2 else "?" for i in ids.tolist())

        source = "generated words (no Tiny Shakespeare under $ATTNMM_DATA)"
    _, dense = _weights(task, batch)
    n = 40
    labels = [c if c.strip() else "\u2423" for c in decode(batch["tokens"][0, :n])]  # a visible space
    fig = Figure(figsize=(16, 5.6), layout="constrained")
    panels = [(0, 0), (0, 1), (len(dense) - 1, 0)]
    for ax, (layer, head) in zip(fig.subplots(1, 3), panels, strict=True):
        plot_attention(dense[layer][0, head, :n, :n], ax=ax, title=f"layer {layer + 1}, head {head + 1}")
        ax.set_xticks(range(n), labels, fontsize=6, family="monospace")
        ax.set_yticks(range(n), labels, fontsize=6, family="monospace")
    fig.suptitle(f"text LM recipe (Causal) after {steps} steps on {source}: the first {n} characters of a window")
    return fig


def _stack_text(items: list[dict[str, Tensor]]) -> dict[str, Tensor]:
    return {k: torch.stack([it[k] for it in items]) for k in ("tokens", "targets")}
