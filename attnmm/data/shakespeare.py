r"""Tiny Shakespeare for character-level language modelling."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import DataLoader, Dataset

from attnmm.common.vocab import Vocabulary
from attnmm.data._resumable import SplitLoaders
from attnmm.data._root import DATA_ENV, resolve_root

__all__ = ["CharWindows", "ShakespeareDataModule", "split_text"]


def split_text(text: str, train_fraction: float = 0.9) -> tuple[str, str, str]:
    r"""``(train, val, test)``: the first ``train_fraction`` of the characters, then the rest cut in
    two equal halves, validation before test.

    Examples:
        >>> split_text("abcdefghijklmnopqrst")
        ('abcdefghijklmnopqr', 's', 't')
    """
    if not 0.0 < train_fraction < 1.0:
        raise ValueError(f"train_fraction must be in (0, 1), got {train_fraction}")
    n = len(text)
    a = int(n * train_fraction)
    b = a + (n - a) // 2
    return text[:a], text[a:b], text[b:]


class CharWindows(Dataset):
    r"""Windows of a character-id sequence with next-character targets.

    With ``num_samples`` each item is a window at a uniformly random start (training). Without, the
    windows cover the sequence for evaluation so that every character but the first is predicted
    exactly once: windows start every ``stride`` characters (default ``block_size``: consecutive,
    non-overlapping windows), and a window after the first scores only its last ``stride`` positions,
    the characters no earlier window predicted; the others get target -100 (ignored). A ``stride`` below
    ``block_size`` gives every scored character at least ``block_size - stride`` characters of context
    (the sliding-window evaluation of language models); the last window may be shorter.

    Items: ``{"tokens": (L,), "targets": (L,)}`` with ``targets[t] = ids[start + t + 1]``.

    Examples:
        >>> data = CharWindows(torch.arange(8), block_size=4, stride=2)
        >>> [data[i]["targets"].tolist() for i in range(len(data))]
        [[1, 2, 3, 4], [-100, -100, 5, 6], [-100, -100, 7]]
    """

    def __init__(self, ids: Tensor, block_size: int, num_samples: int | None = None, stride: int | None = None) -> None:
        if ids.dim() != 1 or ids.numel() < 2:
            raise ValueError(f"need a 1-D sequence of at least 2 ids, got shape {tuple(ids.shape)}")
        self.ids, self.num_samples = ids, num_samples
        self.block_size = min(block_size, ids.numel() - 1)
        self.stride = self.block_size if stride is None else min(stride, self.block_size)
        if self.stride < 1:
            raise ValueError(f"stride must be >= 1, got {stride}")

    def __len__(self) -> int:
        if self.num_samples is not None:
            return self.num_samples
        rest = self.ids.numel() - 1 - self.block_size  # targets left after the first window
        return 1 + max(0, -(-rest // self.stride))

    def __getitem__(self, i: int) -> dict[str, Tensor]:
        if self.num_samples is not None:
            start = int(torch.randint(0, self.ids.numel() - self.block_size, ()))
        else:
            if not 0 <= i < len(self):
                raise IndexError(f"window {i} of {len(self)}")
            start = i * self.stride
        window = self.ids[start : start + self.block_size + 1]
        targets = window[1:]
        if self.num_samples is None and i > 0 and self.stride < self.block_size:
            targets = targets.clone()
            targets[: self.block_size - self.stride] = -100  # predicted by the window before
        return {"tokens": window[:-1], "targets": targets}


def _collate(items: list[dict[str, Tensor]]) -> dict[str, Tensor]:
    # (B, L); the shorter last evaluation window padded, its padded targets ignored (-100)
    return {k: pad_sequence([it[k] for it in items], batch_first=True, padding_value=-100 * (k == "targets"))
            for k in ("tokens", "targets")}


class ShakespeareDataModule(SplitLoaders):
    r"""Tiny Shakespeare (Karpathy's char-rnn corpus, 1.1 M characters) for a character language
    model: predict each character from the ones before it.

    ``input.txt`` is read from ``<root>/tinyshakespeare`` (:func:`~attnmm.data.resolve_root`). Splits by
    position (:func:`split_text`): the first 90% of the characters train; the last 10% is cut in half,
    validation then test. The character
    :class:`~attnmm.data.Vocabulary` is built from the training split (0 pads, 1 is unknown), so
    :attr:`vocab_size` is 2 + the characters of the training text (67 for Tiny Shakespeare).

    Training items are ``block_size`` windows at random starts, ``samples_per_epoch`` of them per
    epoch; validation and test cut their text into consecutive windows, so ``val_loss`` and
    ``test_loss`` are the mean cross-entropy in nats per character, every held-out character predicted
    once; with ``eval_stride`` below ``block_size`` the evaluation windows overlap and each character is
    scored with at least ``block_size - eval_stride`` characters of context. Batches: ``tokens`` (B, L),
    ``targets`` (B, L) (the next characters; -100 is ignored).

    Args:
        root (str or Path, optional): the base data folder. (default: :obj:`None`)
        block_size (int, optional): characters per window L. (default: ``256``)
        batch_size (int, optional): windows per batch. (default: ``32``)
        samples_per_epoch (int, optional): random training windows per epoch. (default: ``20000``)
        train_fraction (float, optional): share of the text that trains. (default: ``0.9``)
        num_workers (int, optional): DataLoader worker processes. (default: ``0``)
        eval_stride (int, optional): characters between evaluation windows; :obj:`None` for
            ``block_size`` (non-overlapping windows). (default: :obj:`None`)

    Examples:
        >>> dm = ShakespeareDataModule(root="/data", block_size=128)
        >>> dm
        ShakespeareDataModule(root='/data/tinyshakespeare', block_size=128, batch_size=32)
    """

    def __init__(
        self, root: str | Path | None = None, block_size: int = 256, batch_size: int = 32,
        samples_per_epoch: int = 20000, train_fraction: float = 0.9, num_workers: int = 0,
        eval_stride: int | None = None,
    ) -> None:
        super().__init__()
        for name, value in (("block_size", block_size), ("batch_size", batch_size),
                            ("samples_per_epoch", samples_per_epoch)):
            if value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        if not 0.0 < train_fraction < 1.0:
            raise ValueError(f"train_fraction must be in (0, 1), got {train_fraction}")
        if eval_stride is not None and not 1 <= eval_stride <= block_size:
            raise ValueError(
                f"eval_stride must be in [1, block_size={block_size}], got {eval_stride}; with a smaller "
                "block_size set eval_stride as well (e.g. block_size // 2), or None for non-overlapping windows"
            )
        self.eval_stride = eval_stride
        self.root, self.block_size, self.batch_size = root, block_size, batch_size
        self.samples_per_epoch, self.train_fraction, self.num_workers = samples_per_epoch, train_fraction, num_workers
        self.vocab: Vocabulary | None = None
        self.splits: dict[str, Tensor] = {}

    @property
    def path(self) -> Path:
        r"""``<root>/tinyshakespeare/input.txt``."""
        return resolve_root(self.root, "tinyshakespeare") / "input.txt"

    def prepare_data(self) -> None:
        if not self.path.is_file():
            raise FileNotFoundError(
                f"{self.path} not found. Put Tiny Shakespeare's input.txt (data/tinyshakespeare/input.txt of "
                f"https://github.com/karpathy/char-rnn) there, or point root= or ${DATA_ENV} at the folder "
                "holding tinyshakespeare/"
            )

    def setup(self, stage: str | None = None) -> None:
        if self.splits:
            return
        self.prepare_data()
        texts = split_text(self.path.read_text(encoding="utf-8"), self.train_fraction)
        if self.vocab is None:
            self.vocab = Vocabulary(texts[0])
        self.splits = {k: self.encode(t) for k, t in zip(("train", "val", "test"), texts)}

    def _built(self) -> Vocabulary:
        if self.vocab is None:
            raise RuntimeError("the vocabulary is built in setup(); call dm.setup() first")
        return self.vocab

    @property
    def vocab_size(self) -> int:
        """Ids of the character vocabulary (after :meth:`setup`)."""
        return len(self._built())

    def encode(self, text: str) -> Tensor:
        """Character ids (T,) of ``text``; characters not in the training text map to unknown (1)."""
        return torch.tensor(self._built().encode(text), dtype=torch.long)

    def decode(self, ids: Tensor | list[int]) -> str:
        """The text of character ids."""
        return "".join(self._built().decode(ids.tolist() if isinstance(ids, Tensor) else ids))

    def _loader(self, split: str, train: bool) -> DataLoader:
        text = self.splits[split]
        data = CharWindows(text, self.block_size, self.samples_per_epoch) if train else CharWindows(
            text, self.block_size, stride=self.eval_stride)
        return DataLoader(data, self.batch_size, collate_fn=_collate, num_workers=self.num_workers, drop_last=train)

    def state_dict(self) -> dict[str, Any]:
        return {} if self.vocab is None else {"vocab": self.vocab.state()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if state_dict:
            self.vocab = Vocabulary.from_state(state_dict["vocab"])

    def __repr__(self) -> str:
        sizes = "".join(f", {k}={v.numel()}" for k, v in self.splits.items())
        return (
            f"{type(self).__name__}(root={self.path.parent.as_posix()!r}, block_size={self.block_size}, "
            f"batch_size={self.batch_size}{sizes})"
        )
