"""``python -m studies peptides_field measure parameters``: each recipe candidate's model built from its configs
(untrained): its parameters in all and by part, against the field's budget of 500k. ``measure epochs``: the wall
time of each candidate's epochs (training and validation) over the first ``epochs`` of its fit, on the budget's
threads, against a budget of 200-250 epochs in 90 minutes of two cores."""

from __future__ import annotations

from typing import Any

from studies._runner import Study
from studies._runner.train import epoch_seconds, parameters

OPTIONS = {"epochs": 2, "threads": 2}


def count(opts: Any) -> dict[str, Any]:
    return {f"parameters/{n}": parameters("graph_graph", c["configs"])
            for n, c in Study.load("peptides_field").protocol.candidates.items() if c["peer"] == "recipe"}


def epochs(opts: Any) -> dict[str, Any]:
    return {f"epochs/{n}": epoch_seconds("graph_graph", c["configs"], opts.epochs, opts.threads)
            for n, c in Study.load("peptides_field").protocol.candidates.items() if c["peer"] == "recipe"}


MEASURE = {"parameters": count, "epochs": epochs}
