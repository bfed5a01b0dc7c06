"""Keyword spotting on speakers never heard, class by class: ``python -m studies kws measure evaluate``.

Rebuilds a model of the speech recipe from its config arguments, loads a checkpoint (the one ``fit``
selected), predicts its test split (Speech Commands' 20 test speakers at seed 0) and stores the
confusion matrix, the accuracy and the accuracy of each class in
``studies/kws/stores/kws_<name>.json``; ``figure()`` draws the stored matrices side by side
(``python docs/make_figures.py kws_confusion``)::

    ATTNMM_DATA=/path/to/data python -m studies kws measure evaluate name=transformer \\
        ckpt=runs/.../averaged-best5.ckpt
    ATTNMM_DATA=/path/to/data python -m studies kws measure evaluate name=res8 ckpt=runs/.../best.ckpt \\
        config_args=--config=recipes/configs/speech_truncated_commands.yaml,--config=studies/kws/configs/kws_res8.yaml
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import torch

from studies._runner.stats import machine
from studies._runner.train import recipe_cli

RESULTS = Path(__file__).with_name("stores")


def evaluate(ckpt: str | Path, config_args: list[str]) -> dict[str, Any]:
    """The test split's confusion matrix (rows: true class, columns: predicted), accuracy and accuracy per class
    of the model the recipe builds from ``config_args`` with the weights of ``ckpt``."""
    cli = recipe_cli("speech_truncated", list(config_args))
    model, dm = cli.model, cli.datamodule
    state = torch.load(ckpt, map_location="cpu", weights_only=True)["state_dict"]
    model.load_state_dict(state)
    model.eval()
    dm.setup("test")
    classes = list(dm.class_names)
    confusion = torch.zeros(len(classes), len(classes), dtype=torch.long)
    with torch.no_grad():
        for batch in dm.test_dataloader():
            pred = model(batch).argmax(-1)
            confusion.index_put_((batch["label"], pred), torch.ones_like(pred), accumulate=True)
    per_class = (confusion.diag().double() / confusion.sum(1).clamp(min=1)).tolist()
    return {
        "classes": classes, "confusion": confusion.tolist(),
        "test_acc": float(confusion.diag().sum() / confusion.sum()),
        "per_class": dict(zip(classes, per_class)), "clips": int(confusion.sum()),
        "test_speakers": len(dm.split_speakers["test"]),
    }


def store_path(name: str) -> Path:
    return RESULTS / f"kws_{name}.json"


def load_stores(names: tuple[str, ...] = ("transformer", "res8")) -> dict[str, dict[str, Any]]:
    """The stored evaluations of ``names`` that exist."""
    return {n: json.loads(store_path(n).read_text()) for n in names if store_path(n).exists()}


def figure(stores: dict[str, dict[str, Any]]) -> Any:
    """Row-normalised confusion matrices of the stored models side by side, each class's accuracy on its row."""
    import matplotlib.pyplot as plt

    if not stores:
        raise ValueError("no stored keyword-spotting results; run python -m studies kws measure evaluate first")
    fig, axes = plt.subplots(1, len(stores), figsize=(6.2 * len(stores), 5.6), squeeze=False)
    for ax, (name, result) in zip(axes[0], stores.items()):
        confusion = torch.tensor(result["confusion"], dtype=torch.float64)
        rates = 100 * confusion / confusion.sum(1, keepdim=True).clamp(min=1)
        ax.imshow(rates.numpy(), cmap="Blues", vmin=0, vmax=100)
        classes = result["classes"]
        for i in range(len(classes)):
            for j in range(len(classes)):
                if confusion[i, j] > 0:
                    ax.text(j, i, int(confusion[i, j]), ha="center", va="center", fontsize=7,
                            color="white" if rates[i, j] > 60 else "black")
        ax.set_xticks(range(len(classes)), classes, rotation=60, fontsize=8)
        ax.set_yticks(range(len(classes)), [f"{c} {100 * result['per_class'][c]:.0f}%" for c in classes], fontsize=8)
        ax.set_xlabel("predicted")
        ax.set_title(f"{name}: {100 * result['test_acc']:.2f}% on {result['clips']} clips of "
                     f"{result['test_speakers']} unseen speakers", fontsize=9)
    axes[0][0].set_ylabel("spoken (accuracy of the class)")
    fig.tight_layout()
    return fig


def _evaluate(opts: argparse.Namespace) -> dict[str, Any]:
    """``python -m studies kws measure evaluate name=NAME ckpt=CKPT [config_args=ARG,ARG]``: kept in its own store."""
    if not (opts.name and opts.ckpt):
        raise SystemExit("give name=NAME (the store kws_NAME.json) and ckpt=CKPT (the checkpoint fit selected)")
    result = evaluate(opts.ckpt, opts.config_args)
    record = {"name": opts.name, "checkpoint": opts.ckpt, "config_args": opts.config_args, **result,
              "machine": machine()}
    store_path(opts.name).write_text(json.dumps(record, indent=1) + "\n")
    print(f"{opts.name}: test accuracy {100 * result['test_acc']:.2f}% on {result['clips']} clips")
    return {}


#: The options of ``evaluate``: the store's name, the checkpoint and the recipe's config arguments.
OPTIONS = {"name": None, "ckpt": None, "config_args": ["--config=recipes/configs/speech_truncated_commands.yaml"]}
MEASURE = {"evaluate": _evaluate}
