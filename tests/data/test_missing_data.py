"""A dataset that is not there leaves nothing behind: a failed download removes the folders it made."""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path

import pytest

from attnmm.data import FSDDDataModule, GraphDataModule, NodeDataModule
from attnmm.data._root import new_folder
from attnmm.data.fsdd import download_fsdd
from attnmm.data.peptides import peptides_func


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


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """No host name resolves and no socket connects (nothing may download in the tests)."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise OSError("the network is off in the tests")

    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)


#: dataset -> (a download of it, from a base data folder; its raw folder there)
DOWNLOADS: dict[str, tuple[Callable[[Path], object], str]] = {
    "Cora": (lambda root: NodeDataModule(str(root), "Cora", download=True).prepare_data(), "planetoid/Cora/raw"),
    "Actor": (lambda root: NodeDataModule(str(root), "Actor", download=True).prepare_data(), "actor/raw"),
    "PROTEINS": (lambda root: GraphDataModule("PROTEINS", str(root), download=True).setup(), "TUDataset/PROTEINS/raw"),
    "peptides-func": (lambda root: peptides_func(root, download=True, progress=False), "lrgb/peptides-functional"),
}


@pytest.mark.usefixtures("offline")
@pytest.mark.parametrize("dataset", sorted(DOWNLOADS))
def test_a_failed_graph_download_says_where_and_leaves_no_folder(
    dataset: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once: a failed Planetoid download was reported as a corrupt raw file, and left planetoid/Cora/raw."""
    monkeypatch.setenv("ATTNMM_CACHE", str(tmp_path / "cache"))
    download, raw = DOWNLOADS[dataset]
    data = tmp_path / "data"
    data.mkdir()
    with pytest.raises(FileNotFoundError, match="^downloading .* failed") as err:
        download(data)
    message = str(err.value)
    assert "\n" not in message
    assert str(data / raw) in message and "ATTNMM_DATA" in message
    assert list(data.iterdir()) == [] and not (tmp_path / "cache").exists()


def test_download_staged_moves_the_files_in_whole_or_leaves_nothing(tmp_path: Path) -> None:
    from attnmm.data._staging import download_staged

    def fetch(at: Path) -> None:
        (at / "got" / "sub").mkdir(parents=True)
        (at / "got" / "a.txt").write_text("a")
        (at / "got" / "sub" / "b.txt").write_text("b")
        (at / "processed").mkdir()  # beside the files asked for: not kept

    folder = tmp_path / "data" / "set" / "raw"
    download_staged(folder, fetch, Path("got"), "the set", "put it there")
    assert sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*")) == ["a.txt", "sub", "sub/b.txt"]

    def broken(at: Path) -> None:
        (at / "partial.txt").write_text("half")
        raise OSError("connection reset")

    target = tmp_path / "other" / "raw"
    with pytest.raises(FileNotFoundError, match=r"^downloading the set failed \(OSError: connection reset\); put"):
        download_staged(target, broken, Path(), "the set", f"put the files in {target}")
    assert not (tmp_path / "other").exists()
