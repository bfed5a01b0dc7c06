"""Checkpoints that survive a kill: atomic writes, the random state, and finding ``last``."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO

from attnmm._random import get_rng_state, set_rng_state

__all__ = ["AtomicCheckpointIO", "RandomState", "find_last_checkpoint"]


class AtomicCheckpointIO(TorchCheckpointIO):
    r"""Saves local checkpoints atomically: the file at ``path`` is always a whole checkpoint.

    The checkpoint is written to a temporary file in the same directory, flushed to disk
    (``fsync``) and moved over ``path`` with :func:`os.replace`, which is atomic within one file
    system. A kill at any moment leaves either the previous checkpoint or the new one at ``path``,
    never a truncated file; at worst a hidden ``.NAME.*.tmp`` file, removed by the next save of
    ``NAME``. Lightning's own writer goes through a file in the system temporary directory and
    ``shutil.move``, which copies (not atomic) when that directory is on another file system.
    Remote paths (``s3://...``) are left to Lightning.

    Examples:
        >>> import tempfile, torch
        >>> from pathlib import Path
        >>> path = Path(tempfile.mkdtemp()) / "last.ckpt"
        >>> AtomicCheckpointIO().save_checkpoint({"step": torch.tensor(3)}, path)
        >>> torch.load(path, weights_only=True)
        {'step': tensor(3)}
    """

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None) -> None:
        if storage_options is not None or "://" in str(path):
            super().save_checkpoint(checkpoint, path, storage_options)
            return
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        for stale in path.parent.glob(f".{path.name}.*.tmp"):  # left by a kill during an earlier save
            stale.unlink(missing_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                torch.save(checkpoint, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        with contextlib.suppress(OSError):  # make the rename itself durable
            dir_fd = os.open(path.parent, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)


class RandomState(L.Callback):
    """Saves the global random state (torch, CUDA, numpy, Python) in every checkpoint and restores
    it when training resumes, so dropout and shuffling after a resume draw the numbers an
    uninterrupted run would have drawn. Lightning itself saves no random state. Stored as tensors
    and tuples only: checkpoints still load with ``weights_only=True``.
    """

    def state_dict(self) -> dict[str, Any]:
        return {"rng": get_rng_state()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        set_rng_state(state_dict["rng"])


def find_last_checkpoint(*roots: str | Path) -> Path | None:
    """The most recently written ``last*.ckpt`` under any of ``roots`` (searched recursively), or
    ``None``. A run logged to ``version_N`` saves its checkpoints there, while Lightning's
    ``ckpt_path="last"`` looks only in the directory of the new run (``version_N+1``)."""
    found = {p for root in roots if Path(root).is_dir() for p in Path(root).rglob("last*.ckpt") if p.is_file()}
    return max(found, key=lambda p: p.stat().st_mtime_ns, default=None)
