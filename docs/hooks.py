"""MkDocs hooks: render the figures the pages link (docs/make_figures.py) before the build reads docs/.

Only missing figures are rendered, so ``mkdocs serve`` does not rebuild in a loop and a second build
costs nothing; delete docs/figures/ (or run ``python docs/make_figures.py``) to refresh them.
"""

from __future__ import annotations

import importlib.util
import logging
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
