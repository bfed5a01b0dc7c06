"""The docs site: the docstring converter of the API pages and the navigation of mkdocs.yml.

The site itself is built by ``make docs`` (``mkdocs build --strict``), which ``make test`` runs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from test_docs import load_docs_module

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def test_math_blocks_and_roles_become_markdown() -> None:
    pytest.importorskip("griffe")
    markdown = load_docs_module("griffe_rst").markdown
    text = (
        "Attention, :math:`a_{ij}` per pair.\n\n"
        "    .. math::\n"
        "        x &= 1 \\\\\n"
        "        y &= 2\n\n"
        "    See :class:`~attnmm.masks.Window`, :func:`attnmm.attend` and :obj:`None`.\n"
    )
    out = markdown(text)
    assert "$a_{ij}$" in out
    assert "    $$\n    \\begin{aligned}\n    x &= 1 \\\\\n    y &= 2\n    \\end{aligned}\n    $$" in out
    assert '<autoref identifier="attnmm.masks.Window" optional><code>Window</code></autoref>' in out
    assert '<autoref identifier="attnmm.attend" optional><code>attnmm.attend</code></autoref>' in out
    assert "`None`" in out and ":obj:" not in out and ".. math::" not in out


def test_missing_targets_stay_required_references() -> None:
    """A role naming nothing (a typo, a renamed class) must fail the strict build; numbers are code."""
    pytest.importorskip("griffe")
    markdown = load_docs_module("griffe_rst").markdown
    out = markdown(":class:`~attnmm.masks.Windw` and :obj:`0.5` and :func:`os.replace`")
    assert '<autoref identifier="attnmm.masks.Windw"><code>Windw</code></autoref>' in out
    assert "`0.5`" in out
    assert '<autoref identifier="os.replace" optional>' in out


def test_shapes_section_becomes_a_list() -> None:
    pytest.importorskip("griffe")
    markdown = load_docs_module("griffe_rst").markdown
    text = "Args:\n    x (Tensor): input.\n\nShapes:\n    - **input:** (B, L, D)\n    - **output:** (B, L, D)\n"
    assert "**Shapes:**\n\n- **input:** (B, L, D)\n- **output:** (B, L, D)\n" in markdown(text)


def nav_pages(config: str) -> list[str]:
    """The .md paths named in mkdocs.yml's nav."""
    nav = config[config.index("\nnav:") : config.index("\nplugins:")]
    return re.findall(r"([\w/]+\.md)", nav)


def test_every_page_is_in_the_nav_and_exists() -> None:
    pages = nav_pages((ROOT / "mkdocs.yml").read_text())
    for page in pages:
        assert (DOCS / page).is_file(), f"mkdocs.yml's nav names docs/{page}, which does not exist"
    on_disk = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")}
    assert not on_disk - set(pages), f"pages missing from mkdocs.yml's nav: {sorted(on_disk - set(pages))}"


def test_make_test_builds_the_docs_strictly() -> None:
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^test:.*\bdocs\b", makefile, re.MULTILINE), "make test must depend on the docs target"
    assert "mkdocs build --strict" in makefile
    assert re.search(r'"\.\[dev,docs(,\w+)*\]"', makefile), "make must install the docs extra"


def test_the_pages_name_the_extras_make_install_installs() -> None:
    """Once: the README and the quickstart said ``.[dev,docs]`` where the Makefile installs ``.[dev,docs,chem]``,
    and the quickstart's only install step was ``make test`` (the whole suite)."""
    makefile = (ROOT / "Makefile").read_text()
    (installed,) = set(re.findall(r'-e "\.\[([\w,]+)\]"', makefile))
    for page in (ROOT / "README.md", *sorted(DOCS.rglob("*.md"))):
        for extras in re.findall(r'-e "\.\[([\w,]+)\]"', page.read_text()):
            assert extras == installed, f"{page.name} says .[{extras}], make install installs .[{installed}]"
    assert "make install" in (DOCS / "quickstart.md").read_text()


def test_make_install_sets_up_the_environment_only_and_the_readme_times_each_command() -> None:
    """Once: ``make test`` was the only installer (it also built the docs and ran every test, 41 min on a
    fresh clone), and the README gave no time for it."""
    makefile = (ROOT / "Makefile").read_text()
    (prerequisites,) = re.findall(r"^install:(.*)$", makefile, re.MULTILINE)
    assert prerequisites.split() == ["$(VENV)/.installed"]
    (rule,) = re.findall(r"^\$\(VENV\)/\.installed:.*\n((?:\t.*\n)+)", makefile, re.MULTILINE)
    assert "pip install" in rule and not re.search(r"pytest|mkdocs|ruff", rule), rule
    readme = (ROOT / "README.md").read_text()
    setup = readme[readme.index("## Set up and test"): readme.index("## From here")]
    for command in ("make install", "make test`", "make test-fast`"):  # (with the time in the text)
        assert command.strip("`") in setup, command
    assert re.search(r"make install.*?\d+(-\d+)? min", setup, re.DOTALL)
    assert re.search(r"`make test` on a fresh clone took \d+ min", setup)
    assert re.search(r"`make test-fast` took \d+ (min|s)\b", setup)


def test_links_out_of_docs_show_their_repository_path() -> None:
    """A page's link to a study README (outside docs/) becomes its path in the site; links inside stay."""
    hooks = load_docs_module("hooks")

    class Page:
        class file:  # noqa: N801 (the attribute mkdocs' Page has)
            src_uri = "recipes/speech.md"

    text = ("[the keyword study](../../studies/kws/README.md), [`kws`](../../studies/kws/README.md#x), "
            "[results](../results.md#speech), [web](https://example.org/a)")
    assert hooks.on_page_markdown(text, Page()) == (
        "the keyword study (`studies/kws/README.md`), `studies/kws/README.md`, [results](../results.md#speech), "
        "[web](https://example.org/a)")
