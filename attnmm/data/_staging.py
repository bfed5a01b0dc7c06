"""Processed files written whole or not at all.

A PyG dataset writes ``processed/`` next to its ``raw/`` folder while it processes. Interrupted or
failed, it would leave a half-written folder that a later run trusts. :func:`load_processed` lets the
dataset process in a staging folder next to the target and renames the finished folder into place;
:func:`save_staged` does the same for one file.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from attnmm.data._root import new_folder

__all__ = ["download_staged", "load_processed", "save_staged"]


def download_staged(folder: Path, fetch: Callable[[Path], object], found: Path, what: str, instead: str) -> None:
    """Have ``fetch(staging)`` download into a staging folder inside ``folder``, then move the files it put
    under ``staging / found`` into ``folder`` (their paths below it kept). A failed ``fetch`` (no network,
    a server that refuses) leaves nothing behind, no file and none of the folders made for it, and raises
    ``FileNotFoundError("downloading <what> failed (<error>); <instead>")``, ``instead`` saying where the
    files go without a download."""
    with new_folder(folder):
        staging = Path(tempfile.mkdtemp(prefix=".download-", dir=folder))
        try:
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # PyG's notes on downloading and processing
                    fetch(staging)
            except Exception as err:
                raise FileNotFoundError(f"downloading {what} failed ({type(err).__name__}: {err}); {instead}") from err
            for file in sorted(p for p in (staging / found).rglob("*") if p.is_file()):
                target = folder / file.relative_to(staging / found)
                target.parent.mkdir(parents=True, exist_ok=True)
                os.replace(file, target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)


def load_processed(
    root: Path, subdir: Path, build: Callable[[Path], Any], unreadable: Callable[[Exception], Exception], label: str,
    load: Callable[[], Any], title: str,
) -> Any:
    """``load()``, PyG's dataset ``title`` under ``root``, once ``<root>/<subdir>/processed`` is there: else
    ``build(staging_root)`` first writes ``<staging_root>/<subdir>/processed`` from the raw files (a link to
    ``<root>/<subdir>/raw``) and that folder is renamed into place.

    An error of ``build`` is turned into ``unreadable(error)`` (which names the bad raw file); either
    way nothing is left in ``processed/``. A folder there without ``data.pt`` (left by an interrupted run
    of an older version) is replaced; a complete one written meanwhile by another process is kept.
    ``label`` names the staging folder (``.<label>-processing-*``). PyG's ``pre_transform.pt`` and
    ``pre_filter.pt`` are deleted: PyG unpickles them (``weights_only=False``) only to warn when a
    pre-transform changed, and attnmm uses none. A processed file damaged after it was written is named
    in the error.
    """
    raw, target = root / subdir / "raw", root / subdir / "processed"
    if not (target / "data.pt").is_file():
        raw.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{label}-processing-", dir=root))
        try:
            stage = staging / subdir
            stage.mkdir(parents=True, exist_ok=True)
            os.symlink(raw.resolve(), stage / "raw", target_is_directory=True)  # the raw files, not a copy
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # PyG's notes on processing
                    build(staging)
            except Exception as err:
                raise unreadable(err) from err
            if target.is_dir() and not (target / "data.pt").is_file():
                shutil.rmtree(target)
            try:
                os.rename(stage / "processed", target)
            except OSError:
                if not (target / "data.pt").is_file():  # not a lost race with another process
                    raise
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    for meta in ("pre_transform.pt", "pre_filter.pt"):
        with contextlib.suppress(OSError):
            (target / meta).unlink(missing_ok=True)
    try:
        return load()
    except Exception as err:
        raise RuntimeError(
            f"could not load the processed {title} from {target}: {err}; delete {target} to process the raw "
            "files again"
        ) from err


def save_staged(obj: Any, path: Path) -> None:
    """``torch.save(obj, path)`` through a temporary file in the same folder, renamed into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # as a plainly written file (mkstemp makes it private)
        torch.save(obj, tmp)
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
