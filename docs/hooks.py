"""MkDocs hooks: render the figures the pages link (docs/make_figures.py) before the build reads docs/, and
show links to repository files outside docs/ (the studies' READMEs) as their paths.

Only missing figures are rendered, so ``mkdocs serve`` does not rebuild in a loop and a second build
costs nothing; delete docs/figures/ (or run ``python docs/make_figures.py``) to refresh them.
"""

from __future__ import annotations

import importlib.util
import logging
import posixpath
import re
from pathlib import Path
from typing import Any

log = logging.getLogger("mkdocs.hooks.figures")


def on_pre_build(config: Any, **kwargs: Any) -> None:
    docs = Path(config["docs_dir"])
    spec = importlib.util.spec_from_file_location("make_figures", docs / "make_figures.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    written = module.make_figures(docs / "figures", missing_only=True)
    if written:
        log.info("rendered %d figures into %s", len(written), docs / "figures")


#: A Markdown link whose target may lie outside docs/ (a study's README under studies/).
_LINK = re.compile(r"\[([^\]]+)\]\(([^)\s#]+)(#[^)\s]*)?\)")


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
    """Links from a page to files of the repository outside docs/ (the studies' READMEs, which render on the
    repository's host) become their repository path in the site, which holds only docs/."""
    here = posixpath.dirname(page.file.src_uri)

    def local(m: re.Match[str]) -> str:
        target = m.group(2)
        if "://" in target or target.startswith(("/", "mailto:")):
            return m.group(0)
        path = posixpath.normpath(posixpath.join(here, target))
        if not path.startswith("../"):
            return m.group(0)
        repo = path.removeprefix("../")
        text = m.group(1)
        return f"`{repo}`" if text.strip("`") in repo else f"{text} (`{repo}`)"

    return _LINK.sub(local, markdown)
