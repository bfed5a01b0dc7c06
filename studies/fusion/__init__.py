"""Fusion you can trust (audio-visual digits): the study of the multimodal recipe's default.

Its runs and their evaluation under every condition are :mod:`studies.fusion.conditions`; this module is
what the study runner reads: the resolved sets (FSDD recordings by speaker and take); the README's
results block and the rows of docs/results.md are the protocol's ``tables`` and ``summary`` over
``store.json`` (legacy records of the four protocols, imported from ``stores/``). The multimodal recipe
page's conditions table is rendered from the
last draw's rich store by ``python -m studies fusion measure render``.
"""

from __future__ import annotations

from typing import Any

from studies._runner import Items
from studies._runner.protocol import ProtocolError

MEASURE_MODULE = "conditions"  # python -m studies fusion measure PART: the legacy runs' parts


def resolve(spec: dict[str, Any], protocol: dict[str, Any]) -> Items:
    """The FSDD recordings of ``spec["fsdd"]`` (speakers and an inclusive range of takes), ten digits each;
    the held-out gate voices (``gate_voices``) as their Speech Commands speakers."""
    if "fsdd" in spec:
        fsdd = spec["fsdd"]
        first, last = fsdd["takes"]
        recordings = [f"{d}_{s}_{t}" for s in fsdd["speakers"] for d in range(10) for t in range(first, last + 1)]
        return Items.of(recordings, speaker=fsdd["speakers"], recording=recordings)
    if "gate_voices" in spec:  # Speech Commands speakers: no FSDD speaker or recording
        return Items.of(spec, item=[f"speech_commands:{spec['gate_voices']}:held-out"])
    raise ValueError(f"unknown set spec {spec}")


def run(candidate: Any, seed: int, train: Items | None, evaluate: Any, budget: dict[str, Any]) -> Any:
    raise ProtocolError(
        "every FSDD test recording of this study is scored (store.json's 'scored'): a new protocol needs "
        "recordings FSDD does not have. The legacy runs are reproduced by python -m studies fusion measure.")
