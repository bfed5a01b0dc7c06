"""The time-series example: the adapter keeps the adapter contract and its recipe trains end to end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "timeseries"
sys.path.insert(0, str(EXAMPLE))

from series_adapter import TimeSeriesAdapter  # noqa: E402
from series_data import WaveShapesDataModule, collate, make_series  # noqa: E402

from attnmm.adapters import get_adapter  # noqa: E402
from attnmm.masks import Padding, Window  # noqa: E402


def test_registered_by_name() -> None:
    assert get_adapter("timeseries") is TimeSeriesAdapter


def test_tokens_and_mask() -> None:
    adapter = TimeSeriesAdapter(patch_len=8, d_model=16, mask=Window(2, 1))
    batch = collate(make_series(3, 10, 40, noise=0.1, seed=0))
    tokens = adapter(batch)
    B, T, _ = batch["series"].shape
    L = -(-T // 8)
    assert tokens.x.shape == (B, L, 16)
    assert torch.equal(tokens.lengths, (batch["lengths"] + 7) // 8)
    expected = (Padding(tokens.lengths) & Window(2, 1)).dense(L, L, B)
    assert torch.equal(tokens.mask.dense(L, L, B), expected)
    assert tokens.mask.structure.kind == "band"  # Window & Padding keeps its band: the band backend runs it


def test_padding_does_not_change_real_patches() -> None:
    adapter = TimeSeriesAdapter(patch_len=4, d_model=8).eval()
    batch = collate(make_series(2, 16, 16, noise=0.1, seed=1))
    longer = dict(batch, series=torch.nn.functional.pad(batch["series"], (0, 0, 0, 8)))
    assert torch.allclose(adapter(batch).x, adapter(longer).x[:, :4])


def test_wrong_channels_say_what_to_do() -> None:
    with pytest.raises(ValueError, match=r"series must be \(B, T, C\) with C = in_channels = 2"):
        TimeSeriesAdapter(in_channels=2)(TimeSeriesAdapter.example_batch(2))


def test_data_is_reproducible() -> None:
    a, b = WaveShapesDataModule(num_train=4, seed=3), WaveShapesDataModule(num_train=4, seed=3)
    a.setup(), b.setup()
    assert all(torch.equal(x, y) and la == lb for (x, la), (y, lb) in zip(a.splits["train"], b.splits["train"]))


def test_recipe_fast_dev_run(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(EXAMPLE / "train.py"), "fit", "--trainer.fast_dev_run=true"],
        cwd=tmp_path, capture_output=True, text=True, timeout=600,
        env={**os.environ, "MPLBACKEND": "Agg", "PYTHONWARNINGS": "ignore"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    # the run folder is named after the config
    metrics = json.loads((tmp_path / "runs" / "series" / "version_0" / "metrics.json").read_text())
    assert set(metrics) == {"test_acc", "test_loss"}
