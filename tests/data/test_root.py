from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from attnmm.data import cache_dir, data_dir, resolve_root, writable_copy


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("ATTNMM_DATA", raising=False)
    monkeypatch.delenv("ATTNMM_CACHE", raising=False)
    return tmp_path / "home"


def test_resolution_order(home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert resolve_root(None, "fsdd") == home / ".cache" / "attnmm" / "fsdd"
    monkeypatch.setenv("ATTNMM_DATA", str(tmp_path / "env"))
    assert resolve_root(None, "fsdd") == tmp_path / "env" / "fsdd"
    assert resolve_root(tmp_path / "explicit", "fsdd") == tmp_path / "explicit" / "fsdd"
    assert resolve_root(str(tmp_path / "explicit"), "fsdd") == tmp_path / "explicit" / "fsdd"
    assert resolve_root("~/x", "fsdd") == home / "x" / "fsdd"
    assert data_dir() == tmp_path / "env"
    monkeypatch.setenv("ATTNMM_DATA", "")  # empty counts as unset
    assert data_dir() == home / ".cache" / "attnmm"


def test_nothing_is_created(home: Path) -> None:
    resolve_root(None, "fsdd")
    assert not home.exists()


@pytest.mark.parametrize("name", ["", "/abs", "../up", "a/../../b"])
def test_bad_names_are_refused(name: str) -> None:
    with pytest.raises(ValueError, match="relative folder name"):
        resolve_root("/data", name)


def _read_only_tree(src: Path) -> None:
    (src / "raw").mkdir(parents=True)
    (src / "raw" / "a.txt").write_text("a")
    (src / "b.txt").write_text("b")
    for p in [src / "raw" / "a.txt", src / "b.txt", src / "raw", src]:
        os.chmod(p, stat.S_IRUSR | (stat.S_IXUSR if p.is_dir() else 0))


def test_writable_copy(home: Path, tmp_path: Path) -> None:
    src = tmp_path / "shared" / "toy"
    _read_only_tree(src)
    try:
        dst = writable_copy(src, "toy")
        assert dst == home / ".cache" / "attnmm" / "toy"
        assert (dst / "raw" / "a.txt").read_text() == "a" and (dst / "b.txt").read_text() == "b"
        (dst / "raw" / "processed.pt").write_text("p")  # consumers can write next to the raw files
        (dst / "b.txt").write_text("changed")
        assert not list(dst.parent.glob(".toy.tmp-*"))  # staging folder cleaned up
        # re-used, not copied again
        assert writable_copy(src, "toy") == dst
        assert (dst / "b.txt").read_text() == "changed"
    finally:
        for p in [src, src / "raw"]:
            os.chmod(p, stat.S_IRWXU)


def test_writable_copy_honours_cache_env(home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ATTNMM_CACHE", str(tmp_path / "cache"))
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    assert cache_dir() == tmp_path / "cache"
    assert writable_copy(src, "nested/name") == tmp_path / "cache" / "nested" / "name"
    assert (tmp_path / "cache" / "nested" / "name" / "sub").is_dir()


def test_writable_copy_of_missing_source(home: Path, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="not a folder"):
        writable_copy(tmp_path / "absent", "toy")
    assert not (home / ".cache" / "attnmm" / "toy").exists()


def test_failed_copy_leaves_nothing(home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    src = tmp_path / "src"
    src.mkdir()

    def broken(*args: object, **kwargs: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(shutil, "copytree", broken)
    with pytest.raises(OSError, match="disk full"):
        writable_copy(src, "toy")
    cache = home / ".cache" / "attnmm"
    assert list(cache.iterdir()) == []
