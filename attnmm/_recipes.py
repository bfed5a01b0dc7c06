"""The recipes of a clone and the datasets of a data folder, found without importing either.

A recipe is ``recipes/<name>.py`` beside the package (in a clone of the repository) with its default
config ``recipes/configs/<name>.yaml`` and variant configs ``recipes/configs/<name>_<variant>.yaml``; a
variant named after a longer recipe (``multimodal_digits_robust_gate.yaml``) belongs to that recipe.
"""

from __future__ import annotations

import ast
from pathlib import Path

#: Where the recipes live when the installed package has none beside it.
RECIPES_URL = "the recipes/ folder of the attnmm repository (a clone runs them: python recipes/<name>.py fit)"

#: The dataset folders the DataModules look for under the data folder, and what each holds.
DATASETS: dict[str, str] = {
    "fsdd": "Free Spoken Digit Dataset (speech_truncated, multimodal_digits; downloaded on first use)",
    "MNIST": "MNIST digits (image_patches, multimodal_digits)",
    "cifar10": "CIFAR-10 (image_patches --config image_patches_cifar.yaml)",
    "planetoid": "Cora, CiteSeer, PubMed (graph_node)",
    "actor": "Actor (graph_node --config graph_node_actor.yaml)",
    "TUDataset": "TU graph classification sets (graph_graph --config graph_graph_tu.yaml)",
    "lrgb": "Peptides-func (graph_graph --config graph_graph_peptides.yaml)",
    "tinyshakespeare": "Tiny Shakespeare (text_lm)",
    "ud_english_ewt": "UD English-EWT (text_pos)",
    "speech_commands_test_v0.02": "Speech Commands test set (speech_truncated_commands.yaml)",
    "SpeechCommands": "Speech Commands, full (speech_truncated_commands.yaml)",
}


def shown(path: Path) -> str:
    """``path`` relative to the working directory when it is below it, else absolute."""
    path = path.resolve()
    try:
        return path.relative_to(Path.cwd()).as_posix()
    except ValueError:
        return path.as_posix()


def recipes_dir() -> Path | None:
    """The ``recipes/`` folder beside the package (a clone), or ``None`` (an installed package)."""
    folder = Path(__file__).resolve().parent.parent / "recipes"
    return folder if folder.is_dir() and (folder / "configs").is_dir() else None


def recipe_names(folder: Path) -> list[str]:
    """The recipes in ``folder``: the stems of its scripts."""
    return sorted(p.stem for p in folder.glob("*.py") if not p.name.startswith("_"))


def recipe_configs(folder: Path, name: str) -> list[Path]:
    """Recipe ``name``'s configs: its default config first, then its variants by name."""
    others = [n for n in recipe_names(folder) if n != name and n.startswith(name + "_")]
    configs = folder / "configs"
    variants = sorted(
        p for p in configs.glob(f"{name}_*.yaml") if not any(p.stem == o or p.stem.startswith(o + "_") for o in others)
    )
    default = configs / f"{name}.yaml"
    return ([default] if default.is_file() else []) + variants


def summary(path: Path) -> str:
    """The first line of the module docstring of the script or the first comment line of the config ``path``."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".py":
        doc = ast.get_docstring(ast.parse(text)) or ""
        return doc.strip().split("\n")[0]
    for line in text.splitlines():
        if line.startswith("#"):
            return line.lstrip("# ").strip()
        if line.strip():
            break
    return ""
