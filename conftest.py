"""Collection of the package's doctests: the deprecated import paths (modules that stand for their new
home and warn when imported) are not collected, so importing them warns only where a user does."""

from pathlib import Path

collect_ignore = [
    str(path)
    for path in Path(__file__).parent.joinpath("attnmm").rglob("*.py")
    if path.read_text().startswith('"""Deprecated path:')
]
