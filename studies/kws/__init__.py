"""Keyword spotting on speakers never heard (Speech Commands, 12 classes): the study of the keyword config
(legacy records of both protocols; the pages are the protocol's ``tables`` and ``summary``). The res8 peer is
:mod:`studies.kws.cnn`, a checkpoint's test confusion matrix :mod:`studies.kws.measure`."""

from __future__ import annotations

from functools import cache
from typing import Any

from studies._runner import Items
from studies._runner.protocol import ProtocolError


@cache
def _split(folder: str, seed: int, val: float, test: float) -> dict[str, tuple[str, ...]]:
    from attnmm.data import resolve_root
    from attnmm.data.speech_commands import scan_class_folders, split_speech_commands

    parts = split_speech_commands(scan_class_folders(resolve_root(None, folder)), val, test, seed)
    return {k: tuple(sorted({c.speaker for c in v if c.speaker})) for k, v in parts.items()}


def resolve(spec: dict[str, Any], protocol: dict[str, Any]) -> Items:
    """The speakers of one part of a speaker-disjoint split of the Speech Commands folder."""
    parts = _split(spec["speech_commands"], spec["split_seed"], spec["val_fraction"], spec["test_fraction"])
    return Items.of(spec, speaker=parts[spec["part"]])


def run(candidate: Any, seed: int, train: Items | None, evaluate: Any, budget: dict[str, Any]) -> Any:
    raise ProtocolError(
        "the runs of this study were made before the runner (python recipes/speech_truncated.py fit ... and "
        "python -m studies kws measure evaluate); a new protocol needs test speakers neither split has scored")
