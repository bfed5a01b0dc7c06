"""The user docs run: every ```python block of the pages below executes, in order, one namespace per
page, and a ```text block right after a python block is that block's exact printed output.
docs/make_figures.py renders every figure. The pages run from a scratch folder that links the
repository's examples/, as if from the repository root."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

import matplotlib

matplotlib.use("Agg")

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
TUTORIALS = ["tutorials/custom_mask.md", "tutorials/new_adapter.md", "tutorials/graph_pyg.md", "tutorials/streaming.md",
             "tutorials/mixing_modalities.md"]
PAGES = [
    "quickstart.md", "masks.md", "attention.md", "recipes/speech.md", "concepts.md", "adapters.md", "rnn.md",
    "recipes/multimodal.md", *TUTORIALS
]


def load_docs_module(name: str) -> ModuleType:
    """docs/<name>.py as a module (docs/ is not a package)."""
    spec = importlib.util.spec_from_file_location(name, DOCS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


RUN_PAGE = load_docs_module("run_page")
blocks = RUN_PAGE.blocks


def load_make_figures() -> ModuleType:
    """docs/make_figures.py as a module."""
    return load_docs_module("make_figures")


def test_fence_parser() -> None:
    page = "x\n```python\nprint(1)\n```\n\n```text\n1\n```\n```bash\nls\n```\n```python\na = 2\n```\n"
    assert blocks(page) == [("python", "print(1)\n", "1\n", 2), ("python", "a = 2\n", None, 12)]


@pytest.mark.parametrize("page", PAGES)
def test_page_code_runs(page: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = DOCS / page
    assert blocks(path.read_text()), f"{page} has no python blocks"
    monkeypatch.chdir(tmp_path)  # blocks may save figures and write runs
    (tmp_path / "examples").symlink_to(ROOT / "examples", target_is_directory=True)
    RUN_PAGE.run_page(path, check=True)


def test_pages_link_each_other() -> None:
    index = (DOCS / "index.md").read_text()
    for page in PAGES:
        assert f"]({page})" in index, f"docs/index.md does not link {page}"


@pytest.mark.parametrize("page", ["index.md", *PAGES])
def test_relative_links_resolve(page: str) -> None:
    """Links to files exist; figures/ is generated, so its links are checked against make_figures."""
    for target in re.findall(r"\]\(([^)#\s]+)\)", (DOCS / page).read_text()):
        if "://" in target or target.lstrip("./").startswith("figures/"):
            continue
        assert ((DOCS / page).parent / target).exists(), f"docs/{page} links {target}, which does not exist"


def test_pages_link_only_rendered_figures() -> None:
    module = load_make_figures()
    rendered = set(module.FIGURES) | set(module.TRAINED)
    for path in sorted(DOCS.rglob("*.md")):
        linked = set(re.findall(r"\((?:\.\./)*figures/(\w+)\.png\)", path.read_text()))
        missing = linked - rendered
        assert not missing, f"{path} links figures docs/make_figures.py does not render: {missing}"
    assert re.search(r"\(figures/\w+\.png\)", (DOCS / "masks.md").read_text()), "docs/masks.md links no figures"


def test_make_figures_writes_every_png(tmp_path: Path) -> None:
    module = load_make_figures()
    out = tmp_path / "figures"
    module.main(["--out", str(out), "--dpi", "30", "--steps", "2", "--no-data"])  # low resolution, 2 steps: fast
    written = sorted(p.stem for p in out.glob("*.png"))
    assert written == sorted([*module.FIGURES, *module.TRAINED])
    assert module.make_figures(out, ["full", "trained_image"], missing_only=True) == []
    for path in out.glob("*.png"):
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 500
    with pytest.raises(ValueError, match="unknown figure names"):
        module.make_figures(out, ["nope"])


def test_every_real_sweep_gets_its_figure() -> None:
    """make_figures draws each real-data mask sweep whose store exists; its list is the sweep's tasks."""
    from studies._graphs.mask_sweep import REAL_TASKS

    module = load_make_figures()
    assert set(module._SWEEP_TASKS) == set(REAL_TASKS)
    stored = {f"graph_mask_sweep_{p.parent.name.removeprefix('graph_masks_')}"
              for p in (DOCS.parent / "studies").glob("graph_masks_*/store.json")}
    assert {n for n in module.FIGURES if n.startswith("graph_mask_sweep_")} == stored - {
        "graph_mask_sweep_cora", "graph_mask_sweep_motifs"}
