r"""Starting from a trained model: the adapter and encoder weights ("the backbone") of a checkpoint, loaded
into a compatible task, and small backbone files shipped with the package.

A backbone is the ``adapter.*`` and ``encoder.*`` entries of a task's state dict; the head, which maps the
encoder's output to one task's classes, is never part of it, so a model for new classes starts from the
backbone with a fresh head. Files are read with ``torch.load(weights_only=True)`` (tensors and plain
values only, no code is unpickled) and may be a Lightning checkpoint (``.ckpt``) or a file written by
:func:`export_backbone`. A name without a folder or suffix, e.g. ``speech_commands_8k``, names a backbone
shipped in ``attnmm/pretrained/`` (:func:`shipped_backbones`), found from any working directory.

Export a run's best checkpoint as a backbone file::

    python -m attnmm.lightning.pretrained runs/<config>/version_0/checkpoints/best-....ckpt out.pt
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

__all__ = ["BACKBONE_PARTS", "backbone_state", "export_backbone", "load_backbone", "resolve_backbone",
           "shipped_backbones"]

#: The parts of a task a backbone holds, by attribute (and state-dict prefix)
BACKBONE_PARTS = ("adapter", "encoder")
#: The folder of the backbones shipped with the package
SHIPPED = Path(__file__).resolve().parent.parent / "pretrained"


def shipped_backbones() -> list[str]:
    r"""The names of the backbones shipped in ``attnmm/pretrained/`` (``<name>.pt``), sorted."""
    return sorted(p.stem for p in SHIPPED.glob("*.pt"))


def resolve_backbone(source: str | Path) -> Path:
    r"""The file of a backbone: ``source`` itself when it is a file, else the shipped backbone of that name.

    Raises:
        FileNotFoundError: ``source`` is neither a file nor the name of a shipped backbone; the message
            lists the shipped ones.
    """
    path = Path(source).expanduser()
    if path.is_file():
        return path
    shipped = SHIPPED / f"{source}.pt"
    if path.name == str(source) and not path.suffix and shipped.is_file():
        return shipped
    raise FileNotFoundError(
        f"init_from={str(source)!r} is neither a file (looked for {path.resolve()}) nor the name of a backbone "
        f"shipped in {SHIPPED} (shipped: {shipped_backbones() or 'none'}); give the path of a checkpoint (.ckpt) "
        "or of a file written by python -m attnmm.lightning.pretrained, or a shipped name"
    )


def _read(path: Path) -> dict[str, Any]:
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # pickle errors, a truncated file, not a torch file
        raise RuntimeError(
            f"could not read {path} as a checkpoint: {err}. Give a Lightning checkpoint (.ckpt) or a backbone "
            "file written by python -m attnmm.lightning.pretrained"
        ) from err
    if not isinstance(data, dict):
        raise ValueError(f"{path} holds a {type(data).__name__}, not a checkpoint (a dict with a 'state_dict')")
    hparams = data.get("hyper_parameters") or {}
    if isinstance(hparams.get("model"), dict):  # an Ensemble's: the task's own, under model
        data["hyper_parameters"] = hparams["model"].get("init_args") or {}
    return data


def backbone_state(source: str | Path) -> dict[str, Tensor]:
    r"""The backbone entries (``adapter.*``, ``encoder.*``) of a checkpoint or backbone file.

    ``source`` is a path or a shipped name (:func:`resolve_backbone`). A file holding a ``state_dict``
    (a Lightning checkpoint, a backbone file) is read from it; a bare state dict is read as it is.

    Raises:
        ValueError: the file holds no backbone entry.
    """
    path = resolve_backbone(source)
    data = _read(path)
    state = data.get("state_dict", data)
    prefixes = tuple(f"{part}." for part in BACKBONE_PARTS)
    backbone = {k: v for k, v in state.items() if isinstance(k, str) and k.startswith(prefixes)}
    if not backbone:
        some = [k for k in state if isinstance(k, str)][:5]
        raise ValueError(
            f"{path} holds no adapter.* or encoder.* weights (its first entries: {some}); give the checkpoint of a "
            "task with an adapter and an encoder (ClassificationTask, SequenceTask)"
        )
    return backbone


def _shapes(names: Sequence[str], state: Mapping[str, Tensor]) -> str:
    return ", ".join(f"{n} {tuple(state[n].shape)}" for n in names)


def load_backbone(task: nn.Module, source: str | Path) -> list[str]:
    r"""Copy a checkpoint's adapter and encoder weights into ``task`` (its ``adapter`` and ``encoder``).

    Every backbone entry of ``task`` must be in the file with the same shape, and the other way round:
    anything else means the two models were built differently, and nothing is loaded.

    Args:
        task (nn.Module): a module with ``adapter`` and ``encoder`` parts (e.g. a
            :class:`~attnmm.lightning.ClassificationTask`).
        source (str or Path): a checkpoint, a backbone file or a shipped name (:func:`resolve_backbone`).

    Returns:
        list[str]: the names of the entries loaded.

    Raises:
        ValueError: entries are missing from the file, are not in the model, or differ in shape; the
            message names them (at most 10 of each) and says how to match the models.

    Examples:
        >>> import tempfile, os, torch
        >>> from attnmm.adapters import SpeechAdapter
        >>> from attnmm.nn import Encoder
        >>> from attnmm.lightning import ClassificationTask
        >>> from attnmm.nn import PoolingClassifier
        >>> old = ClassificationTask(SpeechAdapter(d_model=32), Encoder(32, 4, 1, 64), PoolingClassifier(32, 12), 12)
        >>> new = ClassificationTask(SpeechAdapter(d_model=32), Encoder(32, 4, 1, 64), PoolingClassifier(32, 10), 10)
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     path = os.path.join(tmp, "old.pt")
        ...     torch.save({"state_dict": old.state_dict()}, path)
        ...     names = load_backbone(new, path)  # the head (10 classes, not 12) is left as it is
        >>> torch.equal(new.encoder.layers[0].attn.q_proj.weight, old.encoder.layers[0].attn.q_proj.weight)
        True
    """
    missing_parts = [p for p in BACKBONE_PARTS if not isinstance(getattr(task, p, None), nn.Module)]
    if missing_parts:
        raise ValueError(f"{type(task).__name__} has no {' or '.join(missing_parts)} to load a backbone into")
    path = resolve_backbone(source)
    loaded = backbone_state(path)
    mine = {f"{p}.{k}": v for p in BACKBONE_PARTS for k, v in getattr(task, p).state_dict().items()}
    missing = [k for k in mine if k not in loaded]
    unexpected = [k for k in loaded if k not in mine]
    shape = [k for k in mine if k in loaded and loaded[k].shape != mine[k].shape]
    if missing or unexpected or shape:
        problems = []
        if shape:
            problems.append(
                f"{len(shape)} of another shape (in the file, then in the model): "
                + "; ".join(f"{k} {tuple(loaded[k].shape)} vs {tuple(mine[k].shape)}" for k in shape[:10])
            )
        if missing:
            problems.append(f"{len(missing)} missing from the file: {_shapes(missing[:10], mine)}")
        if unexpected:
            problems.append(f"{len(unexpected)} not in the model: {_shapes(unexpected[:10], loaded)}")
        raise ValueError(
            f"the backbone in {path} does not fit this model's adapter and encoder: {'; '.join(problems)}. "
            f"{_rate_hint(path, task)}Build the adapter and encoder with the options of the model that was saved "
            "(width, layers, mel bands, sample rate, mask kind), or train from scratch (init_from=None); only the "
            "head may differ"
        )
    for part in BACKBONE_PARTS:
        module = getattr(task, part)
        prefix = f"{part}."
        module.load_state_dict({k[len(prefix):]: v for k, v in loaded.items() if k.startswith(prefix)})
    return sorted(loaded)


def _rate_hint(path: Path, task: nn.Module) -> str:
    """A sentence on the sample rates when the file's adapter config names another rate than the model's."""
    config = (_read(path).get("hyper_parameters") or {}).get("adapter") or {}
    saved = (config.get("init_args") or config).get("sample_rate") if isinstance(config, dict) else None
    mine = getattr(task.adapter, "sample_rate", None)
    if saved is None or mine is None or saved == mine:
        return ""
    return (
        f"The backbone was trained on {saved} Hz audio and this model's adapter reads {mine} Hz: resample the data to "
        f"{saved} Hz (e.g. --data.sample_rate={saved} where the DataModule takes it). "
    )


def export_backbone(checkpoint: str | Path, out: str | Path, dtype: torch.dtype | None = None) -> Path:
    r"""Write the backbone of ``checkpoint`` (a Lightning checkpoint) to ``out``: its ``adapter.*`` and
    ``encoder.*`` weights under ``state_dict`` and the adapter's and encoder's configs (from the
    checkpoint's hyperparameters, when it has them) under ``hyper_parameters``, without the head, the
    optimizer state or anything else. ``dtype`` (e.g. ``torch.float16``) stores floating weights in that
    type to halve the file; they are loaded back into the model's type.

    Returns:
        Path: ``out``.
    """
    data = _read(resolve_backbone(checkpoint))
    backbone = backbone_state(checkpoint)
    if dtype is not None:
        backbone = {k: v.to(dtype) if v.is_floating_point() else v for k, v in backbone.items()}
    hparams = data.get("hyper_parameters") or {}
    config = {part: hparams[part] for part in BACKBONE_PARTS if part in hparams}
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"state_dict": {k: v.contiguous() for k, v in backbone.items()}, "hyper_parameters": config}, out)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Write the adapter and encoder weights of a checkpoint to a file.")
    parser.add_argument("checkpoint", help="a Lightning checkpoint (.ckpt) of a ClassificationTask or SequenceTask")
    parser.add_argument("out", help="the backbone file to write (e.g. attnmm/pretrained/<name>.pt)")
    parser.add_argument("--half", action="store_true", help="store floating weights as float16 (half the size)")
    args = parser.parse_args(argv)
    out = export_backbone(args.checkpoint, args.out, torch.float16 if args.half else None)
    print(f"wrote {out} ({out.stat().st_size / 1e6:.2f} MB, {len(backbone_state(out))} tensors)")


if __name__ == "__main__":
    main()
