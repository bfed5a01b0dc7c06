"""The Markdown reads with its pictures in a clone: every image a page of docs/ or the README links is a
committed file, every committed figure is linked by some page, and the figures stay small."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIGURES = ROOT / "docs" / "figures"

#: The figures together stay below this many bytes (they travel with every clone).
BUDGET = 3 * 2**20

IMAGE = re.compile(r"!\[[^\]]*\]\(([^)\s]+)\)")


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), *sorted((ROOT / "studies").glob("*/README.md"))]


def image_links() -> dict[Path, set[Path]]:
    """Each page's image targets, resolved against the page's folder (web links left out)."""
    links = {}
    for page in pages():
        found = {(page.parent / t).resolve() for t in IMAGE.findall(page.read_text()) if "://" not in t}
        if found:
            links[page] = found
    return links


def committed() -> set[Path] | None:
    """The files git tracks under docs/figures/, or ``None`` outside a git checkout."""
    if not (ROOT / ".git").exists() or shutil.which("git") is None:
        return None
    out = subprocess.run(
        ["git", "ls-files", "-z", "--", "docs/figures"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    return {(ROOT / name).resolve() for name in out.split("\0") if name}


def test_every_image_link_is_a_committed_file() -> None:
    links = image_links()
    assert links, "no page links an image"
    tracked = committed()
    for page, targets in links.items():
        for target in targets:
            where = f"{page.relative_to(ROOT)} links {target.relative_to(ROOT)}"
            assert target.is_file(), f"{where}, which does not exist: run docs/make_figures.py and commit it"
            if tracked is not None:
                assert target in tracked, f"{where}, which is not committed: git add it"


def test_the_pages_start_from_pictures() -> None:
    """The home page, quickstart, concepts, the attention core, adapters and the graph tutorial each
    show a figure."""
    links = image_links()
    for name in ["index.md", "quickstart.md", "concepts.md", "attention.md", "adapters.md", "tutorials/graph_pyg.md"]:
        assert links.get(ROOT / "docs" / name), f"docs/{name} shows no figure"


def test_committed_figures_are_linked_and_small() -> None:
    tracked = committed()
    if tracked is None:
        pytest.skip("not a git checkout")
    linked = set().union(*image_links().values())
    orphans = sorted(str(p.relative_to(ROOT)) for p in tracked - linked)
    assert not orphans, f"committed figures no page links: {orphans}"
    total = sum(p.stat().st_size for p in tracked if p.is_file())
    assert total < BUDGET, f"the committed figures take {total / 2**20:.2f} MB, over {BUDGET / 2**20:.0f} MB"
