"""Tiny Shakespeare DataModule: positional splits, training-only vocabulary, windows and targets."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from attnmm.data import ShakespeareDataModule
from attnmm.data.shakespeare import CharWindows, split_text


def test_split_is_by_position() -> None:
    train, val, test = split_text("x" * 90 + "v" * 5 + "t" * 5)
    assert (train, val, test) == ("x" * 90, "v" * 5, "t" * 5)


def test_eval_windows_predict_every_character_once() -> None:
    ids = torch.arange(10)
    data = CharWindows(ids, block_size=4)
    targets = torch.cat([data[i]["targets"] for i in range(len(data))])
    assert targets.tolist() == list(range(1, 10))
    item = data[0]
    assert torch.equal(item["targets"][:-1], item["tokens"][1:])


def test_datamodule(tmp_path: Path) -> None:
    (tmp_path / "tinyshakespeare").mkdir()
    (tmp_path / "tinyshakespeare" / "input.txt").write_text("abcab" * 36 + "Zz" * 10)  # 200 chars, Z/z only at the end
    dm = ShakespeareDataModule(root=tmp_path, block_size=8, batch_size=4, samples_per_epoch=12)
    dm.setup()
    assert dm.vocab_size == 5  # <pad>, <unk>, a, b, c: Z and z are not in the training text
    assert dm.decode(dm.encode("abZ")) == "ab<unk>"
    batch = next(iter(dm.train_dataloader()))
    assert batch["tokens"].shape == batch["targets"].shape == (4, 8)
    test = [b for b in dm.test_dataloader()]
    assert sum(int((b["targets"] != -100).sum()) for b in test) == 10 - 1
    restored = ShakespeareDataModule(root=tmp_path)
    restored.load_state_dict(dm.state_dict())
    assert restored.vocab == dm.vocab


def test_missing_file_says_where(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="tinyshakespeare/input.txt not found"):
        ShakespeareDataModule(root=tmp_path).prepare_data()


@pytest.mark.parametrize("n", [2, 3, 9, 10, 11, 17])
@pytest.mark.parametrize(("block", "stride"), [(4, 1), (4, 2), (4, 3), (4, 4), (5, 2), (1, 1)])
def test_strided_eval_windows_score_every_character_once_with_context(n: int, block: int, stride: int) -> None:
    ids = torch.arange(n)
    data = CharWindows(ids, block_size=block, stride=stride)
    scored = []
    for i in range(len(data)):
        item = data[i]
        keep = item["targets"] != -100
        assert torch.equal(item["targets"][keep], item["tokens"][keep] + 1)  # next character
        positions = keep.nonzero().flatten()
        if i > 0:  # at least block - stride characters before every scored one in its window
            assert int(positions.min()) >= min(block, n - 1) - min(stride, n - 1)
        scored += item["targets"][keep].tolist()
    assert scored == list(range(1, n))
    with pytest.raises(IndexError):
        data[len(data)]


def test_eval_stride_is_checked(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="eval_stride"):
        ShakespeareDataModule(root=tmp_path, block_size=8, eval_stride=9)
