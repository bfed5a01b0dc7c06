"""A dataset that is not there leaves nothing behind: a failed download removes the folders it made."""

from __future__ import annotations

from pathlib import Path

import pytest

from attnmm.data import FSDDDataModule
from attnmm.data._root import new_folder
from attnmm.data.fsdd import download_fsdd


def test_new_folder_removes_what_it_made_on_failure(tmp_path: Path) -> None:
    with pytest.raises(OSError, match="no network"), new_folder(tmp_path / "a" / "b"):
        raise OSError("no network")
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "keep.txt").write_text("x")
    with pytest.raises(OSError), new_folder(tmp_path / "a" / "b" / "c"):
        raise OSError("no network")
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["keep.txt"]  # an existing folder stays
    with new_folder(tmp_path / "a" / "b") as made:
        (made / "f.wav").write_bytes(b"")
    assert (tmp_path / "a" / "b" / "f.wav").is_file()  # kept when the block succeeds


def test_a_failed_fsdd_download_leaves_no_folder(tmp_path: Path) -> None:
    """Once: a failed download (no network) left an empty ``fsdd/`` folder behind."""
    missing = (tmp_path / "nowhere.tar.gz").as_uri()  # fails at once, like an unreachable server, and offline
    with pytest.raises(OSError):
        download_fsdd(tmp_path / "data" / "fsdd", url=missing)
    assert list(tmp_path.iterdir()) == []


def test_missing_fsdd_says_where_and_which_variable(tmp_path: Path) -> None:
    dm = FSDDDataModule(root=str(tmp_path), download=False)
    with pytest.raises(FileNotFoundError, match="ATTNMM_DATA") as err:
        dm.prepare_data()
    assert str(tmp_path / "fsdd" / "recordings") in str(err.value)
    assert list(tmp_path.iterdir()) == []
