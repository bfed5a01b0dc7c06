"""``python -m attnmm`` (or the ``attnmm`` command): the recipes with their configs, where data is looked
for and which datasets are there.

Run from a clone, it lists ``recipes/`` beside the package; an installed package without them says where
they live. Nothing is imported but the standard library and this package's plumbing, and nothing is
written.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from attnmm._recipes import DATASETS, RECIPES_URL, recipe_configs, recipe_names, recipes_dir, shown, summary
from attnmm.data._root import CACHE_ENV, DATA_ENV, cache_dir, data_dir


def recipes_text() -> list[str]:
    """The lines about the recipes: each with its description and its configs."""
    folder = recipes_dir()
    if folder is None:
        return [f"Recipes: none beside this installed package; they are in {RECIPES_URL}."]
    lines = [f"Recipes in {shown(folder)}/ (python {shown(folder)}/<name>.py fit [--config <config>]):"]
    for name in recipe_names(folder):
        configs = recipe_configs(folder, name)
        lines.append(f"  {name:<26} {summary(folder / f'{name}.py')}")
        if configs:
            lines.append(f"  {'':<26} configs: {', '.join(c.name for c in configs)}")
    return lines


def data_text() -> list[str]:
    """The lines about the data: the folder looked in, how it was chosen, and the datasets there."""
    env = os.environ.get(DATA_ENV, "").strip()
    base = data_dir().resolve()
    where = f"${DATA_ENV} = {env}" if env else f"${DATA_ENV} is not set: the default, ~/.cache/attnmm"
    lines = [
        f"Data folder: {base} ({where}).",
        f"  A recipe looks in --data.root, else ${DATA_ENV}, else ~/.cache/attnmm; writable copies go to "
        f"${CACHE_ENV} ({cache_dir()}).",
    ]
    present = [name for name in DATASETS if (base / name).is_dir() and any((base / name).iterdir())]
    absent = [name for name in DATASETS if name not in present]
    for label, names in (("present", present), ("absent", absent)):
        lines.append(f"  {label}:" + ("" if names else " none"))
        lines += [f"    {name:<28} {DATASETS[name]}" for name in names]
    if absent:
        lines.append(f"  Put a dataset's folder under {base}, or point ${DATA_ENV} at a folder that holds it; a "
                     "recipe without its data says which files it needs.")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    """List the recipes and the data (``argv``: the command line, for ``--help``)."""
    parser = argparse.ArgumentParser(
        prog="python -m attnmm",
        description="List the recipes with their configs, where data is looked for and which datasets are there.",
    )
    parser.parse_args(sys.argv[1:] if argv is None else argv)
    print("\n".join([*recipes_text(), "", *data_text()]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
