"""Every recipe config says each thing once: the trainer defaults are RecipeCLI's, a variant config is an
overlay of its recipe's default that states only what differs, and every config resolves and rebuilds
from its saved hyperparameters (what ``load_from_checkpoint`` and ``test --ckpt_path`` read)."""

from __future__ import annotations

import copy
import io
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from _recipes import CONFIG_PATHS, CONFIG_SMOKE, SMOKE, config_smoke_args, recipe_main

CONFIGS = Path(__file__).resolve().parents[2] / "recipes" / "configs"
RECIPES = sorted({p.stem for p in CONFIGS.parent.glob("*.py")})


def _recipe(config: str) -> str:
    """The recipe a config belongs to: the longest recipe name its file name starts with."""
    return max((r for r in RECIPES if config.startswith(r)), key=len)


SHOWN = sorted(p.stem for p in CONFIGS.glob("*.yaml"))
#: Every config of a recipe: recipes/configs' and the study candidates that overlay a recipe (named after it).
PATHS = {Path(n).stem: p for n, p in CONFIG_PATHS.items() if any(n.startswith(r) for r in RECIPES)}
ALL = sorted(PATHS)
OVERLAYS = [c for c in ALL if c not in RECIPES]
#: What RecipeCLI gives every recipe; no config restates it.
SHARED = ("seed_everything", "trainer.accelerator", "trainer.devices", "trainer.default_root_dir", "trainer.logger",
          "trainer.plugins")


def _leaves(node: Any, path: str = "") -> dict[str, Any]:
    """The config's values by dotted path (lists are values)."""
    if not isinstance(node, dict):
        return {path: node}
    out: dict[str, Any] = {}
    for key, value in node.items():
        out.update(_leaves(value, f"{path}.{key}" if path else str(key)))
    return out


def _data_args(recipe: str, config: str | None = None) -> list[str]:
    """A recipe's (or an overlay's) data on any machine: the real data, else generated files (:data:`SMOKE`,
    :data:`CONFIG_SMOKE`)."""
    return config_smoke_args(recipe, config) if recipe in SMOKE or config in CONFIG_SMOKE else []


def _at(config: dict[str, Any], path: str) -> Any:
    node: Any = config
    for key in path.split("."):
        if not isinstance(node, dict) or key not in node:
            return KeyError
        node = node[key]
    return node


def _resolved(recipe: str, config: str | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """``--print_config`` of the recipe with ``config`` on top of its default."""
    monkeypatch.setenv("ATTNMM_CACHE", str(tmp_path / "cache"))
    args = ["fit", *([f"--config={PATHS[config]}"] if config else []), *_data_args(recipe, config),
            "--print_config"]
    out = io.StringIO()
    with redirect_stdout(out), pytest.raises(SystemExit) as exit_info:
        recipe_main(recipe)(args)
    assert exit_info.value.code == 0
    return yaml.safe_load(out.getvalue())


DOCS = [CONFIGS.parents[1] / "README.md", *sorted((CONFIGS.parents[1] / "docs").rglob("*.md"))]


def test_every_config_is_named_in_the_docs() -> None:
    """recipes/configs holds each recipe's default and the variants the docs show users; a study's
    candidates live in its study folder."""
    text = "\n".join(p.read_text() for p in DOCS)
    unnamed = [c for c in SHOWN if f"{c}.yaml" not in text]
    assert len(SHOWN) <= 15 and not unnamed, f"configs no docs page names: {unnamed}"
    assert set(RECIPES) <= set(SHOWN)  # every recipe has its default config


@pytest.mark.parametrize("config", ALL)
def test_no_config_restates_the_shared_trainer_defaults(config: str) -> None:
    raw = yaml.safe_load((PATHS[config]).read_text()) or {}
    restated = [key for key in SHARED if _at(raw, key) is not KeyError]
    listed = _at(raw, "trainer.callbacks")
    callbacks = [c.get("class_path", "") for c in (listed if isinstance(listed, list) else [])]
    restated += [c for c in callbacks if c.endswith(("ModelCheckpoint", "RandomState"))]
    assert not restated, f"{config}.yaml restates {restated}: RecipeCLI gives them (the `checkpoint:` key sets its own)"


#: recipe -> its default config resolved (``--print_config``), once per test process
_DEFAULTS: dict[str, dict[str, Any]] = {}


@pytest.mark.slow
@pytest.mark.parametrize("config", OVERLAYS)
def test_an_overlay_states_only_what_differs(config: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every value an overlay sets changes its recipe's default config (a value equal to the default's is
    a repetition); and the run directory follows the overlay's name."""
    recipe = _recipe(config)
    if recipe not in _DEFAULTS:  # the recipe's default resolves the same for each of its overlays
        _DEFAULTS[recipe] = _resolved(recipe, None, tmp_path, monkeypatch)
    default = copy.deepcopy(_DEFAULTS[recipe])
    overlay = _resolved(recipe, config, tmp_path, monkeypatch)
    raw = yaml.safe_load((PATHS[config]).read_text()) or {}
    repeated = []
    for path in _leaves(raw):
        # a fixed-class key (model.adapter...) sits under init_args in subclass mode
        candidates = [path] + [path.replace(f"{root}.", f"{root}.init_args.", 1) for root in ("model", "data")]
        for key in candidates:
            new = _at(overlay, key)
            if new is not KeyError:
                if _at(default, key) == new and not key.endswith("class_path"):
                    repeated.append(key)
                break
        else:
            pytest.fail(f"{config}.yaml sets {path}, which its resolved config lacks")
    assert not repeated, f"{config}.yaml repeats the default's values at {repeated}"
    assert overlay["trainer"]["default_root_dir"] == f"runs/{config}"
    assert {logger["init_args"]["save_dir"] for logger in overlay["trainer"]["logger"]} == {f"runs/{config}"}


@pytest.mark.slow
@pytest.mark.parametrize("config", ALL)
def test_every_config_rebuilds_from_its_hyperparameters(
    config: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hyperparameters a checkpoint keeps hold every value, the linked ones included (the heads' class
    counts, a rotary embedding's head width): the model rebuilt from them has the trained one's shapes."""
    from lightning.pytorch.cli import instantiate_module

    recipe = _recipe(config)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ATTNMM_CACHE", str(tmp_path / "cache"))
    args = ([f"--config={PATHS[config]}"] if config != recipe else []) + _data_args(recipe, config)
    cli: Any = recipe_main(recipe)(args, run=False)
    hparams = {k: v for k, v in cli.model.hparams.items() if k != "_instantiator"}
    rebuilt = instantiate_module(type(cli.model), hparams)
    shapes = {k: v.shape for k, v in cli.model.state_dict().items()}
    assert {k: v.shape for k, v in rebuilt.state_dict().items()} == shapes
    assert isinstance(next(iter(cli.model.state_dict().values())), torch.Tensor)
