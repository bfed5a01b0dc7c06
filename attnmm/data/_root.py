r"""Where datasets live: data-root resolution and writable copies of read-only datasets.

A DataModule takes ``root``; :func:`resolve_root` turns it into the dataset's own folder
``<root>/<name>``, falling back to ``$ATTNMM_DATA`` and then ``~/.cache/attnmm`` when ``root`` is unset.
A dataset found in a read-only place (a shared mount) can be copied once, atomically, into a writable
cache with :func:`writable_copy` when a consumer must write processed files next to the raw ones
(PyG datasets write ``processed/`` under their root).
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath

DATA_ENV = "ATTNMM_DATA"
CACHE_ENV = "ATTNMM_CACHE"

__all__ = ["CACHE_ENV", "DATA_ENV", "cache_dir", "data_dir", "new_folder", "resolve_root", "writable_copy"]


def _check_name(name: str) -> str:
    path = PurePosixPath(name) if isinstance(name, str) else None
    if path is None or not path.parts or path.is_absolute() or ".." in path.parts:
        raise ValueError(
            f"dataset name must be a relative folder name such as 'fsdd', got {name!r}; "
            "pass the location of the data as root, not as the name"
        )
    return name


def _from_env(var: str) -> Path | None:
    value = os.environ.get(var, "").strip()
    return Path(value).expanduser() if value else None


def data_dir(root: str | Path | None = None) -> Path:
    r"""The base data folder: ``root`` if given, else ``$ATTNMM_DATA``, else ``~/.cache/attnmm``.

    Args:
        root (str or Path, optional): an explicit base folder. (default: :obj:`None`)

    Examples:
        >>> data_dir("/data").as_posix()
        '/data'
    """
    if root is not None and str(root).strip():
        return Path(root).expanduser()
    return _from_env(DATA_ENV) or Path.home() / ".cache" / "attnmm"


def cache_dir() -> Path:
    r"""The writable cache folder: ``$ATTNMM_CACHE`` if set, else ``~/.cache/attnmm``."""
    return _from_env(CACHE_ENV) or Path.home() / ".cache" / "attnmm"


def resolve_root(root: str | Path | None, name: str) -> Path:
    r"""The folder of dataset ``name``: ``<base>/<name>`` with ``base`` chosen by :func:`data_dir` (nothing
    is read or created; the caller checks that the data is there).

    Args:
        root (str or Path, optional): the base data folder, or :obj:`None` for :func:`data_dir`'s default.
        name (str): the dataset's folder name under the base, e.g. ``"fsdd"``.

    Examples:
        >>> resolve_root("/data", "fsdd").as_posix()
        '/data/fsdd'
        >>> resolve_root("~/corpora", "fsdd") == Path.home() / "corpora" / "fsdd"
        True
    """
    return data_dir(root) / _check_name(name)


def under_data(root: str | Path | None, folder: str | Path) -> Path:
    """``folder`` as given when absolute or present, else under the base data folder of ``root``."""
    path = Path(folder)
    return path if path.is_absolute() or path.exists() else data_dir(root) / path


@contextmanager
def new_folder(path: str | Path) -> Iterator[Path]:
    r"""Make the folder ``path`` (and its missing parents) for the block, e.g. a download; if the block
    fails, remove again the folders it made that are still empty, so a failed download leaves nothing.

    Args:
        path (str or Path): the folder.

    Examples:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     try:
        ...         with new_folder(Path(tmp, "data", "fsdd")):
        ...             raise OSError("no network")
        ...     except OSError:
        ...         pass
        ...     print(list(Path(tmp).iterdir()))
        []
    """
    path = Path(path).expanduser()
    made = []
    for folder in (path, *path.parents):
        if folder.exists():
            break
        made.append(folder)  # deepest first
    path.mkdir(parents=True, exist_ok=True)
    try:
        yield path
    except BaseException:
        for folder in made:
            try:
                folder.rmdir()
            except OSError:  # not empty (something else wrote there) or gone: keep what is left
                break
        raise


def writable_copy(src: str | Path, name: str) -> Path:
    r"""A writable copy of the dataset folder ``src`` at ``<cache>/<name>``, made once and re-used.

    ``<cache>`` is :func:`cache_dir`. The copy is atomic (copied next to the target, then renamed into
    place), so an interrupted copy leaves no half-filled ``<cache>/<name>`` and concurrent callers share
    one copy. An existing ``<cache>/<name>`` (or ``src`` itself, if it is the target) is returned as is.

    Args:
        src (str or Path): the (possibly read-only) dataset folder to copy.
        name (str): the folder name of the copy under the cache, e.g. ``"planetoid"``.

    Examples:
        >>> import os, tempfile
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     os.environ["ATTNMM_CACHE"] = os.path.join(tmp, "cache")
        ...     src = Path(tmp, "ro"); (src / "raw").mkdir(parents=True)
        ...     _ = (src / "raw" / "a.txt").write_text("x")
        ...     dst = writable_copy(src, "toy")
        ...     print(dst.relative_to(tmp).as_posix(), (dst / "raw" / "a.txt").read_text())
        ...     del os.environ["ATTNMM_CACHE"]
        cache/toy x
    """
    src = Path(src).expanduser()
    dst = cache_dir() / _check_name(name)
    if dst.exists():
        return dst
    if not src.is_dir():
        raise FileNotFoundError(
            f"cannot make a writable copy of {src}: it is not a folder; check the dataset path "
            f"(root argument or ${DATA_ENV})"
        )
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dst.name}.tmp-", dir=dst.parent))
    try:
        staged = tmp / "tree"
        shutil.copytree(src, staged, symlinks=True)
        # a copy of a read-only tree keeps its mode bits; consumers must be able to write next to them
        for dirpath, dirnames, filenames in os.walk(staged):
            for entry in [dirpath, *(os.path.join(dirpath, n) for n in dirnames + filenames)]:
                mode = os.lstat(entry).st_mode
                if not stat.S_ISLNK(mode):
                    os.chmod(entry, stat.S_IMODE(mode) | stat.S_IWUSR | stat.S_IRUSR)
        try:
            os.rename(staged, dst)
        except OSError:
            if not dst.is_dir():  # not a lost race with another process: a real failure
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dst
